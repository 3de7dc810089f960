"""The project page's GPU limits and quota requests, and the staff's decision on the overview."""

import datetime

import pytest

from governance.models import MemberGpuLimit, QuotaRequest

pytestmark = pytest.mark.django_db


def test_an_admin_sets_a_limit_on_the_project_page_and_members_see_it(personas, web_client_for):
    admin = web_client_for(personas.admin)
    answer = admin.post(
        "/projects/alpha/gpu-limits/", {"pool": "h100", "user": "bob", "max_gpus": "4"}
    )
    assert answer.status_code == 302
    page = web_client_for(personas.member).get("/projects/alpha/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "GPU limits per member" in text
    assert 'id="gpu-limit-' in text
    assert "Set a limit" not in text  # members read, admins write
    refused = web_client_for(personas.member).post(
        "/projects/alpha/gpu-limits/", {"pool": "h100", "max_gpus": "9"}
    )
    assert refused.status_code == 403


def test_a_bad_limit_shows_the_form_again_with_the_error(personas, web_client_for):
    answer = web_client_for(personas.admin).post(
        "/projects/alpha/gpu-limits/", {"pool": "a100", "max_gpus": "4"}
    )
    assert answer.status_code == 400
    assert "has no quota in pool &#x27;a100&#x27;" in answer.content.decode()
    assert not MemberGpuLimit.objects.exists()


def test_a_request_from_the_project_page_is_decided_on_the_overview(personas, web_client_for):
    until = datetime.datetime.now(tz=datetime.UTC).date() + datetime.timedelta(days=5)
    sent = web_client_for(personas.admin).post(
        "/projects/alpha/quota-requests/",
        {"pool": "h100", "gpus": "2", "until": str(until), "reason": "sweep"},
    )
    assert sent.status_code == 302
    request = QuotaRequest.objects.get()
    staff = web_client_for(personas.staff)
    overview = staff.get("/overview/").content.decode()
    assert f'id="pending-request-{request.pk}"' in overview

    url = f"/overview/quota-requests/{request.pk}/decide/"
    assert staff.post(url, {"decision": "refuse"}).status_code == 302
    assert QuotaRequest.objects.get().status == "pending"  # a refusal needs a note
    staff.post(url, {"decision": "approve"})
    assert QuotaRequest.objects.get().status == "approved"
    assert web_client_for(personas.admin).post(url, {"decision": "approve"}).status_code == 403


def test_staff_approve_in_the_admin_console(personas, web_client_for):
    from quotas.models import ProjectQuota

    until = datetime.datetime.now(tz=datetime.UTC).date() + datetime.timedelta(days=5)
    request = QuotaRequest.objects.create(
        project=personas.project_a,
        pool=personas.pool,
        gpus=3,
        until=until,
        reason="x",
        requester=personas.admin,
    )
    personas.staff.is_superuser = True
    personas.staff.save()
    answer = web_client_for(personas.staff).post(
        "/admin/governance/quotarequest/",
        {"action": "approve", "_selected_action": [request.pk]},
    )
    assert answer.status_code == 302
    assert QuotaRequest.objects.get().status == "approved"
    assert ProjectQuota.objects.get(project=personas.project_a, resource="gpu").nominal == 11
