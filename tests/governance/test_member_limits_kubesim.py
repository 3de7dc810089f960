"""A member's GPU limit inside a project, against a real kubesim (in-process reconciles, no
Celery): the job over the limit waits in the portal with the reason, is not sent to the cluster,
and goes once one of the member's jobs ends."""

import pytest

from tests.jobs.kubesim_org import count_owned, reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

SHORT = ["sh", "-c", "sleep 2"]


@pytest.fixture
def limited(org):
    from governance.services import member_limit_set
    from tests.factories import MembershipFactory, UserFactory

    admin = UserFactory(username=f"adm-{org['project'].slug}")
    MembershipFactory(user=admin, project=org["project"], role="admin")
    member_limit_set(actor=admin, project=org["project"], pool="h100", max_gpus=2)
    return org


def test_the_third_job_waits_with_the_reason_and_goes_when_one_ends(
    limited, django_capture_on_commit_callbacks, run_enqueued_tasks
):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile

    org = limited
    ns = org["project"].namespace
    first, second, third = (
        submit(org, kind="single", gpus=1, pool="h100", command=SHORT, name=f"cap-{i}")
        for i in range(3)
    )
    assert job_reconcile(job_id=first.pk) == "applied"
    assert job_reconcile(job_id=second.pk) == "applied"

    assert job_reconcile(job_id=third.pk) == "held"
    waiting = Job.objects.get(pk=third.pk)
    assert waiting.state == "submitted"
    assert waiting.applied_at is None
    assert "You hold 2 of your 2-GPU limit in this project (pool h100)" in waiting.state_message
    assert count_owned("Job", "batch/v1", ns, third.pk) == 0
    # The timeline says it once, however often the resync checks again.
    assert job_reconcile(job_id=third.pk) == "held"
    assert waiting.events.filter(reason="MemberGpuLimit").count() == 1

    # The end of one of the member's jobs queues a reconcile of the waiting one at once (the
    # periodic resync would also check it again); that reconcile sends it.
    run_enqueued_tasks()  # drop what the submissions queued
    with django_capture_on_commit_callbacks(execute=True):
        reconcile_until(first, {"succeeded"})
    ran = run_enqueued_tasks("jobs.tasks.reconcile_job")
    assert ("jobs.tasks.reconcile_job", (third.pk,)) in ran
    released = Job.objects.get(pk=third.pk)
    assert released.applied_at is not None
    assert released.state_message == ""
    assert count_owned("Job", "batch/v1", ns, third.pk) == 1


def test_mig_slices_count_as_the_gpus_they_partition(limited):
    """Seven 1g.10gb slices fit one H100: with a 2-GPU limit and one whole GPU held, slices go
    until they would need a second partitioned GPU."""
    from jobs.reconcile.services import job_reconcile

    org = limited
    whole = submit(org, kind="single", gpus=1, pool="h100", command=SHORT, name="whole")
    assert job_reconcile(job_id=whole.pk) == "applied"
    slices = [
        submit(org, kind="mig", mig_profile="1g.10gb", pool="h100", command=SHORT, name=f"s-{i}")
        for i in range(2)
    ]
    assert [job_reconcile(job_id=j.pk) for j in slices] == ["applied", "applied"]


def test_array_elements_go_only_up_to_the_limit(limited):
    from governance.services import member_limit_set
    from jobs.arrays.reconcile import array_reconcile
    from jobs.arrays.services import array_submit
    from jobs.models import Job

    org = limited
    member_limit_set(actor=_staff(), project=org["project"], pool="h100", max_gpus=3)
    array = array_submit(
        actor=org["user"],
        project=org["project"],
        data={
            "kind": "single",
            "gpus": 1,
            "pool": "h100",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "command": SHORT,
            "name": "arr",
            "array": {"count": 5, "parallelism": 5},
        },
    )
    counts = array_reconcile(array_id=array.pk)
    assert counts["applied"] == 3
    held = Job.objects.filter(array=array, applied_at__isnull=True)
    assert held.count() == 2
    assert all("3-GPU limit" in j.state_message for j in held)


def _staff():
    from tests.factories import UserFactory

    return UserFactory(username="limit-staff", is_staff=True)
