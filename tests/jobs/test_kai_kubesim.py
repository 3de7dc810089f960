"""Issue 25 end to end against kubesim's KAI Scheduler, with the official client: the quota
sync's KAI Queues, GPU fractions sharing one GPU, a gang that starts whole or not at all, and a
project that borrows idle quota and gives it back. In-process (services and the reconcile's
body); one kubesim for the module with a KAI node pool per concern (kai_cluster.yaml)."""

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from kubesim.testing import KubesimProcess

from tests.jobs.kubesim_org import H100, reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

LONG = ["sleep", "3600"]  # simulated seconds: "runs until cancelled" at this speed
SHORT = ["sleep", "20"]


@pytest.fixture(scope="module")
def kai_cluster(tmp_path_factory):
    cluster = Path(__file__).with_name("kai_cluster.yaml")
    workdir = tmp_path_factory.mktemp("ks-kai")
    with KubesimProcess(cluster=cluster, speed=50, workdir=workdir) as server:
        yield server


@pytest.fixture
def kai_org(kai_cluster, settings, db):
    """Department rs, projects alpha and beta, three KAI pools, quotas synced into kubesim."""
    from portal.kube.client import reset_api_client
    from quotas.sync import sync_quota_objects
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        MembershipFactory,
        ProjectFactory,
        ProjectQuotaFactory,
        UserFactory,
        ensure_priority_classes,
    )

    settings.KUBECONFIG = str(kai_cluster.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    tag = int(time.time() * 1000) % 10**7
    dept = DepartmentFactory(slug=f"rs{tag}", name="Research")
    alpha = ProjectFactory(slug=f"alpha{tag}", department=dept)
    beta = ProjectFactory(slug=f"beta{tag}", department=dept)
    pools = {}
    for shard, nodes, gpus in (("frac", 1, 1), ("gang", 2, 8), ("share", 1, 8)):
        pools[shard] = GpuPoolFactory(
            slug=f"kai-{shard}",
            gpu_model=H100,
            node_labels={"kai.scheduler/node-pool": shard},
            node_count=nodes,
            gpus_per_node=gpus,
            scheduler="kai",
            kai_fractions_allowed=shard == "frac",
        )
    for project in (alpha, beta):
        ProjectQuotaFactory(project=project, pool=pools["frac"], resource="gpu", nominal=1)
        ProjectQuotaFactory(project=project, pool=pools["gang"], resource="gpu", nominal=16)
        ProjectQuotaFactory(project=project, pool=pools["share"], resource="gpu", nominal=4)
    ensure_priority_classes()
    user = UserFactory(username=f"u-{tag}")
    for project in (alpha, beta):
        MembershipFactory(user=user, project=project, role="member")
    report = sync_quota_objects()
    assert report.errors == []
    yield {"alpha": alpha, "beta": beta, "user": user, "pools": pools, "dept": dept}
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_cancel

    for job in Job.objects.active():  # free the GPUs for the next test
        job_cancel(actor=user, job=job)
        job_reconcile(job_id=job.pk)


def _submit(org, project, **data):
    return submit({"user": org["user"], "project": org[project]}, **data)


def _pods(job):
    from jobs.manifests import job_selector
    from portal.kube import apply as kube

    return kube.list_objects(
        "v1", "Pod", namespace=job.project.namespace, label_selector=job_selector(job.pk)
    )


def _shared_gpu(job) -> str:
    """The UUID of the GPU a fraction job's pod shares, as the portal records it."""
    from jobs.status import KAI_RESERVATION_NAMESPACE, kai_reservations, pod_record, with_shared_gpu
    from portal.kube import apply as kube

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reservations = kai_reservations(
            kube.list_objects("v1", "Pod", namespace=KAI_RESERVATION_NAMESPACE)
        )
        records = [with_shared_gpu(pod_record(p), reservations) for p in _pods(job)]
        if records and records[0].gpu_uuids:
            return records[0].gpu_uuids[0]
        time.sleep(0.2)
    raise AssertionError(f"job {job.pk} never got a shared GPU")


def _record_pods(job) -> None:
    """What the cluster watcher records of a job's pods (jobs.watcher.pod_gpus), stored."""
    from jobs.services import job_record_pods
    from jobs.status import KAI_RESERVATION_NAMESPACE, kai_reservations
    from jobs.watcher.pod_gpus import pod_records
    from portal.kube import apply as kube

    def reservations():
        return kai_reservations(kube.list_objects("v1", "Pod", namespace=KAI_RESERVATION_NAMESPACE))

    records = pod_records(job.project.namespace, _pods(job), kai_reservations=reservations)
    job_record_pods(job_id=job.pk, records=records, present_uids={r.uid for r in records})


def _collect_metrics():
    from django.conf import settings

    from gpumetrics import services
    from portal.kube.metrics import reset_scrape_clients

    settings.PORTAL_METRICS_PERIOD_SECONDS = 15
    reset_scrape_clients()
    return services.collect(now=int(time.time()))


def _reconcile_all(jobs, rounds=1):
    from jobs.reconcile.services import job_reconcile

    for _ in range(rounds):
        for job in jobs:
            job_reconcile(job_id=job.pk)


def _states(jobs):
    from jobs.models import Job

    return [Job.objects.get(pk=j.pk).state for j in jobs]


def _wait_states(jobs, wanted, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reconcile_all(jobs)
        if _states(jobs) == wanted:
            return
        time.sleep(0.2)
    raise AssertionError(f"states {_states(jobs)}, wanted {wanted}")


def test_quota_sync_writes_kai_queues_the_crd_accepts_and_kubectl_reads(kai_org, kai_cluster):
    from quotas.models import QuotaSyncStatus

    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run(
        [kubectl, "--kubeconfig", str(kai_cluster.kubeconfig), "get", "queues.scheduling.run.ai"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    dept, alpha = kai_org["dept"].slug, kai_org["alpha"].slug
    for name in (f"gp-dept-{dept}.kai-frac", f"gp-{alpha}.kai-share", f"gp-{alpha}.kai-gang"):
        assert name in out
    assert QuotaSyncStatus.objects.get().outcome == "ok"


def test_a_rejected_kai_queue_is_reported_and_nothing_is_deleted(kai_org, monkeypatch):
    from portal.kube import apply as kube
    from quotas import manifests as qm
    from quotas.models import ProjectQuota, QuotaSyncStatus
    from quotas.sync import sync_quota_objects

    # The beta queue of the share pool would go (its quota removed) while alpha's is refused.
    ProjectQuota.objects.filter(project=kai_org["beta"], pool=kai_org["pools"]["share"]).delete()
    real = qm._kai_resources
    monkeypatch.setattr(
        qm,
        "_kai_resources",
        lambda quota, limit, weight: {**real(quota, limit, weight), "gpu": {"quota": "lots"}},
    )
    report = sync_quota_objects()
    assert any("rejected" in e and "no KAI Queue was deleted" in e for e in report.errors)
    status = QuotaSyncStatus.objects.get()
    assert status.outcome == "errors"
    assert "KAI Queue" in status.message
    beta_queue = f"gp-{kai_org['beta'].slug}.kai-share"
    assert kube.get(qm.KAI_QUEUE_API, "Queue", beta_queue) is not None


def test_half_gpus_share_one_gpu_and_a_third_fits_only_if_small_enough(kai_org):
    from gpumetrics.models import JobGpu
    from jobs.models import Job, JobEvent
    from jobs.selectors import pods_with_shares

    a = _submit(kai_org, "alpha", kind="single", gpu_fraction=0.5, command=SHORT)
    b = _submit(kai_org, "beta", kind="single", gpu_fraction=0.5, command=SHORT)
    assert (a.backend, a.eligible_pools) == ("kai", ["kai-frac"])
    _reconcile_all([a, b])
    uuid = _shared_gpu(a)
    assert uuid == _shared_gpu(b)
    _record_pods(a)
    _record_pods(b)
    (pod,) = pods_with_shares(job=a)
    assert pod.share_text == f"0.5 of {uuid} (shared with 1 other job)"
    assert reconcile_until(a, {"succeeded"})[-1] == "succeeded"
    assert reconcile_until(b, {"succeeded"})[-1] == "succeeded"

    # 0.5 + 0.25 on the one GPU: another 0.5 waits, another 0.25 joins them.
    half = _submit(kai_org, "alpha", kind="single", gpu_fraction=0.5, command=LONG)
    quarter = _submit(kai_org, "alpha", kind="single", gpu_fraction=0.25, command=LONG)
    _wait_states([half, quarter], ["running", "running"])
    # The exporter shows the shared GPU under KAI's reservation pod: both jobs get it, and the
    # isolation check stays quiet about a GPU shared by design.
    shared = _shared_gpu(half)
    _record_pods(half)
    _record_pods(quarter)
    _collect_metrics()
    for job in (half, quarter):
        assert [d.gpu_uuid for d in JobGpu.objects.filter(job=job)] == [shared]
    assert not JobEvent.objects.filter(reason="IsolationCheck").exists()
    late_half = _submit(kai_org, "alpha", kind="single", gpu_fraction=0.5, command=LONG)
    late_quarter = _submit(kai_org, "alpha", kind="single", gpu_fraction=0.25, command=LONG)
    _wait_states([late_quarter], ["running"])
    assert _shared_gpu(late_quarter) == _shared_gpu(half) == _shared_gpu(quarter)
    _reconcile_all([late_half], rounds=3)
    waiting = Job.objects.get(pk=late_half.pk)
    assert waiting.state == "queued"
    assert not any((p.get("spec") or {}).get("nodeName") for p in _pods(late_half))


def _isolation_warns_for_a_whole_gpu_in_two_jobs(kai_cluster, whole, other) -> None:
    """Force the exporter to report the whole GPU of `whole` in a pod of `other` too."""
    from jobs.models import JobEvent

    (pod,) = _pods(whole)
    uuid = pod["metadata"]["annotations"]["kubesim.dev/gpu-uuids"].split(",")[0]
    node, namespace = pod["spec"]["nodeName"], whole.project.namespace
    line = (
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="7",UUID="{uuid}",pci_bus_id="00000000:DB:00.0",'
        f'device="nvidia7",modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",'
        f'DCGM_FI_DRIVER_VERSION="550.54.15",container="trainer",namespace="{namespace}",'
        f'pod="gp-job-{other.pk}-0-forced"}} 50'
    )
    kai_cluster.admin("/kubesim/dcgm/garbage", {"node": node, "lines": [line]})
    try:
        _collect_metrics()
    finally:
        kai_cluster.admin("/kubesim/dcgm/garbage", {"node": node, "lines": []})
    warned = set(JobEvent.objects.filter(reason="IsolationCheck").values_list("job_id", flat=True))
    assert warned == {whole.pk, other.pk}


def test_a_kai_gang_starts_whole_or_not_at_all(kai_org, kai_cluster):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_cancel

    blocker = _submit(kai_org, "alpha", kind="single", gpus=1, pool="kai-gang", command=LONG)
    _wait_states([blocker], ["running"])
    gang = _submit(
        kai_org, "alpha", kind="gang", gpus=8, replicas=2, pool="kai-gang", command=SHORT
    )
    assert gang.backend == "kai"
    for _ in range(5):
        job_reconcile(job_id=gang.pk)
        bound = [p for p in _pods(gang) if (p.get("spec") or {}).get("nodeName")]
        assert bound == [], "a gang pod started without the rest of the gang"
        time.sleep(0.2)
    waiting = Job.objects.get(pk=gang.pk)
    assert waiting.state == "queued"
    assert "pods can start together" in (waiting.state_message + waiting.state_reason) or (
        waiting.state_reason == "PodSchedulingErrors"
    )
    job_cancel(actor=kai_org["user"], job=blocker)
    job_reconcile(job_id=blocker.pk)
    seen = reconcile_until(gang, {"succeeded", "failed"})
    assert seen[-1] == "succeeded", seen


def test_a_project_borrows_idle_quota_and_gives_it_back_when_the_owner_submits(kai_org):
    # alpha and beta are guaranteed 4 GPUs each of the share pool's 8.
    borrowers = [
        _submit(kai_org, "alpha", kind="single", gpus=1, pool="kai-share", command=LONG)
        for _ in range(6)
    ]
    _wait_states(borrowers, ["running"] * 6)  # 2 of them on beta's idle quota
    owners = [
        _submit(kai_org, "beta", kind="single", gpus=1, pool="kai-share", command=LONG)
        for _ in range(4)
    ]
    _wait_states(owners, ["running"] * 4, timeout=90)
    _reconcile_all(borrowers, rounds=2)
    states = _states(borrowers)
    assert states.count("running") == 4, states  # back to alpha's guarantee, never below
    assert set(states) <= {"running", "preempted", "queued"}


def test_idle_quota_is_shared_by_the_projects_over_quota_weights(kai_org):
    """KAI divides what a project leaves idle among the others by their overQuotaWeight: alpha
    (weight 3) and beta (weight 1) are guaranteed 2 GPUs each of the share pool's 8, gamma's 4
    are idle; beta takes back from alpha only up to its fair share, 2 + 1/4 of 4 = 3 GPUs, where
    equal weights would give it 4."""
    from quotas.models import ProjectQuota
    from quotas.sync import sync_quota_objects
    from tests.factories import MembershipFactory, ProjectFactory, ProjectQuotaFactory

    pool = kai_org["pools"]["share"]
    gamma = ProjectFactory(slug=f"gamma{kai_org['dept'].slug[2:]}", department=kai_org["dept"])
    MembershipFactory(user=kai_org["user"], project=gamma, role="member")
    ProjectQuotaFactory(project=gamma, pool=pool, resource="gpu", nominal=4)
    for project, weight in (("alpha", 3), ("beta", 1)):
        ProjectQuota.objects.filter(project=kai_org[project], pool=pool, resource="gpu").update(
            nominal=2, over_quota_weight=weight
        )
    assert sync_quota_objects().errors == []

    alpha = [
        _submit(kai_org, "alpha", kind="single", gpus=1, pool="kai-share", command=LONG)
        for _ in range(8)
    ]
    _wait_states(alpha, ["running"] * 8)  # beta's and gamma's idle quota too
    beta = [
        _submit(kai_org, "beta", kind="single", gpus=1, pool="kai-share", command=LONG)
        for _ in range(8)
    ]
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        _reconcile_all(alpha + beta)
        running = (_states(alpha).count("running"), _states(beta).count("running"))
        if running == (5, 3):
            break
        time.sleep(0.3)
    assert running == (5, 3), (_states(alpha), _states(beta))
    # and it stays there: beta's five others wait rather than take more from alpha
    _reconcile_all(alpha + beta, rounds=3)
    assert (_states(alpha).count("running"), _states(beta).count("running")) == (5, 3)
