"""Issue 25's pure rules, table-driven: which scheduler a request goes to, what a GPU fraction
may be (each refusal names its field and the allowed values), the KAI manifests, KAI's
waiting reasons in plain words, and the KAI Queues of the quota sync."""

from decimal import Decimal

import pytest

from jobs import explain
from jobs.manifests import JobManifestInput, build_job_manifests
from jobs.status import ClusterSnapshot, map_cluster_status
from jobs.validation import JobRequest, PoolFacts, validate_job_request
from quotas import manifests as qm

H100 = "NVIDIA-H100-80GB-HBM3"
KUEUE = PoolFacts(
    slug="h100",
    gpu_model=H100,
    gpus_per_node=8,
    node_count=4,
    mig_profiles=(),
    default_cpu="8",
    default_memory="64Gi",
    maximum={"gpu": 8},
    guaranteed={"gpu": 4},
)
KAI = PoolFacts(
    slug="kai",
    gpu_model=H100,
    gpus_per_node=8,
    node_count=2,
    mig_profiles=(),
    default_cpu="4",
    default_memory="32Gi",
    maximum={"gpu": 4},
    guaranteed={"gpu": 2},
    scheduler="kai",
    fractions_allowed=True,
    fraction_step=Decimal("0.25"),
    gpu_memory_mib=80000,
)
KAI_WHOLE = PoolFacts(
    **{**KAI.__dict__, "slug": "kai-whole", "fractions_allowed": False, "maximum": {"gpu": 4}}
)


def _validate(pools=(KUEUE, KAI), **fields):
    base = {"project_slug": "alpha", "kind": "single", "image": "pytorch/pytorch:2.4.0"}
    return validate_job_request(JobRequest(**{**base, **fields}), list(pools))


@pytest.mark.parametrize(
    ("fields", "pools", "backend", "eligible"),
    [
        ({}, (KUEUE, KAI), "kueue", ["h100"]),  # no choice made: the Kueue pools
        ({}, (KAI,), "kai", ["kai"]),  # only KAI pools: KAI
        ({"pool": "kai"}, (KUEUE, KAI), "kai", ["kai"]),  # the pool decides
        ({"backend": "kai"}, (KUEUE, KAI), "kai", ["kai"]),
        ({"gpu_fraction": 0.5}, (KUEUE, KAI), "kai", ["kai"]),  # a fraction: KAI
        ({"gpu_memory": 20000}, (KUEUE, KAI), "kai", ["kai"]),
        ({"kind": "gang", "replicas": 2, "gpus": 2, "pool": "kai"}, (KUEUE, KAI), "kai", ["kai"]),
        ({"kind": "gang", "replicas": 2, "gpus": 2}, (KUEUE, KAI), "kueue", ["h100"]),
    ],
)
def test_the_pool_decides_the_scheduler(fields, pools, backend, eligible):
    result = _validate(pools, **fields)
    assert result.ok, result.errors
    assert (result.resolved.backend, result.resolved.eligible_pools) == (backend, eligible)


@pytest.mark.parametrize(
    ("fields", "pools", "field", "words"),
    [
        ({"gpu_fraction": 0.5}, (KUEUE,), "gpu_fraction", "only in KAI Scheduler pools"),
        ({"gpu_fraction": 0.5, "pool": "h100"}, (KUEUE, KAI), "gpu_fraction", "h100 (kueue)"),
        ({"gpu_fraction": 0.5}, (KAI_WHOLE,), "gpu_fraction", "allow fractions"),
        ({"gpu_fraction": 0}, (KAI,), "gpu_fraction", "greater than 0 and less than 1"),
        ({"gpu_fraction": 1}, (KAI,), "gpu_fraction", "greater than 0 and less than 1"),
        ({"gpu_fraction": 1.5}, (KAI,), "gpu_fraction", "greater than 0 and less than 1"),
        ({"gpu_fraction": "half"}, (KAI,), "gpu_fraction", "e.g. 0.25 or 0.5"),
        ({"gpu_fraction": 0.3}, (KAI,), "gpu_fraction", "allowed values: 0.25, 0.5, 0.75"),
        ({"gpu_fraction": 0.5, "gpus": 1}, (KAI,), "gpu_fraction", "leave gpus out"),
        ({"gpu_memory": 90000}, (KAI,), "gpu_memory", "allowed values are 1 to 80000 MiB"),
        ({"gpu_memory": 0}, (KAI,), "gpu_memory", "whole number of MiB above 0"),
        ({"gpu_memory": 100, "gpu_fraction": 0.5}, (KAI,), "gpu_memory", "not both"),
        ({"gpu_fraction": 0.5, "kind": "mig"}, (KAI,), "gpu_fraction", "single-pod jobs"),
        ({"gpu_fraction": 0.5, "backend": "kueue"}, (KAI,), "backend", "KAI Scheduler only"),
        ({"backend": "kueue", "pool": "kai"}, (KUEUE, KAI), "backend", "run KAI Scheduler"),
        ({"backend": "kai"}, (KUEUE,), "backend", "needs a KAI Scheduler pool"),
    ],
)
def test_bad_fractions_are_refused_naming_the_field(fields, pools, field, words):
    result = _validate(pools, **fields)
    assert field in result.errors, result.errors
    assert any(words in message for message in result.errors[field]), result.errors


def _spec(**overrides) -> JobManifestInput:
    fields = {
        "job_id": 7,
        "name": "nb",
        "project_slug": "alpha",
        "namespace": "gp-alpha",
        "kind": "single",
        "backend": "kai",
        "image": "pytorch/pytorch:2.4.0",
        "command": ("python", "x.py"),
        "env": {},
        "gpus": 0,
        "mig_resource": "",
        "replicas": 1,
        "cpu": "4",
        "memory": "32Gi",
        "priority": "normal",
        "max_runtime_seconds": 3600,
        "eligible_pools": ("kai",),
        "eligible_pool_labels": ({"kai.scheduler/node-pool": "kai"},),
        "gpu_fraction": "0.5",
        "preemptible": True,
        "kai_node_pool": "kai",
    }
    return JobManifestInput(**{**fields, **overrides})


def test_a_fraction_job_is_a_kai_batch_job_with_the_annotation_and_no_gpu_limit():
    (job,) = build_job_manifests(_spec())
    pod = job["spec"]["template"]
    assert "suspend" not in job["spec"]
    assert job["metadata"]["labels"]["kai.scheduler/queue"] == "gp-alpha.kai"
    assert pod["metadata"]["annotations"] == {"gpu-fraction": "0.5"}
    assert pod["metadata"]["labels"]["kai.scheduler/preemptibility"] == "preemptible"
    assert pod["metadata"]["labels"]["kai.scheduler/node-pool"] == "kai"
    assert pod["spec"]["schedulerName"] == "kai-scheduler"
    assert pod["spec"]["priorityClassName"] == "gp-normal"
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert "nvidia.com/gpu" not in limits
    assert not any(
        e["name"].startswith("NVIDIA_") for e in pod["spec"]["containers"][0].get("env", [])
    )


def test_a_kai_gang_is_an_indexed_job_with_batch_min_member():
    service, job = build_job_manifests(
        _spec(kind="gang", gpus=8, replicas=2, gpu_fraction="", preemptible=False)
    )
    assert service["kind"] == "Service"
    assert job["metadata"]["annotations"] == {"kai.scheduler/batch-min-member": "2"}
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 2
    pod = job["spec"]["template"]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert pod["metadata"]["labels"]["kai.scheduler/preemptibility"] == "non-preemptible"


def _podgroup(reason: str, message: str) -> dict:
    condition = {
        "type": "UnschedulableOnNodePool",
        "nodePool": "kai",
        "status": "True",
        "reasons": [{"reason": reason, "message": message}],
    }
    return {"status": {"schedulingConditions": [condition]}}


OVER_LIMIT = (
    "alpha quota has reached the allowable limit of GPUs. Limit is 4 GPUs, currently 4 GPUs "
    "allocated and workload requested 1 GPUs"
)
NON_PREEMPTIBLE = (
    "Non-preemptible workload is over quota. Workload requested 1 GPUs, but alpha quota is 2 "
    "GPUs, while 2 GPUs are already allocated for non-preemptible pods. Use a preemptible "
    "workload to go over quota."
)
GANG = (
    "Resources were found for 1 pods while 2 are required for gang scheduling. Additional pods "
    "cannot be scheduled due to: 1 node(s) didn't have enough resources: GPUs."
)
NO_NODE = (
    "Resources were not found for pod gp-alpha/p due to: no nodes with enough resources were "
    "found: 2 node(s) didn't have enough resources: GPUs."
)


@pytest.mark.parametrize(
    ("reason", "message", "words"),
    [
        ("OverLimit", OVER_LIMIT, "reached the most it may use in this pool (limit 4 GPUs)"),
        ("NonPreemptibleOverQuota", NON_PREEMPTIBLE, "guaranteed quota (2 GPUs)"),
        ("QueueDoesNotExist", "Queue 'gp-alpha.kai' does not exist", "sync the quotas"),
        ("PodSchedulingErrors", GANG, "all 2 pods can start together: only 1 fit"),
        ("PodSchedulingErrors", NO_NODE, "no node has enough free GPUs"),
    ],
)
def test_kai_reasons_become_plain_sentences_with_the_queue_position(reason, message, words):
    pods = [{"metadata": {"name": "p"}, "status": {"phase": "Pending"}, "spec": {}}]
    snapshot = ClusterSnapshot(
        backend="kai",
        primary={"status": {"active": 1}},
        podgroup=_podgroup(reason, message),
        pods=pods,
    )
    reading = map_cluster_status(snapshot)
    assert (reading.state, reading.reason) == ("queued", reason)
    sentence = explain.explain_pending(
        reason=reading.reason,
        message=reading.message,
        request=explain.Request(1, "H100 GPUs"),
        standing=explain.Standing(project="alpha", department="rs", pool="kai"),
        position=2,
        queue_length=3,
    )
    assert words in sentence
    assert sentence.endswith("Position 2 of 3 in the queue.")


def test_kai_pools_get_kai_queues_and_no_kueue_or_volcano_objects():
    model = qm.QuotaModel(
        pools=(
            qm.PoolSpec("h100", {"p": "h100"}, (), 32, "8", "64Gi"),
            qm.PoolSpec("kai", {"kai.scheduler/node-pool": "kai"}, (), 16, "4", "32Gi", "kai", 2),
        ),
        departments=(qm.DepartmentSpec("rs"),),
        projects=(
            qm.ProjectSpec(
                "alpha",
                "gp-alpha",
                "rs",
                (qm.QuotaAmount("h100", "gpu", 4, 8), qm.QuotaAmount("kai", "gpu", 2, None, 3)),
            ),
            qm.ProjectSpec("beta", "gp-beta", "rs", (qm.QuotaAmount("kai", "gpu", 6, 6),)),
        ),
    )
    objects = qm.desired_quota_objects(model)
    queues = {o["metadata"]["name"]: o for o in objects if o["apiVersion"] == qm.KAI_QUEUE_API}
    assert set(queues) == {"gp-dept-rs.kai", "gp-alpha.kai", "gp-beta.kai"}
    department, alpha, beta = (
        queues[n]["spec"] for n in ("gp-dept-rs.kai", "gp-alpha.kai", "gp-beta.kai")
    )
    assert department["resources"]["gpu"] == {"quota": 8, "limit": -1, "overQuotaWeight": 1}
    assert alpha["parentQueue"] == "gp-dept-rs.kai"
    # guarantee 2, may borrow up to the department's 8; its own weight 3, beta the pool's 2
    assert alpha["resources"]["gpu"] == {"quota": 2, "limit": 8, "overQuotaWeight": 3}
    assert beta["resources"]["gpu"] == {"quota": 6, "limit": 6, "overQuotaWeight": 2}
    assert alpha["resources"]["cpu"] == {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    assert queues["gp-alpha.kai"]["metadata"]["labels"]["kai.scheduler/node-pool"] == "kai"
    flavors = [o["metadata"]["name"] for o in objects if o["kind"] == "ResourceFlavor"]
    assert flavors == ["gp-pool-h100"]
    volcano = [o["metadata"]["name"] for o in objects if o["apiVersion"] == qm.VOLCANO_QUEUE_API]
    assert volcano == ["gp-dept-rs.h100", "gp-alpha.h100"]
    (cq,) = [
        o for o in objects if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "gp-alpha"
    ]
    assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == ["gp-pool-h100"]


def _reading(uuid: str, namespace: str, pod: str):
    from gpumetrics.parsing import DeviceKey, DeviceReading

    return DeviceReading(
        key=DeviceKey("node-1", uuid), namespace=namespace, pod=pod, fields={"util": 40.0}
    )


def test_isolation_check_is_quiet_for_a_shared_gpu_and_warns_for_a_whole_gpu_in_two_jobs():
    from gpumetrics.attribution import JobFacts, attribute

    reservation = _reading("GPU-s", "kai-resource-reservation", "gpu-reservation-abc")
    shared = attribute([reservation], {}, {"GPU-s": {11: 0.5, 12: 0.5}})
    assert sorted(shared.by_job) == [11, 12]  # each fraction job gets the shared GPU's readings
    assert shared.shared == {(11, "GPU-s"): 0.5, (12, "GPU-s"): 0.5}
    assert shared.warnings == {}

    jobs = {3: JobFacts(3, "gp-a", 1), 4: JobFacts(4, "gp-b", 1)}
    forced = attribute(
        [_reading("GPU-w", "gp-a", "gp-job-3-x"), _reading("GPU-w", "gp-b", "gp-job-4-y")], jobs
    )
    assert set(forced.warnings) == {3, 4}
    assert "shows up in this job and in job(s) 4" in forced.warnings[3][0]
    # a whole GPU of a job that also appears as a KAI shared GPU: still a warning
    mixed = attribute(
        [
            _reading("GPU-w", "gp-a", "gp-job-3-x"),
            _reading("GPU-w", "kai-resource-reservation", "gpu-reservation-abc"),
        ],
        jobs,
        {"GPU-w": {11: 0.5}},
    )
    assert set(mixed.warnings) == {3, 11}


def test_the_cluster_page_splits_a_shared_gpu_between_its_holders():
    from jobs.console.cluster_map import Holder, PodHold, PoolSelector, build_cluster_map
    from portal.kube.nodes import NodeGpu, NodeInfo

    node = NodeInfo("n1", {"pool": "kai"}, (NodeGpu(0, "GPU-s", H100), NodeGpu(1, "GPU-f", H100)))
    holds = [
        PodHold(11, "n1", ("GPU-s",), (), share=0.5),
        PodHold(12, "n1", ("GPU-s",), (), share=0.25),
    ]
    result = build_cluster_map(
        nodes=[node],
        pools=[PoolSelector("kai", "KAI", H100, {"pool": "kai"})],
        holds=holds,
        holder_for=lambda job_id: Holder(job_id, True, f"alpha/job-{job_id}"),
    )
    shared, free = result.pools[0].nodes[0].gpus
    assert [(h.label, share) for h, share in shared.parts] == [
        ("alpha/job-11", 0.5),
        ("alpha/job-12", 0.25),
    ]
    assert shared.free_share == 0.25
    assert (free.parts, free.holder) == ((), None)
    assert (result.held, result.devices) == (1, 2)


@pytest.mark.parametrize(
    ("fraction", "memory", "total", "share", "text"),
    [
        (Decimal("0.5"), None, None, 0.5, "0.5 of GPU-1 (shared with 1 other job)"),
        (None, 20000, 80000, 0.25, "0.25 of GPU-1 (shared with 1 other job)"),
        (None, 30000, 90000, 0.33, "0.33 of GPU-1 (shared with 1 other job)"),
        (None, 20000, None, 1.0, "1 of GPU-1 (shared with 1 other job)"),
    ],
)
def test_a_fraction_jobs_share_and_how_the_job_page_says_it(fraction, memory, total, share, text):
    from jobs import fractions

    assert fractions.job_share(fraction, memory, total) == share
    assert fractions.share_text(share, "GPU-1", 1) == text
    assert fractions.share_text(0.5, "GPU-1", 2).endswith("(shared with 2 other jobs)")


def test_a_waiting_fraction_says_what_it_waits_for_and_kai_queues_order_by_priority_then_age():
    from types import SimpleNamespace

    from jobs.watcher.queues import kai_positions

    request = explain.request_for(gpus=0, replicas=1, mig_profile="", gpu_model=H100, share=0.5)
    sentence = explain.explain_pending(
        reason="PodSchedulingErrors",
        message=NO_NODE.replace("GPUs.", "GPU memory."),
        request=request,
        standing=explain.Standing(project="alpha", department="rs", pool="kai"),
    )
    assert sentence == (
        "Waiting for 0.5 of an H100 GPU in pool kai: no GPU has that much memory free right now."
    )

    def job(pk, priority, minute, pool="kai"):
        return SimpleNamespace(
            pk=pk,
            priority=priority,
            created_at=minute,
            project_id=1,
            pool=None,
            eligible_pools=[pool],
        )

    queued = [job(1, "low", 1), job(2, "normal", 3), job(3, "high", 5), job(4, "normal", 2)]
    queued.append(job(5, "low", 0, pool="other"))
    assert kai_positions(queued) == {3: (1, 4), 4: (2, 4), 2: (3, 4), 1: (4, 4), 5: (1, 1)}


@pytest.mark.django_db
def test_a_pools_scheduler_cannot_change_while_its_jobs_are_active_and_the_api_says_it(
    make_job, client
):
    from django.core.exceptions import ValidationError

    from quotas.services import pool_update
    from tests.factories import GpuPoolFactory, UserFactory

    pool = GpuPoolFactory(slug="kai-x")
    job = make_job(pool=pool, eligible_pools=["kai-x"], state="running")
    staff = UserFactory(is_staff=True)
    with pytest.raises(ValidationError) as refused:
        pool_update(actor=staff, pool=pool, scheduler="kai", kai_fractions_allowed=True)
    assert "1 active job on its current scheduler (kueue)" in str(refused.value)
    job.state = "succeeded"
    job.save()
    pool_update(actor=staff, pool=pool, scheduler="kai", kai_fractions_allowed=True)
    client.force_login(staff)
    body = client.get("/api/v1/pools/kai-x/").json()
    assert (body["scheduler"], body["fractions_allowed"], body["fraction_step"]) == (
        "kai",
        True,
        "0.25",
    )
    assert body["gpu_memory_mib"] == 80000


def test_a_kai_queues_use_counts_fractions_as_kai_does():
    from quotas.usage import kai_queue_rows

    queue = {
        "metadata": {
            "name": "gp-alpha.kai",
            "labels": {"gpu-portal.io/project": "alpha", "gpu-portal.io/pool": "kai"},
        },
        "spec": {
            "parentQueue": "gp-dept-rs.kai",
            "resources": {"gpu": {"quota": 1, "limit": 4, "overQuotaWeight": 1}},
        },
        "status": {"allocated": {"nvidia.com/gpu": "1500m"}},
    }
    (row,) = kai_queue_rows(queue)
    assert (row.pool, row.resource, row.in_use, row.guaranteed, row.maximum, row.borrowed) == (
        "kai",
        "gpu",
        Decimal("1.5"),
        Decimal(1),
        Decimal(4),
        Decimal("0.5"),
    )
    department = {**queue, "metadata": {"name": "gp-dept-rs.kai", "labels": {}}}
    assert kai_queue_rows(department) == []
