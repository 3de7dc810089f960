"""End to end: REST API → PostgreSQL → Redis → a real Celery worker → kubesim (CRD schemas,
Kueue and Volcano simulation) and back through the status mapping."""

import ast
import json
import re
import ssl
import time
import urllib.request

import pytest

from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

URL = "/api/v1/jobs/"
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def api_as(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    return client


def owned(api_version, kind, namespace, job_id):
    from portal.kube import apply as kube

    return kube.list_owned(
        api_version, kind, namespace=namespace, selector=f"gpu-portal.io/job-id={job_id}"
    )


def sync_quotas_and_wait(org):
    from portal.kube import apply as kube
    from quotas.tasks import sync_quotas

    sync_quotas.delay()
    wait_for(
        lambda: kube.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "gp-alpha", "gp-alpha"),
        what="the quota objects in kubesim",
    )


def submit(client, **data):
    body = {"project": "alpha", "image": IMAGE, "command": ["python", "train.py"], **data}
    response = client.post(URL, body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["state"] == "submitted"
    return response.json()


def states(ids):
    from jobs.models import Job

    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))


def resync_until(ids, wanted, timeout=90):
    from jobs.tasks import resync_jobs

    def done():
        resync_jobs.delay()
        current = states(ids)
        return all(s in wanted for s in current.values()) and current

    return wait_for(done, timeout=timeout, interval=1.0, what=f"jobs {ids} to reach {wanted}")


def kubesim_fault(server, body):
    context = ssl.create_default_context(cafile=str(server.ca_file))
    request = urllib.request.Request(
        server.url + "/kubesim/faults",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, context=context) as response:
        return json.loads(response.read())


def test_every_kind_and_backend_arrives_with_the_right_shape_and_finishes(e2e_org, worker_factory):
    worker_factory()
    sync_quotas_and_wait(e2e_org)
    client = api_as(e2e_org["bob"])
    single = submit(client, kind="single", gpus=2)
    mig = submit(client, kind="mig", mig_profile="1g.10gb")
    gang_kueue = submit(client, kind="gang", gpus=8, replicas=2, backend="kueue")
    gang_volcano = submit(client, kind="gang", gpus=8, replicas=2, backend="volcano")
    ns = "gp-alpha"

    (job,) = wait_for(lambda: owned("batch/v1", "Job", ns, single["id"]), what="single Job")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gp-alpha"
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"

    (job,) = wait_for(lambda: owned("batch/v1", "Job", ns, mig["id"]), what="MIG Job")
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1"

    (job,) = wait_for(lambda: owned("batch/v1", "Job", ns, gang_kueue["id"]), what="gang Job")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    (service,) = owned("v1", "Service", ns, gang_kueue["id"])
    assert service["spec"]["clusterIP"] == "None"

    (vcjob,) = wait_for(
        lambda: owned("batch.volcano.sh/v1alpha1", "Job", ns, gang_volcano["id"]),
        what="Volcano Job",
    )
    assert vcjob["spec"]["minAvailable"] == 2
    assert vcjob["spec"]["queue"] == "gp-alpha.h100"  # the project's queue of its one pool
    assert "pytorch" in vcjob["spec"]["plugins"]

    ids = [single["id"], mig["id"], gang_kueue["id"], gang_volcano["id"]]
    final = resync_until(ids, {"succeeded", "failed"})
    assert set(final.values()) == {"succeeded"}, final


def test_reconciling_twice_and_concurrently_creates_each_object_once(e2e_org, worker_factory):
    from jobs.tasks import reconcile_job

    worker_factory()
    sync_quotas_and_wait(e2e_org)
    client = api_as(e2e_org["bob"])
    jobs = [submit(client, kind="gang", gpus=1, replicas=2) for _ in range(4)]
    ids = [j["id"] for j in jobs]
    for _ in range(3):  # duplicates race each other on two worker processes
        for job_id in ids:
            reconcile_job.delay(job_id)
    wait_for(
        lambda: all(owned("batch/v1", "Job", "gp-alpha", i) for i in ids), what="all gang Jobs"
    )
    for _ in range(2):
        for job_id in ids:
            reconcile_job.delay(job_id)
    resync_until(ids, {"queued", "admitted", "running", "succeeded"})
    for job_id in ids:
        assert len(owned("batch/v1", "Job", "gp-alpha", job_id)) == 1
        assert len(owned("v1", "Service", "gp-alpha", job_id)) == 1


def test_a_killed_worker_loses_no_job(e2e_org, worker_factory):
    from jobs.tasks import resync_jobs

    worker = worker_factory()
    sync_quotas_and_wait(e2e_org)
    client = api_as(e2e_org["bob"])
    ids = [submit(client, kind="single", gpus=1)["id"] for _ in range(12)]
    wait_for(lambda: owned("batch/v1", "Job", "gp-alpha", ids[0]), what="the first Job")
    worker.kill()  # mid-backlog: some messages taken and never acknowledged
    worker_factory()
    resync_jobs.delay()  # what beat does every period
    wait_for(
        lambda: all(owned("batch/v1", "Job", "gp-alpha", i) for i in ids),
        timeout=90,
        what="every job's Job after the restart",
    )
    for job_id in ids:
        assert len(owned("batch/v1", "Job", "gp-alpha", job_id)) == 1


def test_jobs_submitted_during_an_api_outage_all_arrive_afterwards(
    e2e_org, worker_factory, e2e_kubesim
):
    from jobs.models import Job

    worker_factory()
    sync_quotas_and_wait(e2e_org)
    client = api_as(e2e_org["bob"])
    kubesim_fault(e2e_kubesim, {"unavailable_seconds": 6})
    ids = [submit(client, kind="single", gpus=1)["id"] for _ in range(8)]
    assert all(s == "submitted" for s in states(ids).values())
    wait_for(
        lambda: all(owned("batch/v1", "Job", "gp-alpha", i) for i in ids),
        timeout=120,
        interval=1.0,
        what="every job after the outage",
    )
    assert not Job.objects.filter(pk__in=ids, state="failed").exists()


def test_a_quota_edit_changes_the_cluster_queue_and_volcano_queue(e2e_org, worker_factory):
    from portal.kube import apply as kube
    from quotas.models import ProjectQuota
    from quotas.tasks import enqueue_quota_sync

    worker_factory()
    sync_quotas_and_wait(e2e_org)
    ProjectQuota.objects.filter(project=e2e_org["alpha"], resource="gpu").update(nominal=10)
    enqueue_quota_sync()  # what the admin's save calls

    def gpu_nominal():
        cq = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gp-alpha")
        resources = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        return next(r["nominalQuota"] for r in resources if r["name"] == "nvidia.com/gpu")

    wait_for(lambda: gpu_nominal() == 10, what="ClusterQueue nominalQuota 10")
    queue = kube.get("scheduling.volcano.sh/v1beta1", "Queue", "gp-alpha.h100")
    assert queue["spec"]["deserved"]["nvidia.com/gpu"] == "10"


def test_another_projects_user_gets_404(e2e_org, worker_factory):
    worker_factory()
    job = submit(api_as(e2e_org["bob"]), kind="single", gpus=1)
    oscar = api_as(e2e_org["oscar"])
    assert oscar.get(f"{URL}{job['id']}/").status_code == 404
    assert oscar.get(f"{URL}{job['id']}/manifest/").status_code == 404
    assert oscar.post(f"{URL}{job['id']}/cancel/").status_code == 404


def test_every_admin_page_that_feeds_quota_objects_syncs_the_cluster():
    from django.contrib import admin

    from quotas.admin_base import QuotaSyncOnChangeAdminMixin
    from quotas.models import DepartmentQuota, GpuPool, PriorityClass, ProjectQuota
    from tenants.models import Department, Project

    for model in (Department, Project, GpuPool, ProjectQuota, DepartmentQuota, PriorityClass):
        assert isinstance(admin.site._registry[model], QuotaSyncOnChangeAdminMixin), model


def test_editing_a_quota_in_the_admin_console_updates_the_cluster(e2e_org, worker_factory):
    from django.contrib.auth import get_user_model
    from django.test import Client

    from portal.kube import apply as kube
    from quotas.models import ProjectQuota

    worker_factory()
    sync_quotas_and_wait(e2e_org)
    staff = get_user_model().objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(staff)
    quota = ProjectQuota.objects.get(project=e2e_org["alpha"], resource="gpu")
    response = client.post(
        f"/admin/quotas/projectquota/{quota.pk}/change/",
        {
            "project": quota.project_id,
            "pool": quota.pool_id,
            "resource": "gpu",
            "nominal": "6",
            "borrowing_limit": "2",
        },
    )
    assert response.status_code == 302, response.content[:2000]

    def gpu_entry():
        cq = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gp-alpha")
        resources = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        return next(r for r in resources if r["name"] == "nvidia.com/gpu")

    wait_for(lambda: gpu_entry()["nominalQuota"] == 6, what="ClusterQueue nominalQuota 6")
    queue = kube.get("scheduling.volcano.sh/v1beta1", "Queue", "gp-alpha.h100")
    assert queue["spec"]["deserved"]["nvidia.com/gpu"] == "6"


def test_beat_resyncs_jobs_and_quotas_every_period():
    from django.conf import settings

    entries = [
        entry
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
        if entry["task"] == "jobs.tasks.resync_all"
    ]
    assert len(entries) == 1
    assert entries[0]["schedule"].run_every.total_seconds() == settings.PORTAL_RESYNC_SECONDS


def test_a_lost_message_costs_at_most_one_resync_period(e2e_org, worker_factory, e2e_redis_url):
    """Redis restarted empty: the submission's message is gone; beat's resync applies the job."""
    import redis

    client = api_as(e2e_org["bob"])
    from quotas.sync import sync_quota_objects

    sync_quota_objects()
    job = submit(client, kind="single", gpus=1)
    broker = redis.Redis.from_url(e2e_redis_url)
    broker.flushdb()
    assert broker.dbsize() == 0  # nothing left that could apply the job but the resync
    worker = worker_factory(beat_seconds=3)
    wait_for(
        lambda: owned("batch/v1", "Job", "gp-alpha", job["id"]),
        timeout=120,  # a worker's start on a loaded machine; the period is checked below
        what="the job after its message was lost",
    )
    # At most one period: the first resync the worker received is the one that found the job
    # and enqueued its reconcile (celery logs each task's receipt and result; results can come
    # in another order when resyncs overlap on a loaded machine).
    log = worker.log.read_text
    first = wait_for(
        lambda: re.search(r"Task jobs\.tasks\.resync_jobs\[([^\]]+)\] received", log()),
        what="the first resync",
    )[1]
    result = wait_for(
        lambda: re.search(
            rf"Task jobs\.tasks\.resync_jobs\[{re.escape(first)}\] succeeded in [^:]+: "
            r"(\{[^}]*\})",
            log(),
        ),
        what="the first resync's result",
    )[1]
    assert ast.literal_eval(result)["enqueued"] == 1, result


def test_jobs_cancelled_while_their_apply_is_slow_leave_nothing_in_the_cluster(
    e2e_org, worker_factory, e2e_kubesim
):
    """A loaded API server (every Job write waits 150 ms): jobs cancelled while their apply is
    on its way must not keep running in the cluster while the portal shows them Cancelled."""
    from jobs.models import Job

    worker_factory()
    sync_quotas_and_wait(e2e_org)
    client = api_as(e2e_org["bob"])
    kubesim_fault(e2e_kubesim, {"write_delay_seconds": 0.15, "write_delay_path": "/jobs/"})
    try:
        ids = []
        for _ in range(20):
            job = submit(client, kind="single", gpus=1, command=["sleep", "3600"])
            time.sleep(0.05)  # let a worker take the submission's reconcile and start applying
            response = client.post(f"{URL}{job['id']}/cancel/")
            assert response.status_code == 200, response.content
            ids.append(job["id"])
        wait_for(
            lambda: (
                not Job.objects.filter(pk__in=ids)
                .exclude(state="cancelled", cleanup_pending=False)
                .exists()
            ),
            timeout=90,
            what="every cancel to be cleaned up",
        )
    finally:
        kubesim_fault(e2e_kubesim, {"write_delay_seconds": 0})
    # Once a job's clean-up is recorded no apply of it is in flight (the job's lock), so what
    # is in the cluster now stays.
    left = {job_id: owned("batch/v1", "Job", "gp-alpha", job_id) for job_id in ids}
    assert {job_id: len(objs) for job_id, objs in left.items() if objs} == {}
