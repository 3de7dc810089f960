"""The Kueue controller stepped by hand against an in-process store with the real Kueue CRDs.

The batch Job controller is played by the test (it sets status.active/ready and the Complete
condition), so each step shows exactly what Kueue itself writes.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from kubesim.api.errors import ApiError
from kubesim.controllers.kueue.controller import KueueController, workload_name
from kubesim.testing import vendored_crds_dir

from .harness import apply_yaml, make_ctx

API = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"


@pytest.fixture
def kueue():
    ctx = make_ctx("kueue", pods_ready_timeout=None)
    controller = KueueController(ctx)
    controller.status_interval = 0  # write queue status on every step
    controller.install()
    return ctx, controller


def gpu_setup(store, *, cohort=None, cqs=(("cq-a", 4, "team-a"),), **cq_spec):
    store.create(
        {
            "apiVersion": API,
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
    )
    for name, gpus, namespace in cqs:
        spec = {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": [GPU],
                    "flavors": [
                        {"name": "h100", "resources": [{"name": GPU, "nominalQuota": gpus}]}
                    ],
                }
            ],
            **cq_spec,
        }
        if cohort:
            spec["cohortName"] = cohort
        store.create(
            {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
        )
        store.create(
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": {"name": "lq", "namespace": namespace},
                "spec": {"clusterQueue": name},
            },
            namespace=namespace,
        )


def gpu_job(store, name, gpus, namespace="team-a", priority_class=None, count=1):
    labels = {"kueue.x-k8s.io/queue-name": "lq"}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    return store.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "parallelism": count,
                "completions": count,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "train",
                                "image": "pytorch",
                                "resources": {"limits": {GPU: str(gpus)}},
                            }
                        ],
                    }
                },
            },
        },
        namespace=namespace,
    )


def workload_of(store, job):
    (wl,) = store.list(
        API,
        "Workload",
        job["metadata"]["namespace"],
        label_selector=f"kueue.x-k8s.io/job-uid={job['metadata']['uid']}",
    )
    return wl


def cond(obj, ctype):
    return next(
        (c for c in obj.get("status", {}).get("conditions", []) if c["type"] == ctype), None
    )


def job_now(store, job):
    return store.get("batch/v1", "Job", job["metadata"]["namespace"], job["metadata"]["name"])


def set_job_status(store, job, **status):
    store.patch(
        "batch/v1",
        "Job",
        job["metadata"]["namespace"],
        job["metadata"]["name"],
        {"status": status},
        subresource="status",
    )


def complete(store, job, count=1):
    set_job_status(
        store,
        job,
        active=0,
        ready=0,
        succeeded=count,
        conditions=[
            {
                "type": "SuccessCriteriaMet",
                "status": "True",
                "reason": "CompletionsReached",
                "message": "Reached expected number of succeeded pods",
            },
            {
                "type": "Complete",
                "status": "True",
                "reason": "CompletionsReached",
                "message": "Reached expected number of succeeded pods",
            },
        ],
    )


def events_for(store, obj):
    return [
        (e["reason"], e["message"])
        for e in store.list("v1", "Event", obj["metadata"]["namespace"])
        if e["involvedObject"]["name"] == obj["metadata"]["name"]
    ]


def test_sample_job_admitted_runs_and_finishes(kueue):
    ctx, controller = kueue
    store = ctx.store
    examples = vendored_crds_dir() / "kueue" / "examples"
    apply_yaml(store, (examples / "single-clusterqueue-setup.yaml").read_text())
    (job,) = apply_yaml(store, (examples / "sample-job.yaml").read_text())
    assert job["spec"]["suspend"] is True  # the mutating webhook
    controller.reconcile()
    wl = workload_of(store, job)
    assert wl["metadata"]["name"] == workload_name(job["metadata"]["name"], job["metadata"]["uid"])
    assert wl["metadata"]["name"].startswith(f"job-{job['metadata']['name']}-")
    assert wl["metadata"]["ownerReferences"][0]["controller"] is True
    assert wl["spec"]["podSets"][0]["count"] == 3
    assert wl["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {
        "cpu": "3",
        "memory": "600Mi",
    }
    assert cond(wl, "QuotaReserved")["message"] == "Quota reserved in ClusterQueue cluster-queue"
    assert cond(wl, "Admitted")["message"] == "The workload is admitted"
    running = job_now(store, job)
    assert running["spec"]["suspend"] is False
    assert (
        running["spec"]["template"]["metadata"]["annotations"]["kueue.x-k8s.io/workload"]
        == wl["metadata"]["name"]
    )
    cq = store.get(API, "ClusterQueue", None, "cluster-queue")["status"]
    assert (cq["admittedWorkloads"], cq["pendingWorkloads"]) == (1, 0)
    assert cq["flavorsUsage"][0]["resources"][0] == {"name": "cpu", "total": "3", "borrowed": "0"}

    set_job_status(store, job, active=3, ready=3)
    controller.reconcile()
    assert cond(workload_of(store, job), "PodsReady")["reason"] == "Started"
    complete(store, job, 3)
    controller.reconcile()
    wl = workload_of(store, job)
    finished = cond(wl, "Finished")
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    assert finished["message"] == "Reached expected number of succeeded pods"
    cq = store.get(API, "ClusterQueue", None, "cluster-queue")["status"]
    assert cq["admittedWorkloads"] == 0
    assert cq["flavorsUsage"][0]["resources"][0]["total"] == "0"
    assert ("Started", "Admitted by clusterQueue cluster-queue") in events_for(store, job)


def test_insufficient_quota_message_and_flavor_injection(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(store)
    first = gpu_job(store, "first", 3)
    second = gpu_job(store, "second", 3)
    controller.reconcile()
    started = job_now(store, first)
    assert started["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    assert {"key": GPU, "operator": "Exists", "effect": "NoSchedule"} in started["spec"][
        "template"
    ]["spec"]["tolerations"]
    pending = cond(workload_of(store, second), "QuotaReserved")
    assert (pending["status"], pending["reason"]) == ("False", "Pending")
    assert pending["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused "
        "quota for nvidia.com/gpu in flavor h100, 2 more needed"
    )
    assert job_now(store, second)["spec"]["suspend"] is True
    lq = store.get(API, "LocalQueue", "team-a", "lq")["status"]
    assert (lq["pendingWorkloads"], lq["admittedWorkloads"]) == (1, 1)


def test_borrowing_then_reclaim_by_the_lender(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(
        store,
        cohort="dept",
        cqs=(("lender", 4, "team-a"), ("borrower", 0, "team-b")),
        preemption={"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    )
    borrowed = gpu_job(store, "borrowed", 4, namespace="team-b")
    controller.reconcile()
    assert job_now(store, borrowed)["spec"]["suspend"] is False
    status = store.get(API, "ClusterQueue", None, "borrower")["status"]
    assert status["flavorsUsage"][0]["resources"][0]["borrowed"] == "4"
    set_job_status(store, borrowed, active=1, ready=1)

    owner = gpu_job(store, "owner", 2, namespace="team-a")
    controller.reconcile()
    victim = workload_of(store, borrowed)
    evicted, preempted = cond(victim, "Evicted"), cond(victim, "Preempted")
    assert (evicted["status"], evicted["reason"]) == ("True", "Preempted")
    assert preempted["reason"] == "InCohortReclamation"
    owner_wl = workload_of(store, owner)
    assert preempted["message"] == (
        f"Preempted to accommodate a workload (UID: {owner_wl['metadata']['uid']}, JobUID: "
        f"{owner['metadata']['uid']}) due to reclamation within the cohort; preemptor path: "
        "/dept/lender; preemptee path: /dept/borrower"
    )
    assert cond(owner_wl, "QuotaReserved")["message"].endswith(
        ". Pending the preemption of 1 workload(s)"
    )
    stopped = job_now(store, borrowed)
    assert stopped["spec"]["suspend"] is True
    assert not stopped["spec"]["template"]["spec"].get("nodeSelector")  # restored
    set_job_status(store, borrowed, active=0, ready=0)  # the Job controller removed the pods
    controller.reconcile()
    victim = workload_of(store, borrowed)
    assert cond(victim, "Requeued")["status"] == "True"
    assert cond(victim, "QuotaReserved")["status"] == "False"
    assert job_now(store, owner)["spec"]["suspend"] is False
    assert cond(workload_of(store, owner), "Admitted")["status"] == "True"


def test_higher_priority_preempts_lower_in_same_cluster_queue(kueue):
    ctx, controller = kueue
    store = ctx.store
    for name, value in (("low", 10), ("high", 1000)):
        store.create(
            {
                "apiVersion": API,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    gpu_setup(store, preemption={"withinClusterQueue": "LowerPriority"})
    low = gpu_job(store, "low", 4, priority_class="low")
    controller.reconcile()
    set_job_status(store, low, startTime="2027-01-15T08:00:00Z", active=1)
    assert workload_of(store, low)["spec"]["priority"] == 10
    assert workload_of(store, low)["spec"]["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "low",
    }
    high = gpu_job(store, "high", 4, priority_class="high")
    controller.reconcile()
    assert cond(workload_of(store, low), "Preempted")["reason"] == "InClusterQueue"
    assert (
        "due to prioritization in the ClusterQueue"
        in cond(workload_of(store, low), "Evicted")["message"]
    )
    assert "startTime" not in job_now(store, low).get("status", {})  # reset when stopped
    set_job_status(store, low, active=0)
    controller.reconcile()
    assert job_now(store, high)["spec"]["suspend"] is False
    assert job_now(store, low)["spec"]["suspend"] is True
    reasons = [r for r, _ in events_for(store, workload_of(store, low))]
    assert "Preempted" in reasons
    assert "EvictedDueToPreempted" in reasons


def test_pods_ready_timeout_evicts_and_requeues_with_backoff(kueue):
    ctx, controller = kueue
    store = ctx.store
    controller.pods_ready_timeout = 300
    gpu_setup(store)
    job = gpu_job(store, "gang", 1, count=4)
    controller.reconcile()
    set_job_status(store, job, active=4, ready=2)
    ctx.clock.advance(301)
    controller.reconcile()
    wl = workload_of(store, job)
    assert cond(wl, "Evicted")["reason"] == "PodsReadyTimeout"
    assert (
        cond(wl, "Evicted")["message"]
        == f"Exceeded the PodsReady timeout team-a/{wl['metadata']['name']}"
    )
    assert wl["status"]["requeueState"]["count"] == 1
    assert job_now(store, job)["spec"]["suspend"] is True
    set_job_status(store, job, active=0, ready=0)
    controller.reconcile()
    wl = workload_of(store, job)
    requeued = cond(wl, "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("False", "PodsReadyTimeout")
    ctx.clock.advance(61)
    controller.reconcile()
    wl = workload_of(store, job)
    assert cond(wl, "Requeued")["reason"] == "BackoffFinished"
    assert cond(wl, "Admitted")["status"] == "True"
    assert job_now(store, job)["spec"]["suspend"] is False


def test_visibility_positions_follow_priority_then_fifo(kueue):
    ctx, controller = kueue
    store = ctx.store
    store.create(
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "urgent"},
            "value": 100,
        }
    )
    gpu_setup(store, cqs=(("cq-a", 1, "team-a"),))
    store.create(
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": "other", "namespace": "team-a"},
            "spec": {"clusterQueue": "cq-a"},
        },
        namespace="team-a",
    )
    gpu_job(store, "running", 1)
    controller.reconcile()
    ctx.clock.advance(1)
    gpu_job(store, "first", 1)
    ctx.clock.advance(1)
    gpu_job(store, "second", 1)
    ctx.clock.advance(1)
    gpu_job(store, "urgent", 1, priority_class="urgent")
    controller.reconcile()
    summary = controller.pending_summary("cq-a", None, 1000, 0)
    rows = [
        (i["metadata"]["name"].split("-")[1], i["positionInClusterQueue"], i["priority"])
        for i in summary["items"]
    ]
    assert rows == [("urgent", 0, 100), ("first", 1, 0), ("second", 2, 0)]
    paged = controller.pending_summary("cq-a", ("team-a", "lq"), 1, 1)["items"]
    assert [(i["positionInLocalQueue"], i["localQueueName"]) for i in paged] == [(1, "lq")]

    class Request:
        match_info = {"namespace": "team-a", "name": "lq"}
        query = {"limit": "2"}

    handler = ctx.server.routes[
        (
            "GET",
            "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/"
            "{namespace}/localqueues/{name}/pendingworkloads",
        )
    ]
    response = asyncio.run(handler(Request()))
    body = json.loads(response.body)
    assert body["kind"] == "PendingWorkloadsSummary"
    assert len(body["items"]) == 2


def test_webhooks_answer_like_kueue(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(store)
    with pytest.raises(ApiError) as denied:
        store.create(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": "bad",
                    "namespace": "team-a",
                    "labels": {"kueue.x-k8s.io/queue-name": "Bad_Q"},
                },
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "x"}],
                        }
                    }
                },
            },
            namespace="team-a",
        )
    assert denied.value.message.startswith(
        'admission webhook "vjob.kb.io" denied the request: '
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "Bad_Q": a lowercase RFC 1123'
    )
    job = gpu_job(store, "running", 1)
    controller.reconcile()
    with pytest.raises(ApiError) as denied:
        store.patch(
            "batch/v1",
            "Job",
            "team-a",
            "running",
            {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "other"}}},
        )
    assert "field is immutable" in denied.value.message
    # A missing WorkloadPriorityClass: no Workload, the Job stays suspended (as upstream).
    job = gpu_job(store, "nowpc", 1, priority_class="missing")
    controller.reconcile()
    assert (
        store.list(
            API,
            "Workload",
            "team-a",
            label_selector=f"kueue.x-k8s.io/job-uid={job['metadata']['uid']}",
        )
        == []
    )
    assert (
        "ErrWorkloadCompose",
        'workloadpriorityclasses.kueue.x-k8s.io "missing" not found',
    ) in events_for(store, job)


def test_deactivating_a_workload_stops_its_job_and_frees_the_quota(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(store)
    job = gpu_job(store, "stopme", 4)
    waiting = gpu_job(store, "waiting", 4)
    controller.reconcile()
    set_job_status(store, job, active=1, ready=1)
    wl = workload_of(store, job)
    store.patch(API, "Workload", "team-a", wl["metadata"]["name"], {"spec": {"active": False}})
    controller.reconcile()
    evicted = cond(workload_of(store, job), "Evicted")
    assert (evicted["reason"], evicted["message"]) == ("Deactivated", "The workload is deactivated")
    assert job_now(store, job)["spec"]["suspend"] is True
    set_job_status(store, job, active=0, ready=0)
    controller.reconcile()
    requeued = cond(workload_of(store, job), "Requeued")
    assert (requeued["status"], requeued["reason"]) == ("False", "Deactivated")
    assert job_now(store, waiting)["spec"]["suspend"] is False  # the freed quota went on
    store.patch(API, "Workload", "team-a", wl["metadata"]["name"], {"spec": {"active": True}})
    controller.reconcile()
    assert cond(workload_of(store, job), "Requeued")["reason"] == "Reactivated"
    assert cond(workload_of(store, job), "QuotaReserved")["status"] == "False"


def test_pending_workload_shows_its_resource_requests(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(store)
    gpu_job(store, "holder", 4)
    waiting = gpu_job(store, "waiting", 2, count=2)
    controller.reconcile()
    status = workload_of(store, waiting)["status"]
    assert status["resourceRequests"] == [{"name": "main", "resources": {GPU: "4"}}]


def test_hold_and_drain_evicts_and_restart_requeues(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(store)
    job = gpu_job(store, "drained", 1)
    controller.reconcile()
    store.patch(API, "ClusterQueue", None, "cq-a", {"spec": {"stopPolicy": "HoldAndDrain"}})
    controller.reconcile()
    evicted = cond(workload_of(store, job), "Evicted")
    assert (evicted["reason"], evicted["message"]) == (
        "ClusterQueueStopped",
        "The ClusterQueue is stopped",
    )
    set_job_status(store, job, active=0)
    controller.reconcile()
    pending = cond(workload_of(store, job), "QuotaReserved")
    assert (pending["status"], pending["message"]) == ("False", "ClusterQueue cq-a is inactive")
    assert store.get(API, "ClusterQueue", None, "cq-a")["status"]["conditions"][0]["status"] == (
        "False"
    )
    store.patch(API, "ClusterQueue", None, "cq-a", {"spec": {"stopPolicy": "None"}})
    controller.reconcile()
    controller.reconcile()
    wl = workload_of(store, job)
    assert cond(wl, "Requeued")["reason"] == "ClusterQueueRestarted"
    assert cond(wl, "Admitted")["status"] == "True"


def test_cluster_queue_with_admitted_workloads_waits_for_them_before_going_away(kueue):
    ctx, controller = kueue
    store = ctx.store
    gpu_setup(store)
    job = gpu_job(store, "inflight", 1)
    controller.reconcile()
    cq = store.get(API, "ClusterQueue", None, "cq-a")
    assert "kueue.x-k8s.io/resource-in-use" in cq["metadata"]["finalizers"]
    store.delete(API, "ClusterQueue", None, "cq-a")
    controller.reconcile()
    terminating = store.get(API, "ClusterQueue", None, "cq-a")
    assert terminating["metadata"]["deletionTimestamp"]
    active = next(c for c in terminating["status"]["conditions"] if c["type"] == "Active")
    assert (active["reason"], active["message"]) == (
        "Terminating",
        "Can't admit new workloads; clusterQueue is terminating",
    )
    complete(store, job)
    controller.reconcile()
    assert store.try_get(API, "ClusterQueue", None, "cq-a") is None
