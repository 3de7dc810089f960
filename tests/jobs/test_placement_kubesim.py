"""Placement against a real kubesim: jobs land only in pools that can hold them.

The cluster has two pools selected by different label keys (as an admin may configure them):
`a-small`, two nodes of 4 GPUs selected by instance type, and `b-big`, one node of 8 GPUs
selected by a custom label. Flavors are tried in slug order, so without the portal's node
affinity Kueue would admit an 8-GPU pod on `a-small`, where no node can ever hold it.
"""

import time

import pytest
import yaml
from kubesim.testing import KubesimProcess, shared_crds_dir

from tests.jobs.kubesim_org import reconcile_until

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

H100 = "NVIDIA-H100-80GB-HBM3"
SMALL_LABELS = {"node.kubernetes.io/instance-type": "hgx-h100-4g"}
BIG_LABELS = {"portal.example.com/pool": "big"}

CLUSTER = {
    "apiVersion": "kubesim.dev/v1",
    "kind": "Cluster",
    "pools": [
        {
            "name": "small",
            "count": 2,
            "cpu": "96",
            "memory": "1Ti",
            "instanceType": "hgx-h100-4g",
            "gpu": {"model": H100, "count": 4},
        },
        {
            "name": "big",
            "count": 1,
            "cpu": "192",
            "memory": "2Ti",
            "instanceType": "hgx-h100-8g",
            "labels": BIG_LABELS,
            "gpu": {"model": H100, "count": 8},
        },
        {"name": "cpu", "count": 1, "cpu": "64", "memory": "256Gi"},
    ],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ks-placement")
    path = workdir / "cluster.yaml"
    path.write_text(yaml.safe_dump(CLUSTER))
    with KubesimProcess(
        crds=[shared_crds_dir()], cluster=path, speed=100, workdir=workdir
    ) as server:
        yield server


@pytest.fixture
def org(cluster, settings, db):
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
    dept = DepartmentFactory(slug="pl", name="Placement")
    project = ProjectFactory(slug=f"pl{int(time.time() * 1000) % 10**8}", department=dept)
    small = GpuPoolFactory(
        slug="a-small", gpu_model=H100, node_labels=SMALL_LABELS, node_count=2, gpus_per_node=4
    )
    big = GpuPoolFactory(
        slug="b-big", gpu_model=H100, node_labels=BIG_LABELS, node_count=1, gpus_per_node=8
    )
    ProjectQuotaFactory(project=project, pool=small, resource="gpu", nominal=8)
    ProjectQuotaFactory(project=project, pool=big, resource="gpu", nominal=8)
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
    return {"project": project, "user": user}


def submit(org, **data):
    from jobs.services import job_submit

    body = {"image": "nvcr.io/nvidia/pytorch:24.08-py3", "command": ["python", "train.py"]}
    body.update(data)
    return job_submit(actor=org["user"], project=org["project"], data=body).job


def pods_of(namespace, job_id):
    from portal.kube import apply as kube

    return kube.list_owned(
        "v1", "Pod", namespace=namespace, selector=f"gpu-portal.io/job-id={job_id}"
    )


def test_an_unpinned_8_gpu_pod_is_admitted_only_on_the_8_gpu_flavor_and_runs(org):
    from portal.kube import apply as kube

    job = submit(org, kind="single", gpus=8)
    assert job.pool is None
    assert job.eligible_pools == ["b-big"]
    seen = reconcile_until(job, {"running", "succeeded", "failed"})
    assert seen[-1] in ("running", "succeeded"), seen
    ns = org["project"].namespace
    (workload,) = [
        w
        for w in kube.list_objects("kueue.x-k8s.io/v1beta2", "Workload", namespace=ns)
        if w["metadata"]["name"].startswith(f"job-gp-job-{job.pk}-")
    ]
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["flavors"] == {
        "cpu": "gp-pool-b-big",
        "memory": "gp-pool-b-big",
        "nvidia.com/gpu": "gp-pool-b-big",
    }
    (pod,) = pods_of(ns, job.pk)
    assert pod["spec"]["nodeName"] == "big-0"


def test_a_volcano_gang_is_pinned_to_one_pool_and_its_pods_stay_there(org):
    # 2 × 4 GPUs fit both pools; the project is guaranteed 8 in each, so the tie goes to the
    # first slug. Every pod of the gang must land on that pool's nodes.
    job = submit(org, kind="gang", gpus=4, replicas=2, backend="volcano")
    assert job.eligible_pools == ["a-small"]
    seen = reconcile_until(job, {"running", "succeeded", "failed"})
    assert seen[-1] in ("running", "succeeded"), seen
    deadline = time.monotonic() + 30
    pods = []
    while time.monotonic() < deadline:
        pods = [p for p in pods_of(org["project"].namespace, job.pk) if p["spec"].get("nodeName")]
        if len(pods) == 2:
            break
        time.sleep(0.2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["small-0", "small-1"]


# ---- preemption: the policy quotas.manifests emits, as kubesim's Kueue (v0.19) applies it ----
@pytest.fixture
def cohort(cluster, settings, db):
    """One department, in pool b-big (one 8-GPU node): `lender` is guaranteed all 8 GPUs,
    `borrower` none but may borrow them while the lender leaves them idle."""
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
    tag = int(time.time() * 1000) % 10**8
    dept = DepartmentFactory(slug=f"co{tag}", name="Cohort")
    big = GpuPoolFactory(
        slug="b-big", gpu_model=H100, node_labels=BIG_LABELS, node_count=1, gpus_per_node=8
    )
    for name, value, preemptible in (
        ("high", 1000, False),
        ("normal", 500, True),
        ("low", 100, True),
    ):
        PriorityClass.objects.get_or_create(
            name=name, defaults={"value": value, "preemptible": preemptible}
        )
    out = {}
    for role, nominal in (("lender", 8), ("borrower", 0)):
        project = ProjectFactory(slug=f"{role[0]}{tag}", department=dept)
        ProjectQuotaFactory(project=project, pool=big, resource="gpu", nominal=nominal)
        user = UserFactory(username=f"u-{project.slug}")
        MembershipFactory(user=user, project=project, role="member")
        out[role] = {"project": project, "user": user}
    report = sync_quota_objects()
    assert report.errors == []
    return out


def workload_of(job):
    from portal.kube import apply as kube

    ns = job.project.namespace
    for w in kube.list_objects("kueue.x-k8s.io/v1beta2", "Workload", namespace=ns):
        if w["metadata"]["name"].startswith(f"job-gp-job-{job.pk}-"):
            return w
    return None


def condition(workload, ctype):
    for c in ((workload or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def wait_for(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def borrow_then_claim(cohort, borrower_priority):
    from jobs.reconcile.services import job_reconcile

    long_run = {"kind": "single", "gpus": 8, "command": ["sleep", "100000"]}
    borrowed = submit(cohort["borrower"], priority=borrower_priority, **long_run)
    job_reconcile(job_id=borrowed.pk)
    wait_for(
        lambda: (condition(workload_of(borrowed), "QuotaReserved") or {}).get("status") == "True",
        "the borrower's admission",
    )
    reconcile_until(borrowed, {"admitted", "running"})
    owner = submit(cohort["lender"], priority="normal", **long_run)
    job_reconcile(job_id=owner.pk)
    # Kueue has looked at the lender's job: either it preempts or it says why it waits.
    wait_for(
        lambda: (
            condition(workload_of(borrowed), "Preempted")
            or (condition(workload_of(owner), "QuotaReserved") or {}).get("message")
        ),
        "Kueue's decision on the lender's job",
    )
    return borrowed, owner


def test_a_lenders_normal_job_does_not_reclaim_from_a_high_priority_borrower(cohort):
    borrowed, owner = borrow_then_claim(cohort, "high")
    # A few more scheduling cycles: still nothing is taken from the high job.
    time.sleep(1.0)
    assert condition(workload_of(borrowed), "Preempted") is None
    assert condition(workload_of(borrowed), "QuotaReserved")["status"] == "True"
    pending = condition(workload_of(owner), "QuotaReserved")
    assert pending["status"] == "False"
    assert "insufficient unused quota for nvidia.com/gpu" in pending["message"]


def test_a_lenders_normal_job_reclaims_its_quota_from_a_low_priority_borrower(cohort):
    from jobs.models import Job

    borrowed, owner = borrow_then_claim(cohort, "low")
    preempted = wait_for(lambda: condition(workload_of(borrowed), "Preempted"), "the reclaim")
    assert preempted["reason"] == "InCohortReclamation"
    wait_for(
        lambda: (condition(workload_of(owner), "QuotaReserved") or {}).get("status") == "True",
        "the lender's admission",
    )
    # The portal tells the borrower's user what happened.
    seen = reconcile_until(borrowed, {"preempted", "queued"})
    assert seen[-1] in ("preempted", "queued")
    assert Job.objects.get(pk=borrowed.pk).state in ("preempted", "queued")


def test_a_second_gang_waits_for_its_pools_quota_not_the_projects_total(org):
    # The project may use 8 GPUs in each pool. Both gangs are pinned to a-small; the second one
    # waits there even though the project's quota in b-big is idle, because a queue per pool
    # holds the project's per-pool maximum (a queue summing both pools would admit it).
    from portal.kube import apply as kube

    long_run = {"kind": "gang", "gpus": 4, "replicas": 2, "backend": "volcano"}
    first = submit(org, command=["sleep", "100000"], **long_run)
    reconcile_until(first, {"running"})
    second = submit(org, command=["sleep", "100000"], **long_run)
    assert second.eligible_pools == ["a-small"]
    reconcile_until(second, {"queued"})
    ns = org["project"].namespace

    def waiting_on_the_queue():
        return any(
            e["message"] == "queue resource quota insufficient: insufficient nvidia.com/gpu"
            and e["involvedObject"]["name"].startswith(f"gp-job-{second.pk}-")
            for e in kube.list_objects("v1", "Event", namespace=ns)
        )

    wait_for(waiting_on_the_queue, "the PodGroup to wait on its queue's capability")
    (group,) = [
        g
        for g in kube.list_objects("scheduling.volcano.sh/v1beta1", "PodGroup", namespace=ns)
        if g["metadata"]["name"].startswith(f"gp-job-{second.pk}-")
    ]
    assert group["spec"]["queue"] == f"gp-{org['project'].slug}.a-small"
    assert group["status"]["phase"] == "Pending"
