"""Reconciliation against a real kubesim (HTTPS Kubernetes API, CRD schemas, Kueue/Volcano
simulation), in-process: services and tasks' bodies, no Celery (tests/e2e has the worker)."""

import time

import pytest

from kubesim.testing import KubesimProcess, shared_crds_dir

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KubesimProcess(
        crds=[shared_crds_dir()], speed=100, workdir=tmp_path_factory.mktemp("ks-reconcile")
    ) as server:
        yield server


@pytest.fixture
def org(cluster, settings, db):
    """A department with two projects, an H100 pool, priorities, and quotas synced in."""
    from portal.kube.client import reset_api_client
    from quotas.models import PriorityClass
    from quotas.sync import sync_quota_objects
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        MembershipFactory,
        ProjectFactory,
        ProjectQuotaFactory,
        UserFactory,
    )

    settings.KUBECONFIG = str(cluster.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    dept = DepartmentFactory(slug="rs", name="Research")
    project = ProjectFactory(slug=f"p{int(time.time() * 1000) % 10**8}", department=dept)
    pool = GpuPoolFactory(
        slug="h100",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=3,
        mig_profiles=["1g.10gb"],
    )
    ProjectQuotaFactory(project=project, pool=pool, resource="gpu", nominal=16)
    ProjectQuotaFactory(project=project, pool=pool, resource="1g.10gb", nominal=4)
    for name, value, preemptible in (
        ("high", 1000, False),
        ("normal", 500, True),
        ("low", 100, True),
    ):
        PriorityClass.objects.get_or_create(
            name=name, defaults={"value": value, "preemptible": preemptible}
        )
    user = UserFactory(username=f"u-{project.slug}")
    MembershipFactory(user=user, project=project, role="member")
    report = sync_quota_objects()
    assert report.errors == []
    return {"project": project, "user": user, "pool": pool}


def submit(org, **data):
    from jobs.services import job_submit

    body = {"image": "nvcr.io/nvidia/pytorch:24.08-py3", "command": ["python", "train.py"]}
    body.update(data)
    return job_submit(actor=org["user"], project=org["project"], data=body).job


def reconcile_until(job, states, timeout=60.0):
    from jobs.models import Job
    from jobs.reconcile import job_reconcile

    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        job_reconcile(job_id=job.pk)
        state = Job.objects.get(pk=job.pk).state
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in states:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"job {job.pk} stuck; states seen: {seen}")


def count_owned(kind, api_version, namespace, job_id):
    from portal.kube import apply as kube

    return len(
        kube.list_owned(
            api_version, kind, namespace=namespace, selector=f"gpu-portal.io/job-id={job_id}"
        )
    )


@pytest.mark.parametrize(
    ("data", "objects"),
    [
        ({"kind": "single", "gpus": 1}, [("Job", "batch/v1")]),
        ({"kind": "mig", "mig_profile": "1g.10gb"}, [("Job", "batch/v1")]),
        (
            {"kind": "gang", "gpus": 8, "replicas": 2, "backend": "kueue"},
            [("Job", "batch/v1"), ("Service", "v1")],
        ),
        (
            {"kind": "gang", "gpus": 8, "replicas": 2, "backend": "volcano"},
            [("Job", "batch.volcano.sh/v1alpha1")],
        ),
    ],
    ids=["single", "mig", "gang-kueue", "gang-volcano"],
)
def test_each_kind_runs_to_success_and_reconcile_twice_creates_nothing_twice(org, data, objects):
    from jobs.reconcile import job_reconcile

    job = submit(org, **data)
    ns = org["project"].namespace
    assert job_reconcile(job_id=job.pk) == "applied"
    job_reconcile(job_id=job.pk)
    job_reconcile(job_id=job.pk)
    for kind, api_version in objects:
        assert count_owned(kind, api_version, ns, job.pk) == 1
    seen = reconcile_until(job, {"succeeded", "failed"})
    assert seen[-1] == "succeeded", seen
    assert "running" in seen or "admitted" in seen or "queued" in seen


@pytest.mark.django_db(transaction=True)
def test_concurrent_reconciles_create_one_object(org):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from jobs.reconcile import job_reconcile

    job = submit(org, kind="single", gpus=1)

    def run(_):
        try:
            return job_reconcile(job_id=job.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(run, range(4)))
    assert count_owned("Job", "batch/v1", org["project"].namespace, job.pk) == 1


def test_cancel_deletes_the_cluster_objects(org):
    from jobs.models import Job
    from jobs.reconcile import job_reconcile
    from jobs.services import job_cancel

    job = submit(org, kind="gang", gpus=1, replicas=2, backend="kueue")
    job_reconcile(job_id=job.pk)
    ns = org["project"].namespace
    assert count_owned("Service", "v1", ns, job.pk) == 1
    job_cancel(actor=org["user"], job=job)
    assert job_reconcile(job_id=job.pk) == "deleted"
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    assert count_owned("Job", "batch/v1", ns, job.pk) == 0
    assert count_owned("Service", "v1", ns, job.pk) == 0


def test_drift_before_start_recreates_and_after_start_fails(org, settings):
    from jobs.manifests import object_name
    from jobs.models import Job
    from jobs.reconcile import job_reconcile
    from portal.kube import apply as kube

    ns = org["project"].namespace
    # Queued job (it asks for more than is free right now? no: simply not admitted yet).
    queued = submit(org, kind="single", gpus=1, priority="low")
    job_reconcile(job_id=queued.pk)
    kube.delete("batch/v1", "Job", object_name(queued.pk), ns)
    assert job_reconcile(job_id=queued.pk) == "recreated"
    assert count_owned("Job", "batch/v1", ns, queued.pk) == 1

    # A job seen running, then deleted by hand, is marked failed with the reason.
    job = submit(org, kind="single", gpus=1, command=["sleep", "3600"])
    reconcile_until(job, {"running"})
    kube.delete("batch/v1", "Job", object_name(job.pk), ns)
    time.sleep(0.2)
    assert job_reconcile(job_id=job.pk) == "failed"
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "failed"
    assert stored.state_reason == "ObjectDeleted"
    assert "deleted outside the portal" in stored.state_message


def test_a_rejected_manifest_marks_the_job_failed_with_the_servers_message(org):
    from jobs.models import Job
    from jobs.reconcile import job_reconcile

    job = submit(org, kind="single", gpus=1)
    # Bypass validation to make the API server itself refuse the object.
    Job.objects.filter(pk=job.pk).update(cpu="lots")
    assert job_reconcile(job_id=job.pk) == "rejected"
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "failed"
    assert stored.state_reason == "Rejected"
    assert "is invalid" in stored.state_message or "quantities" in stored.state_message


def test_quota_edit_and_delete_touch_only_owned_objects(org):
    from portal.kube import apply as kube
    from quotas.models import ProjectQuota
    from quotas.sync import sync_quota_objects

    project = org["project"]
    name = f"gp-{project.slug}"
    # An object the portal does not own, in the way of nothing.
    kube.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "someone-elses"},
            "spec": {"namespaceSelector": {}},
        }
    )
    # Nothing changed: the resync only lists, it applies nothing.
    again = sync_quota_objects()
    assert (again.applied, again.deleted, again.errors) == (0, 0, [])
    assert again.unchanged > 0
    ProjectQuota.objects.filter(project=project, resource="gpu").update(nominal=12)
    changed = sync_quota_objects()
    # The ClusterQueue, the project's and department's Volcano queues, the ResourceQuota.
    assert changed.applied == 4, changed
    cq = kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name)
    gpu = next(
        r
        for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        if r["name"] == "nvidia.com/gpu"
    )
    assert gpu["nominalQuota"] == 12
    # Volcano: one leaf queue per pool (gp-<project>.<pool>).
    queue = kube.get("scheduling.volcano.sh/v1beta1", "Queue", f"{name}.h100")
    assert queue["spec"]["deserved"]["nvidia.com/gpu"] == "12"
    # Removing the project's jobs' protection is not needed: a project without jobs is removable.
    from jobs.models import Job

    Job.objects.filter(project=project).delete()
    project.delete()
    report = sync_quota_objects()
    assert report.deleted >= 3
    assert kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", name) is None
    assert kube.get("scheduling.volcano.sh/v1beta1", "Queue", f"{name}.h100") is None
    assert kube.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", "someone-elses") is not None


def test_a_failing_container_fails_the_job_with_its_exit_code(org):
    from jobs.models import Job

    job = submit(org, kind="single", gpus=1, command=["sh", "-c", "sleep 1; exit 3"])
    seen = reconcile_until(job, {"succeeded", "failed"})
    assert seen[-1] == "failed", seen
    stored = Job.objects.get(pk=job.pk)
    assert "exited with code 3" in stored.state_message, stored.state_message


def test_a_higher_priority_job_preempts_and_the_victim_shows_preempted(org):
    from jobs.models import Job

    low = submit(org, kind="gang", gpus=8, replicas=2, priority="low", command=["sleep", "36000"])
    reconcile_until(low, {"running"})
    high = submit(org, kind="gang", gpus=8, replicas=2, priority="high")
    reconcile_until(high, {"admitted", "running", "succeeded"})
    reconcile_until(low, {"preempted", "queued"})
    stored = Job.objects.get(pk=low.pk)
    events = list(stored.events.values_list("to_state", flat=True))
    assert "preempted" in events, (events, stored.state_reason, stored.state_message)
    # The victim is requeued, not failed: once the high-priority gang is done it runs again.
    reconcile_until(high, {"succeeded"})
    seen = reconcile_until(low, {"running", "failed"})
    assert seen[-1] == "running", (seen, Job.objects.get(pk=low.pk).state_message)
