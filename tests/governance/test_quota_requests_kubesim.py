"""A temporary quota request against a real kubesim with the quota sync and the real client:
approval raises the project's quota and the job waiting in Kueue for it starts; after the end
date the quota falls back, never below what runs (running jobs finish, new ones wait)."""

import datetime

import pytest

from tests.jobs.kubesim_org import reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

LONG = ["sh", "-c", "sleep 3600"]


def _nominal(org) -> int:
    from quotas.models import ProjectQuota

    return ProjectQuota.objects.get(
        project=org["project"], pool=org["pool"], resource="gpu"
    ).nominal


def _cluster_queue_gpus(org) -> int:
    from portal.kube import apply as kube
    from quotas import manifests as qm

    queue = kube.get(
        "kueue.x-k8s.io/v1beta2", "ClusterQueue", qm.cluster_queue_name(org["project"].slug)
    )
    for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
        for resource in flavor["resources"]:
            if resource["name"] == "nvidia.com/gpu":
                return int(resource["nominalQuota"])
    raise AssertionError("no GPU quota in the ClusterQueue")


def test_an_approved_request_starts_a_waiting_job_and_the_quota_falls_back_after_it(org):
    from governance.models import QuotaRequest
    from governance.services import (
        quota_request_approve,
        quota_request_create,
        quota_requests_end,
    )
    from jobs.models import Job
    from jobs.services import job_cancel
    from quotas.sync import sync_quota_objects
    from tests.factories import MembershipFactory, UserFactory

    admin = UserFactory(username=f"qa-{org['project'].slug}")
    MembershipFactory(user=admin, project=org["project"], role="admin")
    staff = UserFactory(username=f"qs-{org['project'].slug}", is_staff=True)
    assert _nominal(org) == 16
    jobs = [
        submit(org, kind="single", gpus=8, pool="h100", command=LONG, name=f"big-{i}")
        for i in range(3)
    ]
    for job in jobs[:2]:
        reconcile_until(job, {"running"})
    reconcile_until(jobs[2], {"queued"})  # 16 of 16 guaranteed GPUs are in use

    until = datetime.datetime.now(tz=datetime.UTC).date() + datetime.timedelta(days=3)
    request = quota_request_create(
        actor=admin, project=org["project"], pool="h100", gpus=8, until=until, reason="deadline"
    )
    quota_request_approve(actor=staff, request=request, note="ok")
    assert _nominal(org) == 24
    assert sync_quota_objects().errors == []
    assert _cluster_queue_gpus(org) == 24
    reconcile_until(jobs[2], {"admitted", "running"})

    # Past the end date while all 24 GPUs run: nothing is taken from the running jobs.
    after = until + datetime.timedelta(days=1)
    assert quota_requests_end(today=after) == {"expired": 0, "expiring": 1}
    assert _nominal(org) == 24
    request.refresh_from_db()
    assert (request.status, request.granted) == ("expiring", 8)

    job_cancel(actor=org["user"], job=Job.objects.get(pk=jobs[0].pk))
    assert quota_requests_end(today=after) == {"expired": 1, "expiring": 0}
    assert _nominal(org) == 16
    request.refresh_from_db()
    assert (request.status, request.granted) == ("expired", 0)
    assert sync_quota_objects().errors == []
    assert _cluster_queue_gpus(org) == 16
    # Idempotent: another run finds nothing to do.
    assert quota_requests_end(today=after) == {"expired": 0, "expiring": 0}
    assert _nominal(org) == 16
    assert QuotaRequest.objects.get(pk=request.pk).status == "expired"
