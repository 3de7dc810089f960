"""The priorities admin page says what each class is promised, from the emitted policy."""

import json

import pytest

from quotas.models import PriorityClass


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


def test_the_page_shows_the_policy_and_who_may_preempt_each_class(db, staff_client):
    response = staff_client.get("/admin/quotas/priorityclass/")
    assert response.status_code == 200
    policy = json.loads(response.context["preemption_policy"])
    assert policy["reclaimWithinCohort"] == "LowerPriority"
    assert policy["withinClusterQueue"] == "LowerPriority"
    page = response.content.decode()
    assert "Never preempted (no class has a higher priority)." in page
    assert "&quot;reclaimWithinCohort&quot;: &quot;LowerPriority&quot;" in page
    assert "from borrowing jobs of lower priority" in page


def test_a_promise_kueue_cannot_keep_is_flagged_and_preemption_turned_off(db, staff_client):
    PriorityClass.objects.filter(name="high").update(preemptible=True)
    PriorityClass.objects.filter(name="normal").update(preemptible=False)
    response = staff_client.get("/admin/quotas/priorityclass/")
    policy = json.loads(response.context["preemption_policy"])
    assert policy == {"reclaimWithinCohort": "Never", "withinClusterQueue": "Never"}
    page = response.content.decode()
    assert "Marked not preemptible but below another class: normal." in page
    assert "Never preempted: preemption is off." in page
