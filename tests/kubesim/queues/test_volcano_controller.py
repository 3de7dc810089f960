"""The Volcano controller stepped by hand against an in-process store with the real Volcano CRDs
and two 8-GPU nodes; the test plays the kubelet (pod phases)."""

from __future__ import annotations

import pytest
from kubesim.api.errors import ApiError
from kubesim.controllers.volcano.controller import VolcanoController, min_resources_of

from .harness import make_ctx

JOB_API = "batch.volcano.sh/v1alpha1"
PG_API = "scheduling.volcano.sh/v1beta1"
GPU = "nvidia.com/gpu"


@pytest.fixture
def volcano():
    ctx = make_ctx("volcano")
    for i in range(2):
        capacity = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110"}
        ctx.store.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"gpu-{i}"},
                "status": {
                    "allocatable": capacity,
                    "capacity": capacity,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    controller = VolcanoController(ctx)
    controller.install()
    return ctx, controller


def task(name, replicas, gpus, **extra):
    return {
        "name": name,
        "replicas": replicas,
        **extra,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "c", "image": "pytorch", "resources": {"limits": {GPU: str(gpus)}}}
                ],
            }
        },
    }


def vcjob(store, name, tasks, **spec):
    return store.create(
        {
            "apiVersion": JOB_API,
            "kind": "Job",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"tasks": tasks, **spec},
        },
        namespace="default",
    )


def pods_of(store, job_name):
    return sorted(
        store.list("v1", "Pod", "default", label_selector=f"volcano.sh/job-name={job_name}"),
        key=lambda p: p["metadata"]["name"],
    )


def podgroup(store, job):
    return store.get(
        PG_API, "PodGroup", "default", f"{job['metadata']['name']}-{job['metadata']['uid']}"
    )


def set_phase(store, pod, phase):
    store.patch(
        "v1",
        "Pod",
        "default",
        pod["metadata"]["name"],
        {"status": {"phase": phase}},
        subresource="status",
    )


def job_status(store, name):
    return store.get(JOB_API, "Job", "default", name)["status"]


def env_of(pod):
    return {
        e["name"]: e.get("value")
        for e in pod["spec"]["containers"][0].get("env", [])
        if "value" in e
    }


def test_pytorch_job_gets_podgroup_pods_env_and_runs_to_completion(volcano):
    ctx, controller = volcano
    store = ctx.store
    job = vcjob(
        store,
        "pt",
        [task("master", 1, 4), task("worker", 2, 4)],
        plugins={"pytorch": ["--master=master", "--worker=worker", "--port=23456"], "env": []},
    )
    assert job["spec"]["minAvailable"] == 3  # the mutating webhook's default
    assert "svc" in job["spec"]["plugins"]
    controller.reconcile()
    controller.reconcile()
    pg = podgroup(store, job)
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["queue"] == "default"
    assert pg["spec"]["minResources"][GPU] == "12"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert pg["status"]["phase"] == "Running"
    pods = pods_of(store, "pt")
    assert [p["metadata"]["name"] for p in pods] == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    assert all(p["spec"].get("nodeName") for p in pods)
    assert all(p["spec"]["schedulerName"] == "volcano" for p in pods)
    master, worker1 = pods[0], pods[2]
    assert (
        master["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == pg["metadata"]["name"]
    )
    assert master["metadata"]["labels"]["volcano.sh/task-spec"] == "master"
    assert env_of(master)["RANK"] == "0"
    assert (env_of(worker1)["RANK"], env_of(worker1)["WORLD_SIZE"]) == ("2", "3")
    assert env_of(worker1)["MASTER_ADDR"] == "pt-master-0.pt"
    assert env_of(worker1)["VC_TASK_INDEX"] == "1"
    assert (worker1["spec"]["hostname"], worker1["spec"]["subdomain"]) == ("pt-worker-1", "pt")
    service = store.get("v1", "Service", "default", "pt")
    assert service["spec"]["clusterIP"] == "None"
    hosts = store.get("v1", "ConfigMap", "default", "pt-svc")["data"]
    assert hosts["VC_WORKER_HOSTS"] == "pt-worker-0.pt,pt-worker-1.pt"

    for pod in pods:
        set_phase(store, pod, "Running")
    controller.reconcile()
    status = job_status(store, "pt")
    assert (status["state"]["phase"], status["running"]) == ("Running", 3)
    assert status["taskStatusCount"]["worker"]["phase"] == {"Running": 2}
    for pod in pods:
        set_phase(store, pod, "Succeeded")
    controller.reconcile()
    status = job_status(store, "pt")
    assert (status["state"]["phase"], status["succeeded"]) == ("Completed", 3)
    assert [c["status"] for c in status["conditions"]] == ["Pending", "Running", "Completed"]
    queue = store.get(PG_API, "Queue", None, "default")["status"]
    assert queue["state"] == "Open"


def test_gang_never_starts_partially_and_starts_whole_later(volcano):
    ctx, controller = volcano
    store = ctx.store
    blocker = vcjob(store, "blocker", [task("main", 1, 4)])
    controller.reconcile()
    controller.reconcile()
    assert pods_of(store, "blocker")[0]["spec"]["nodeName"]
    gang = vcjob(store, "gang", [task("main", 2, 6)])
    controller.reconcile()
    controller.reconcile()
    pods = pods_of(store, "gang")
    # Enqueued (12 <= 12 idle x 1.2 overcommit) but only one 6-GPU pod fits: none is bound.
    assert len(pods) == 2
    assert not any(p["spec"].get("nodeName") for p in pods)
    pg = podgroup(store, gang)
    unschedulable = next(c for c in pg["status"]["conditions"] if c["type"] == "Unschedulable")
    assert unschedulable["reason"] == "NotEnoughResources"
    assert unschedulable["message"].startswith(
        "1/2 tasks in gang unschedulable: pod group is not ready"
    )
    assert "Insufficient nvidia.com/gpu" in unschedulable["message"]
    assert job_status(store, "gang")["state"]["phase"] == "Pending"
    job_events = [
        (e["reason"], e["message"])
        for e in store.list("v1", "Event", "default")
        if e["involvedObject"]["name"] == "gang"
    ]
    assert (
        "PodGroupPending",
        f"PodGroup default:gang unschedulable, reason: {unschedulable['message']}",
    ) in job_events

    store.delete(JOB_API, "Job", "default", "blocker")
    for pod in pods_of(store, "blocker"):
        store.delete("v1", "Pod", "default", pod["metadata"]["name"])
    controller.reconcile()
    controller.reconcile()
    pods = pods_of(store, "gang")
    assert all(p["spec"].get("nodeName") for p in pods)
    assert podgroup(store, gang)["status"]["phase"] == "Running"
    del blocker


def test_podgroup_stays_pending_without_pods_when_the_queue_capability_is_short(volcano):
    ctx, controller = volcano
    store = ctx.store
    store.create(
        {
            "apiVersion": PG_API,
            "kind": "Queue",
            "metadata": {"name": "small"},
            "spec": {"capability": {GPU: "4"}},
        }
    )
    controller.reconcile()
    job = vcjob(store, "wide", [task("main", 2, 4)], queue="small")
    controller.reconcile()
    controller.reconcile()
    assert pods_of(store, "wide") == []
    assert podgroup(store, job)["status"]["phase"] == "Pending"
    messages = [
        e["message"]
        for e in store.list("v1", "Event", "default")
        if e["involvedObject"]["kind"] == "PodGroup"
    ]
    assert "queue resource quota insufficient: insufficient nvidia.com/gpu" in messages
    assert store.get(PG_API, "Queue", None, "small")["status"]["pending"] == 1


def test_failed_pod_with_restart_policy_restarts_the_job(volcano):
    ctx, controller = volcano
    store = ctx.store
    vcjob(
        store,
        "retry",
        [task("main", 1, 1)],
        maxRetry=2,
        policies=[{"event": "PodFailed", "action": "RestartJob"}],
    )
    controller.reconcile()
    controller.reconcile()
    (pod,) = pods_of(store, "retry")
    set_phase(store, pod, "Failed")
    controller.reconcile()
    status = job_status(store, "retry")
    assert status["retryCount"] == 1
    assert "Restarting" in [c["status"] for c in status["conditions"]]
    controller.reconcile()
    (pod,) = pods_of(store, "retry")  # created again
    assert pod["metadata"]["annotations"]["volcano.sh/job-retry-count"] == "1"
    set_phase(store, pod, "Failed")
    controller.reconcile()
    assert job_status(store, "retry")["state"]["phase"] == "Failed"  # maxRetry 2 reached


def test_validating_webhook_answers_like_volcano(volcano):
    ctx, _ = volcano
    store = ctx.store
    with pytest.raises(ApiError) as denied:
        vcjob(store, "toomany", [task("main", 2, 1)], minAvailable=3)
    assert denied.value.message == (
        'admission webhook "validatejob.volcano.sh" denied the request: '
        "job 'minAvailable' should not be greater than total replicas in tasks;"
    )
    with pytest.raises(ApiError) as denied:
        vcjob(store, "noqueue", [task("main", 1, 1)], queue="missing")
    assert denied.value.message.endswith(
        'unable to find job queue: queue.scheduling.volcano.sh "missing" not found;'
    )
    with pytest.raises(ApiError) as denied:
        vcjob(store, "dup", [task("a", 1, 1), task("a", 1, 1)])
    assert "duplicated task name a;" in denied.value.message
    store.create(
        {"apiVersion": PG_API, "kind": "Queue", "metadata": {"name": "parent"}, "spec": {}}
    )
    store.create(
        {
            "apiVersion": PG_API,
            "kind": "Queue",
            "metadata": {"name": "child"},
            "spec": {"parent": "parent"},
        }
    )
    with pytest.raises(ApiError) as denied:
        vcjob(store, "notleaf", [task("main", 1, 1)], queue="parent")
    assert "can only submit job to leaf queue, queue `parent` has 1 child queues;" in (
        denied.value.message
    )


def test_min_resources_are_the_first_min_available_pods():
    spec = {"minAvailable": 2, "tasks": [task("master", 1, 1), task("worker", 3, 2)]}
    spec["tasks"][0]["minAvailable"] = 1
    spec["tasks"][1]["minAvailable"] = 1
    assert min_resources_of(spec)[GPU] == 3000
    assert min_resources_of(spec)["pods"] == 2000


def _queue(store, name, **spec):
    store.create({"apiVersion": PG_API, "kind": "Queue", "metadata": {"name": name}, "spec": spec})


def test_siblings_guarantees_come_off_the_parents_capability(volcano):
    # The capacity plugin with enableHierarchy: a child's realCapability is the parent's minus
    # the guarantees of the parent's children, plus its own guarantee.
    ctx, controller = volcano
    store = ctx.store
    _queue(store, "dept", capability={GPU: "16"}, deserved={GPU: "16"})
    controller.reconcile()
    _queue(
        store, "reserved", parent="dept", guarantee={"resource": {GPU: "12"}}, deserved={GPU: "12"}
    )
    _queue(store, "mine", parent="dept", capability={GPU: "16"})
    controller.reconcile()
    job = vcjob(store, "greedy", [task("main", 1, 8)], queue="mine")
    controller.reconcile()
    controller.reconcile()
    # 16 in the department, 12 guaranteed to the sibling: 4 left, so 8 cannot be enqueued here.
    assert podgroup(store, job)["status"]["phase"] == "Pending"
    assert pods_of(store, "greedy") == []
    small = vcjob(store, "fits", [task("main", 1, 4)], queue="mine")
    controller.reconcile()
    controller.reconcile()
    assert podgroup(store, small)["status"]["phase"] in ("Inqueue", "Running")


def test_a_parents_capability_bounds_all_its_children_together(volcano):
    ctx, controller = volcano
    store = ctx.store
    _queue(store, "dept2", capability={GPU: "8"}, deserved={GPU: "8"})
    controller.reconcile()
    _queue(store, "left", parent="dept2", capability={GPU: "8"})
    _queue(store, "right", parent="dept2", capability={GPU: "8"})
    controller.reconcile()
    first = vcjob(store, "first", [task("main", 1, 8)], queue="left")
    controller.reconcile()
    controller.reconcile()
    assert podgroup(store, first)["status"]["phase"] in ("Inqueue", "Running")
    second = vcjob(store, "second", [task("main", 1, 4)], queue="right")
    controller.reconcile()
    controller.reconcile()
    # Its own capability has room, the department's does not.
    assert podgroup(store, second)["status"]["phase"] == "Pending"


def test_a_finished_gang_leaves_nothing_allocated_in_its_queue_or_the_parent(volcano):
    # Volcano recomputes status.allocated each session from the tasks it still runs; a key that
    # is gone must be deleted from the status, not kept at its last value.
    ctx, controller = volcano
    store = ctx.store
    _queue(store, "dept3", capability={GPU: "16"}, deserved={GPU: "16"})
    controller.reconcile()
    _queue(store, "proj3", parent="dept3", capability={GPU: "16"}, deserved={GPU: "4"})
    controller.reconcile()
    vcjob(store, "gang", [task("worker", 2, 4)], queue="proj3")
    controller.reconcile()
    controller.reconcile()
    pods = pods_of(store, "gang")
    for pod in pods:
        set_phase(store, pod, "Running")
    controller.reconcile()
    running = store.get(PG_API, "Queue", None, "proj3")["status"]
    assert running["allocated"][GPU] == "8"
    assert store.get(PG_API, "Queue", None, "dept3")["status"]["allocated"][GPU] == "8"

    for pod in pods:
        set_phase(store, pod, "Succeeded")
    controller.reconcile()
    controller.reconcile()
    assert job_status(store, "gang")["state"]["phase"] == "Completed"
    for name in ("proj3", "dept3"):
        status = store.get(PG_API, "Queue", None, name)["status"]
        assert (status["completed"], status["running"]) == (1, 0)
        assert GPU not in status["allocated"], (name, status["allocated"])
        # As Volcano's ConvertRes2ResList writes an empty total: cpu and memory at zero.
        assert status["allocated"] == {"cpu": "0", "memory": "0"}


def command(store, name, action, target_kind, target):
    store.create(
        {
            "apiVersion": "bus.volcano.sh/v1alpha1",
            "kind": "Command",
            "metadata": {"name": name, "namespace": "default"},
            "action": action,
            "target": {
                "apiVersion": JOB_API if target_kind == "Job" else PG_API,
                "kind": target_kind,
                "name": target["metadata"]["name"],
                "uid": target["metadata"]["uid"],
            },
        },
        namespace="default",
    )


def test_abort_and_resume_commands(volcano):
    ctx, controller = volcano
    store = ctx.store
    job = vcjob(store, "pausable", [task("main", 2, 1)])
    controller.reconcile()
    controller.reconcile()
    assert len(pods_of(store, "pausable")) == 2
    command(store, "abort", "AbortJob", "Job", job)
    controller.reconcile()
    controller.reconcile()
    assert store.list("bus.volcano.sh/v1alpha1", "Command", "default") == []
    assert pods_of(store, "pausable") == []
    assert job_status(store, "pausable")["state"]["phase"] == "Aborted"
    command(store, "resume", "ResumeJob", "Job", job)
    for _ in range(3):
        controller.reconcile()
    status = job_status(store, "pausable")
    assert status["retryCount"] == 1
    assert status["state"]["phase"] == "Pending"
    assert len(pods_of(store, "pausable")) == 2


def test_close_queue_command_and_ttl_after_finished(volcano):
    ctx, controller = volcano
    store = ctx.store
    queue = store.create(
        {"apiVersion": PG_API, "kind": "Queue", "metadata": {"name": "team"}, "spec": {}}
    )
    controller.reconcile()
    command(store, "close", "CloseQueue", "Queue", queue)
    controller.reconcile()
    assert store.get(PG_API, "Queue", None, "team")["status"]["state"] == "Closed"
    with pytest.raises(ApiError) as denied:
        vcjob(store, "late", [task("main", 1, 1)], queue="team")
    assert "can only submit job to queue with state `Open`, queue `team` status is `Closed`;" in (
        denied.value.message
    )

    vcjob(store, "short", [task("main", 1, 1)], ttlSecondsAfterFinished=60)
    controller.reconcile()
    controller.reconcile()
    (pod,) = pods_of(store, "short")
    set_phase(store, pod, "Succeeded")
    controller.reconcile()
    assert job_status(store, "short")["state"]["phase"] == "Completed"
    ctx.clock.advance(61)
    controller.reconcile()
    assert store.try_get(JOB_API, "Job", "default", "short") is None


def test_queue_webhook_answers_like_volcano(volcano):
    ctx, controller = volcano
    store = ctx.store

    def queue(name, **spec):
        return store.create(
            {"apiVersion": PG_API, "kind": "Queue", "metadata": {"name": name}, "spec": spec}
        )

    with pytest.raises(ApiError) as denied:
        queue("bad", guarantee={"resource": {GPU: "4"}}, deserved={GPU: "2"})
    assert denied.value.message == (
        'admission webhook "validatequeue.volcano.sh" denied the request: '
        'requestBody.spec.deserved.nvidia.com/gpu: Invalid value: "2": '
        "deserved[nvidia.com/gpu]=2 must be >= guarantee[nvidia.com/gpu]=4"
    )
    queue("dept", capability={GPU: "16"})
    controller.reconcile()
    with pytest.raises(ApiError) as denied:
        queue("greedy", parent="dept", capability={GPU: "32"})
    assert denied.value.message.endswith(
        "queue greedy capability[nvidia.com/gpu]=32000.00 exceeds its ancestor's "
        "capability=16000.00"
    )
    queue("proj", parent="dept", capability={GPU: "8"})
    controller.reconcile()
    with pytest.raises(ApiError) as denied:
        store.delete(PG_API, "Queue", None, "dept")
    assert denied.value.message.endswith(
        "queue dept can not be deleted because it has 1 child queues: proj"
    )
    with pytest.raises(ApiError) as denied:
        store.delete(PG_API, "Queue", None, "default")
    assert denied.value.message.endswith("`default` queue can not be deleted")
    controller.reconcile()
    assert store.get(PG_API, "Queue", None, "dept")["status"]["state"] == "Open"
