"""The simulated cluster through the python client and kubectl: nodes, scheduler, Job controller,
kubelet, logs, dcgm-exporter and faults."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubesim.testing import KubesimProcess, kubectl_path, wait_for
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.kubesim

TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def pod_manifest(name, command, *, limits=None, node_selector=None, restart="Never"):
    spec = {
        "restartPolicy": restart,
        "tolerations": TOLERATE_GPU,
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "command": command,
                "resources": {"limits": limits or {}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def job_manifest(
    name, script, *, completions=1, parallelism=1, indexed=False, backoff=0, limits=None
):
    spec = {
        "completions": completions,
        "parallelism": parallelism,
        "backoffLimit": backoff,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "tolerations": TOLERATE_GPU,
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", script],
                        "resources": {"limits": limits or {}},
                    }
                ],
            }
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def phase(core, namespace, name):
    return core.read_namespaced_pod(name, namespace).status.phase


def job_condition(batch, namespace, name, ctype):
    status = batch.read_namespaced_job_status(name, namespace).status
    for condition in status.conditions or []:
        if condition.type == ctype and condition.status == "True":
            return condition
    return None


def job_pods(core, namespace, job):
    return core.list_namespaced_pod(
        namespace, label_selector=f"batch.kubernetes.io/job-name={job}"
    ).items


def events_for(core, namespace, name):
    return [
        e for e in core.list_namespaced_event(namespace).items if e.involved_object.name == name
    ]


def scrape(core, node_name):
    pods = core.list_namespaced_pod("gpu-operator", label_selector="app=nvidia-dcgm-exporter").items
    pod = next(p for p in pods if p.spec.node_name == node_name)
    response = core.connect_get_namespaced_pod_proxy_with_path(
        f"{pod.metadata.name}:9400", "gpu-operator", "metrics", _preload_content=False
    )
    return response.data.decode()


def read_log(core, name, namespace, **params):
    """Pod log text. The 36.x client returns str responses as a bytes repr ("b'...'",
    kubernetes-client/python#2596), so read the raw body as its own docs suggest."""
    response = core.read_namespaced_pod_log(name, namespace, _preload_content=False, **params)
    return response.data.decode()


def samples(text, metric):
    for family in text_string_to_metric_families(text):
        if family.name == metric:
            return family.samples
    return []


def kubectl(sim, *args):
    result = subprocess.run(
        [kubectl_path(), "--kubeconfig", str(sim.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_nodes_carry_gfd_labels_capacity_and_the_gpu_taint(core):
    nodes = {n.metadata.name: n for n in core.list_node().items}
    assert len(nodes) == 8
    mig = nodes["gpu-h100-mig-0"]
    assert mig.metadata.labels["nvidia.com/gpu.present"] == "true"
    assert mig.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert mig.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert mig.status.allocatable["nvidia.com/mig-1g.10gb"] == "28"
    assert [(t.key, t.value, t.effect) for t in mig.spec.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule")
    ]
    a100 = nodes["gpu-a100-0"]
    assert a100.status.capacity["nvidia.com/gpu"] == "8"
    assert a100.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert not nodes["cpu-0"].spec.taints
    assert all(
        c.status == "True" for n in nodes.values() for c in n.status.conditions if c.type == "Ready"
    )
    inventory = json.loads(mig.metadata.annotations["kubesim.dev/gpus"])
    assert len(inventory) == 8
    assert len(inventory[0]["migDevices"]) == 7
    exporters = core.list_namespaced_pod("gpu-operator", label_selector="app=nvidia-dcgm-exporter")
    assert sorted(p.spec.node_name for p in exporters.items) == sorted(
        n for n in nodes if n.startswith("gpu-")
    )
    assert all(p.status.phase == "Running" for p in exporters.items)
    assert (
        core.read_namespaced_service("nvidia-dcgm-exporter", "gpu-operator").spec.ports[0].port
        == 9400
    )


def test_a_pod_asking_for_nine_gpus_stays_pending_with_failed_scheduling(core, namespace):
    core.create_namespaced_pod(
        namespace, pod_manifest("nine", ["sleep", "60"], limits={"nvidia.com/gpu": 9})
    )

    def unschedulable():
        pod = core.read_namespaced_pod("nine", namespace)
        return next(
            (
                c
                for c in pod.status.conditions or []
                if c.type == "PodScheduled" and c.status == "False"
            ),
            None,
        )

    condition = wait_for(unschedulable, timeout=15)
    assert condition.reason == "Unschedulable"
    assert condition.message.startswith("0/8 nodes are available: ")
    assert "Insufficient nvidia.com/gpu" in condition.message
    assert "preemption: 0/8 nodes are available" in condition.message
    event = wait_for(
        lambda: [e for e in events_for(core, namespace, "nine") if e.reason == "FailedScheduling"]
    )[0]
    assert event.type == "Warning"
    assert event.message == condition.message
    assert event.source.component == "default-scheduler"
    assert phase(core, namespace, "nine") == "Pending"
    # A CPU pod without a toleration is told about the GPU taint on the GPU nodes.
    core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "huge-cpu"},
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1000"}}}
                ]
            },
        },
    )
    message = wait_for(
        lambda: next(
            (
                c.message
                for c in core.read_namespaced_pod("huge-cpu", namespace).status.conditions or []
                if c.type == "PodScheduled"
            ),
            None,
        ),
        timeout=15,
    )
    assert message == (
        "0/8 nodes are available: 2 Insufficient cpu, "
        "6 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/8 nodes are "
        "available: 2 No preemption victims found for incoming pod, "
        "6 Preemption is not helpful for scheduling."
    )


def test_mig_pods_land_only_where_the_profile_is_free(core, namespace, sim):
    names = [f"mig-{i}" for i in range(7)]
    for name in names:
        core.create_namespaced_pod(
            namespace, pod_manifest(name, ["sleep", "100000"], limits={"nvidia.com/mig-2g.20gb": 1})
        )
    wait_for(
        lambda: sum(phase(core, namespace, n) == "Running" for n in names) == 6,
        timeout=20,
        message="six 2g.20gb pods should run (the MIG node has 6)",
    )
    pods = [core.read_namespaced_pod(n, namespace) for n in names]
    running = [p for p in pods if p.status.phase == "Running"]
    assert {p.spec.node_name for p in running} == {"gpu-h100-mig-0"}
    uuids = [p.metadata.annotations["kubesim.dev/gpu-uuids"] for p in running]
    assert len(set(uuids)) == 6
    assert all(u.startswith("MIG-") for u in uuids)
    pending = next(p for p in pods if p.status.phase == "Pending")
    message = wait_for(
        lambda: next(
            (
                c.message
                for c in core.read_namespaced_pod(
                    pending.metadata.name, namespace
                ).status.conditions
                or []
                if c.type == "PodScheduled" and c.status == "False"
            ),
            None,
        ),
        timeout=15,
    )
    assert "Insufficient nvidia.com/mig-2g.20gb" in message
    # the node-side view (pod-resources) has the same devices
    status, body = sim.request("GET", "/kubesim/nodes/gpu-h100-mig-0/pod-resources")
    assert status == 200
    held = {
        device
        for pod in body["pod_resources"]
        if pod["namespace"] == namespace
        for container in pod["containers"]
        for entry in container["devices"]
        for device in entry["device_ids"]
    }
    assert held == set(uuids)
    # freeing one slice lets the pending pod start there
    core.delete_namespaced_pod(running[0].metadata.name, namespace)
    wait_for(lambda: phase(core, namespace, pending.metadata.name) == "Running", timeout=20)
    for name in names:
        if name != running[0].metadata.name:
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def test_batch_job_runs_to_complete_and_its_logs_show_the_echo_lines(core, batch, namespace, sim):
    batch.create_namespaced_job(
        namespace,
        job_manifest(
            "train",
            "echo starting $JOB_COMPLETION_INDEX; sleep 30; echo finished $JOB_COMPLETION_INDEX",
            completions=2,
            parallelism=2,
            indexed=True,
            limits={"nvidia.com/gpu": 1},
        ),
    )
    wait_for(lambda: job_condition(batch, namespace, "train", "Complete"), timeout=30)
    job = batch.read_namespaced_job("train", namespace)
    assert job.status.succeeded == 2
    assert not job.status.active
    assert job.status.completed_indexes == "0-1"
    assert job.status.start_time
    assert job.status.completion_time
    types = [c.type for c in job.status.conditions]
    assert types == ["SuccessCriteriaMet", "Complete"]
    complete = job_condition(batch, namespace, "train", "Complete")
    assert complete.reason == "CompletionsReached"
    assert complete.message == "Reached expected number of succeeded pods"
    pods = sorted(job_pods(core, namespace, "train"), key=lambda p: p.spec.hostname)
    assert [p.spec.hostname for p in pods] == ["train-0", "train-1"]
    assert all(p.status.phase == "Succeeded" for p in pods)
    assert all(p.metadata.owner_references[0].kind == "Job" for p in pods)
    assert all(not p.metadata.finalizers for p in pods)
    status = pods[0].status.container_statuses[0]
    assert status.state.terminated.exit_code == 0
    assert status.state.terminated.reason == "Completed"
    log = read_log(core, pods[1].metadata.name, namespace)
    assert log == "starting 1\nfinished 1\n"
    tail = read_log(core, pods[0].metadata.name, namespace, tail_lines=1)
    assert tail == "finished 0\n"
    stamped = read_log(core, pods[0].metadata.name, namespace, timestamps=True)
    assert stamped.splitlines()[0].endswith("Z starting 0")
    assert (
        kubectl(sim, "logs", "-n", namespace, pods[0].metadata.name) == "starting 0\nfinished 0\n"
    )
    reasons = {e.reason for e in events_for(core, namespace, pods[0].metadata.name)}
    assert {"Scheduled", "Pulled", "Created", "Started"} <= reasons  # Pulling only when not cached
    assert "Completed" in {e.reason for e in events_for(core, namespace, "train")}


def test_a_failing_job_ends_failed_with_backoff_limit_exceeded(core, batch, namespace):
    batch.create_namespaced_job(namespace, job_manifest("broken", "echo trying; exit 3", backoff=1))
    failed = wait_for(lambda: job_condition(batch, namespace, "broken", "Failed"), timeout=60)
    assert failed.reason == "BackoffLimitExceeded"
    assert failed.message == "Job has reached the specified backoff limit"
    job = batch.read_namespaced_job("broken", namespace)
    assert job.status.failed == 2
    assert [c.type for c in job.status.conditions] == ["FailureTarget", "Failed"]
    pods = job_pods(core, namespace, "broken")
    assert len(pods) == 2
    terminated = pods[0].status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    assert read_log(core, pods[0].metadata.name, namespace) == "trying\n"


def test_active_deadline_and_suspend(core, batch, namespace):
    manifest = job_manifest("slow", "sleep 100000")
    manifest["spec"]["activeDeadlineSeconds"] = 300
    batch.create_namespaced_job(namespace, manifest)
    failed = wait_for(lambda: job_condition(batch, namespace, "slow", "Failed"), timeout=30)
    assert failed.reason == "DeadlineExceeded"
    assert failed.message == "Job was active longer than specified deadline"

    # Pods deleted by a suspension count as failed (upstream isPodFailed), so allow retries.
    batch.create_namespaced_job(namespace, job_manifest("pausable", "sleep 100000", backoff=6))
    wait_for(
        lambda: any(p.status.phase == "Running" for p in job_pods(core, namespace, "pausable"))
    )
    batch.patch_namespaced_job("pausable", namespace, {"spec": {"suspend": True}})
    suspended = wait_for(
        lambda: job_condition(batch, namespace, "pausable", "Suspended"), timeout=15
    )
    assert (suspended.reason, suspended.message) == ("JobSuspended", "Job suspended")
    wait_for(lambda: not job_pods(core, namespace, "pausable"), timeout=15, message="pods deleted")
    paused = batch.read_namespaced_job("pausable", namespace).status
    assert not paused.active
    assert paused.failed == 1
    batch.patch_namespaced_job("pausable", namespace, {"spec": {"suspend": False}})
    wait_for(
        lambda: any(p.status.phase == "Running" for p in job_pods(core, namespace, "pausable"))
    )
    resumed = next(
        c
        for c in batch.read_namespaced_job("pausable", namespace).status.conditions
        if c.type == "Suspended"
    )
    assert (resumed.status, resumed.reason) == ("False", "JobResumed")
    restarted = batch.read_namespaced_job("pausable", namespace).status.start_time
    assert restarted >= paused.start_time


def test_dcgm_metrics_parse_and_name_the_pod_holding_each_gpu(core, namespace):
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "busy",
            ["python", "train.py"],
            limits={"nvidia.com/gpu": 2},
            node_selector={"kubernetes.io/hostname": "gpu-h100-0"},
        ),
    )
    core.create_namespaced_pod(
        namespace,
        pod_manifest("slice", ["python", "train.py"], limits={"nvidia.com/mig-1g.10gb": 1}),
    )
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "sleeper",
            ["sh", "-c", "echo waiting; sleep 100000"],
            limits={"nvidia.com/gpu": 1},
            node_selector={"kubernetes.io/hostname": "gpu-h100-0"},
        ),
    )
    wait_for(
        lambda: all(
            phase(core, namespace, name) == "Running" for name in ("busy", "slice", "sleeper")
        )
    )
    pod = core.read_namespaced_pod("busy", namespace)
    uuids = set(pod.metadata.annotations["kubesim.dev/gpu-uuids"].split(","))
    text = scrape(core, "gpu-h100-0")
    util = samples(text, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 8
    held = [s for s in util if s.labels.get("pod") == "busy"]
    assert {s.labels["UUID"] for s in held} == uuids
    assert all(s.labels["namespace"] == namespace and s.labels["container"] == "main" for s in held)
    assert all(s.value > 50 for s in held)
    idle = [s for s in util if "pod" not in s.labels]
    assert len(idle) == 5
    assert all(s.value == 0 for s in idle)
    # a container that only sleeps holds its GPU but leaves it idle
    (sleeping,) = [s for s in util if s.labels.get("pod") == "sleeper"]
    assert sleeping.value == 0
    sleeper_uuid = sleeping.labels["UUID"]
    tensor = {s.labels["UUID"]: s.value for s in samples(text, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")}
    assert tensor[sleeper_uuid] == 0
    assert all(tensor[u] > 0.3 for u in uuids)
    for s in util:
        assert list(s.labels)[:6] == [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "Hostname",
        ]
        assert s.labels["Hostname"] == "gpu-h100-0"
        assert s.labels["DCGM_FI_DRIVER_VERSION"]
    power = {s.labels["UUID"]: s.value for s in samples(text, "DCGM_FI_DEV_POWER_USAGE")}
    assert min(power[u] for u in uuids) > max(v for k, v in power.items() if k not in uuids)
    assert power[sleeper_uuid] < min(power[u] for u in uuids)
    fb_used = {s.labels["UUID"]: s.value for s in samples(text, "DCGM_FI_DEV_FB_USED")}
    assert all(fb_used[u] > 10000 for u in uuids)
    assert fb_used[sleeper_uuid] == 0
    # MIG node: instance series with GPU_I_PROFILE/GPU_I_ID, no GPU_UTIL for MIG
    mig_text = scrape(core, "gpu-h100-mig-0")
    gr = samples(mig_text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    mig_series = [s for s in gr if "GPU_I_ID" in s.labels]
    assert len(mig_series) == 28 + 6
    mine = [s for s in mig_series if s.labels.get("pod") == "slice"]
    assert len(mine) == 1
    assert mine[0].labels["GPU_I_PROFILE"] == "1g.10gb"
    assert mine[0].value > 0.5
    assert all("GPU_I_ID" not in s.labels for s in samples(mig_text, "DCGM_FI_DEV_GPU_UTIL"))
    assert len(samples(mig_text, "DCGM_FI_DEV_GPU_UTIL")) == 2  # GPUs 6-7, MIG disabled
    # the service proxy answers for one node at a time
    service_text = core.connect_get_namespaced_service_proxy_with_path(
        "nvidia-dcgm-exporter:9400", "gpu-operator", "metrics", _preload_content=False
    ).data.decode()
    assert samples(service_text, "DCGM_FI_DEV_GPU_TEMP")


def test_xid_injection_shows_in_metrics_and_lowers_allocatable(core, sim):
    answer = sim.admin("/kubesim/xid", {"node": "gpu-a100-1", "gpu": 3, "xid": 79})
    assert answer["healthy"] is False
    try:
        node = core.read_node("gpu-a100-1")
        assert node.status.allocatable["nvidia.com/gpu"] == "7"
        assert node.status.capacity["nvidia.com/gpu"] == "8"
        xid = {
            s.labels["gpu"]: s
            for s in samples(scrape(core, "gpu-a100-1"), "DCGM_FI_DEV_XID_ERRORS")
        }
        assert xid["3"].value == 79
        assert xid["3"].labels["err_code"] == "79"
        assert xid["0"].value == 0
    finally:
        sim.admin("/kubesim/xid", {"node": "gpu-a100-1", "gpu": 3, "xid": 0})
    assert core.read_node("gpu-a100-1").status.allocatable["nvidia.com/gpu"] == "8"


def test_fail_a_chosen_pod(core, namespace, sim):
    core.create_namespaced_pod(namespace, pod_manifest("victim", ["sleep", "100000"]))
    wait_for(lambda: phase(core, namespace, "victim") == "Running")
    sim.admin(
        f"/kubesim/namespaces/{namespace}/pods/victim/fail",
        {"exitCode": 137, "reason": "OOMKilled"},
    )
    wait_for(lambda: phase(core, namespace, "victim") == "Failed")
    terminated = (
        core.read_namespaced_pod("victim", namespace).status.container_statuses[0].state.terminated
    )
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


def test_node_not_ready_fails_its_pods_and_recovers(core, namespace, sim):
    node = "gpu-a100-1"
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "on-node",
            ["sleep", "100000"],
            limits={"nvidia.com/gpu": 1},
            node_selector={"kubernetes.io/hostname": node},
        ),
    )
    wait_for(lambda: phase(core, namespace, "on-node") == "Running")
    sim.admin(f"/kubesim/nodes/{node}/not-ready")
    try:
        wait_for(lambda: phase(core, namespace, "on-node") == "Failed", timeout=15)
        pod = core.read_namespaced_pod("on-node", namespace)
        disruption = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
        assert disruption.reason == "DeletionByTaintManager"
        assert pod.status.container_statuses[0].state.terminated.reason == "ContainerStatusUnknown"
        lost = core.read_node(node)
        ready = next(c for c in lost.status.conditions if c.type == "Ready")
        assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
        assert {(t.key, t.effect) for t in lost.spec.taints} >= {
            ("node.kubernetes.io/unreachable", "NoSchedule"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
        }
        # the exporter on a lost node cannot be reached
        with pytest.raises(ApiException) as err:
            scrape(core, node)
        assert err.value.status == 503
        # new pods pinned to it stay Pending on the taint
        core.create_namespaced_pod(
            namespace,
            pod_manifest("later", ["sleep", "10"], node_selector={"kubernetes.io/hostname": node}),
        )
        message = wait_for(
            lambda: next(
                (
                    c.message
                    for c in core.read_namespaced_pod("later", namespace).status.conditions or []
                    if c.type == "PodScheduled" and c.status == "False"
                ),
                None,
            ),
            timeout=15,
        )
        assert "node(s) had untolerated taint {node.kubernetes.io/unreachable: }" in message
    finally:
        sim.admin(f"/kubesim/nodes/{node}/ready")
    recovered = core.read_node(node)
    assert next(c for c in recovered.status.conditions if c.type == "Ready").status == "True"
    assert [t.key for t in recovered.spec.taints] == ["nvidia.com/gpu"]
    wait_for(lambda: phase(core, namespace, "later") in ("Running", "Succeeded"), timeout=15)


def test_follow_streams_log_lines_until_the_container_ends(core, namespace):
    core.create_namespaced_pod(
        namespace,
        pod_manifest(
            "chatty", ["sh", "-c", "echo one; sleep 100; echo two; sleep 100; echo three"]
        ),
    )
    wait_for(lambda: phase(core, namespace, "chatty") == "Running")
    response = core.read_namespaced_pod_log(
        "chatty", namespace, follow=True, _preload_content=False
    )
    lines = [line.decode() for line in response.stream() if line]
    assert "".join(lines) == "one\ntwo\nthree\n"
    assert phase(core, namespace, "chatty") == "Succeeded"


def test_on_failure_restarts_count_against_the_backoff_limit(core, batch, namespace):
    manifest = job_manifest("flaky", "echo attempt; exit 1", backoff=2)
    manifest["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    batch.create_namespaced_job(namespace, manifest)
    failed = wait_for(lambda: job_condition(batch, namespace, "flaky", "Failed"), timeout=60)
    assert failed.reason == "BackoffLimitExceeded"
    backoff = [e for e in core.list_namespaced_event(namespace).items if e.reason == "BackOff"]
    assert backoff
    assert backoff[0].message.startswith("Back-off restarting failed container main in pod flaky-")
    assert batch.read_namespaced_job("flaky", namespace).status.failed == 1


def test_init_containers_run_before_the_main_container(core, namespace):
    manifest = pod_manifest("with-init", ["sh", "-c", "echo main"])
    manifest["spec"]["initContainers"] = [
        {"name": "prepare", "image": "busybox", "command": ["sh", "-c", "echo preparing; sleep 5"]}
    ]
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: phase(core, namespace, "with-init") == "Succeeded", timeout=15)
    pod = core.read_namespaced_pod("with-init", namespace)
    init = pod.status.init_container_statuses[0]
    main = pod.status.container_statuses[0]
    assert init.state.terminated.exit_code == 0
    assert init.state.terminated.finished_at <= main.state.terminated.started_at
    assert read_log(core, "with-init", namespace, container="prepare") == "preparing\n"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod_log("with-init", namespace, container="nope")
    assert err.value.status == 400


def test_kubectl_sees_the_cluster(sim):
    nodes = kubectl(sim, "get", "nodes", "-L", "nvidia.com/gpu.product")
    assert "gpu-h100-mig-0" in nodes
    assert "NVIDIA-A100-SXM4-40GB" in nodes
    described = kubectl(sim, "describe", "node", "gpu-h100-mig-0")
    assert "nvidia.com/mig-1g.10gb:" in described
    assert "nvidia.com/gpu=present:NoSchedule" in described


def test_a_custom_cluster_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(
        """
pools:
  - name: lab
    count: 1
    cpu: "16"
    memory: 64Gi
    gpu:
      model: NVIDIA-A100-SXM4-40GB
      count: 2
      mig:
        layout:
          - gpus: 0
            profiles: ["3g.20gb", "2g.10gb", "1g.5gb"]
"""
    )
    with KubesimProcess(cluster=path, speed=100, workdir=tmp_path / "sim") as custom:
        api = custom.api_client()
        try:
            nodes = client.CoreV1Api(api).list_node().items
        finally:
            api.close()
    assert [n.metadata.name for n in nodes] == ["lab-0"]
    allocatable = nodes[0].status.allocatable
    assert allocatable["nvidia.com/gpu"] == "1"
    assert allocatable["nvidia.com/mig-3g.20gb"] == "1"
    assert allocatable["nvidia.com/mig-2g.10gb"] == "1"
    assert allocatable["nvidia.com/mig-1g.5gb"] == "1"


def test_an_invalid_cluster_file_stops_kubesim_with_the_reason(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "pools:\n  - name: x\n    gpu: {model: NVIDIA-H100-80GB-HBM3,\n"
        "          mig: {layout: [{gpus: 0, profiles: {7g.80gb: 2}}]}}\n"
    )
    with pytest.raises(
        RuntimeError, match=r"pools\[0\]\.gpu\.mig\.layout\[0\]\.profiles: .*14 compute slices"
    ):
        KubesimProcess(cluster=path, workdir=tmp_path / "sim").start()


def test_pod_active_deadline_and_log_windows(core, namespace):
    manifest = pod_manifest("bounded", ["sh", "-c", "echo a; sleep 50; echo b; sleep 100000"])
    manifest["spec"]["activeDeadlineSeconds"] = 200
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: phase(core, namespace, "bounded") == "Failed", timeout=15)
    pod = core.read_namespaced_pod("bounded", namespace)
    assert pod.status.reason == "DeadlineExceeded"
    assert pod.status.message == "Pod was active on the node longer than the specified deadline"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137
    assert read_log(core, "bounded", namespace) == "a\nb\n"
    assert read_log(core, "bounded", namespace, limit_bytes=1) == "a"
    # "b" was written 50 simulated seconds after "a", about 150 s before the end
    assert read_log(core, "bounded", namespace, since_seconds=100000) == "a\nb\n"
    assert read_log(core, "bounded", namespace, since_seconds=1) == ""


def test_pod_failure_policy_fail_job_and_ignore(core, batch, namespace, sim):
    manifest = job_manifest("policed", "sleep 30; exit 42", backoff=6)
    manifest["spec"]["podFailurePolicy"] = {
        "rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}},
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
            },
        ]
    }
    batch.create_namespaced_job(namespace, manifest)
    first = wait_for(
        lambda: [p for p in job_pods(core, namespace, "policed") if p.status.phase == "Running"]
    )[0]
    # a kill (137) is ignored: not counted, the pod is replaced
    sim.admin(f"/kubesim/namespaces/{namespace}/pods/{first.metadata.name}/fail", {"exitCode": 137})
    failed = wait_for(lambda: job_condition(batch, namespace, "policed", "Failed"), timeout=30)
    assert failed.reason == "PodFailurePolicy"
    assert failed.message.startswith("Container main for pod " + namespace + "/policed-")
    assert failed.message.endswith("failed with exit code 42 matching FailJob rule at index 1")
    assert batch.read_namespaced_job("policed", namespace).status.failed == 1
    assert len(job_pods(core, namespace, "policed")) == 2


def test_ttl_after_finished_deletes_the_job_and_its_pods(core, batch, namespace):
    manifest = job_manifest("short-lived", "echo done")
    manifest["spec"]["ttlSecondsAfterFinished"] = 100
    batch.create_namespaced_job(namespace, manifest)
    wait_for(lambda: job_condition(batch, namespace, "short-lived", "Complete"), timeout=15)

    def gone():
        try:
            batch.read_namespaced_job("short-lived", namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=15)
    wait_for(lambda: not job_pods(core, namespace, "short-lived"), timeout=15)


def test_controllers_survive_closed_watches(core, batch, namespace, sim):
    batch.create_namespaced_job(namespace, job_manifest("steady", "sleep 100; echo ok"))
    wait_for(lambda: any(p.status.phase == "Running" for p in job_pods(core, namespace, "steady")))
    sim.admin("/kubesim/faults", {"close_watches": True})
    wait_for(lambda: job_condition(batch, namespace, "steady", "Complete"), timeout=20)
    # and new work is still picked up after the resubscription
    batch.create_namespaced_job(namespace, job_manifest("after", "echo again"))
    wait_for(lambda: job_condition(batch, namespace, "after", "Complete"), timeout=20)


def test_deletion_terminates_gracefully(core, namespace):
    for name, command in (("trainer", ["python", "train.py"]), ("shell", ["sleep", "100000"])):
        manifest = pod_manifest(name, command)
        manifest["metadata"]["finalizers"] = ["example.com/keep"]
        manifest["spec"]["terminationGracePeriodSeconds"] = 300
        core.create_namespaced_pod(namespace, manifest)
    for name in ("trainer", "shell"):
        wait_for(lambda name=name: phase(core, namespace, name) == "Running")
        core.delete_namespaced_pod(name, namespace)
    # the trainer exits on SIGTERM; the shell ignores it and is killed after the grace period
    wait_for(lambda: phase(core, namespace, "trainer") == "Failed", timeout=10)
    assert phase(core, namespace, "shell") == "Running"
    wait_for(lambda: phase(core, namespace, "shell") == "Failed", timeout=10)
    codes = {
        name: core.read_namespaced_pod(name, namespace)
        .status.container_statuses[0]
        .state.terminated.exit_code
        for name in ("trainer", "shell")
    }
    assert codes == {"trainer": 143, "shell": 137}
    killing = [e for e in events_for(core, namespace, "shell") if e.reason == "Killing"]
    assert killing[0].message == "Stopping container main"
    for name in ("trainer", "shell"):
        core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": None}})


def test_priority_class_admission(api_client, core, namespace):
    scheduling = client.SchedulingV1Api(api_client)
    scheduling.create_priority_class(
        {"metadata": {"name": f"{namespace}-high"}, "value": 1000, "preemptionPolicy": "Never"}
    )
    manifest = pod_manifest("important", ["sleep", "10"])
    manifest["spec"]["priorityClassName"] = f"{namespace}-high"
    pod = core.create_namespaced_pod(namespace, manifest)
    assert (pod.spec.priority, pod.spec.preemption_policy) == (1000, "Never")
    plain = core.create_namespaced_pod(namespace, pod_manifest("plain", ["sleep", "10"]))
    assert plain.spec.priority == 0
    manifest = pod_manifest("unknown", ["sleep", "10"])
    manifest["spec"]["priorityClassName"] = "no-such-class"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, manifest)
    assert err.value.status == 403
    assert "no PriorityClass with name no-such-class was found" in err.value.body
    scheduling.delete_priority_class(f"{namespace}-high")


def test_deleting_a_job_deletes_its_pods(core, batch, namespace, sim):
    batch.create_namespaced_job(
        namespace, job_manifest("doomed", "sleep 100000", completions=2, parallelism=2)
    )
    wait_for(
        lambda: (
            len([p for p in job_pods(core, namespace, "doomed") if p.status.phase == "Running"])
            == 2
        )
    )
    kubectl(sim, "delete", "job", "doomed", "-n", namespace, "--wait=false")
    wait_for(
        lambda: not job_pods(core, namespace, "doomed"), timeout=20, message="pods left behind"
    )


def test_new_pods_get_the_api_defaults_and_default_tolerations(core, namespace):
    pod = core.create_namespaced_pod(namespace, pod_manifest("defaults", ["sleep", "1"]))
    container = pod.spec.containers[0]
    assert container.image_pull_policy == "IfNotPresent"  # busybox:1.36 has a tag
    assert container.termination_message_path == "/dev/termination-log"
    assert pod.spec.scheduler_name == "default-scheduler"
    assert pod.spec.service_account_name == "default"
    assert pod.spec.termination_grace_period_seconds == 30
    tolerations = {(t.key, t.effect, t.toleration_seconds) for t in pod.spec.tolerations}
    assert ("node.kubernetes.io/not-ready", "NoExecute", 300) in tolerations
    assert ("node.kubernetes.io/unreachable", "NoExecute", 300) in tolerations
    assert ("nvidia.com/gpu", "NoSchedule", None) in tolerations


def test_eviction_subresource(core, namespace):
    manifest = pod_manifest("evictable", ["sleep", "100000"])
    manifest["metadata"]["finalizers"] = ["example.com/keep"]
    core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: phase(core, namespace, "evictable") == "Running")
    core.create_namespaced_pod_eviction(
        "evictable",
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": "evictable", "namespace": namespace},
        },
    )
    pod = core.read_namespaced_pod("evictable", namespace)
    assert pod.metadata.deletion_timestamp is not None
    disruption = next(c for c in pod.status.conditions if c.type == "DisruptionTarget")
    assert (disruption.reason, disruption.message) == (
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )
    wait_for(lambda: phase(core, namespace, "evictable") == "Failed", timeout=10)
    final = core.read_namespaced_pod("evictable", namespace).status.conditions
    assert any(c.type == "DisruptionTarget" for c in final)
    core.patch_namespaced_pod("evictable", namespace, {"metadata": {"finalizers": None}})


def test_services_get_cluster_ips_and_endpoints_with_gang_hostnames(core, batch, namespace):
    def exporter_addresses():
        try:
            endpoints = core.read_namespaced_endpoints("nvidia-dcgm-exporter", "gpu-operator")
        except ApiException:
            return None
        return endpoints if endpoints.subsets and len(endpoints.subsets[0].addresses) == 6 else None

    exporter = wait_for(exporter_addresses, timeout=10)
    assert exporter.subsets[0].ports[0].port == 9400
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "gang"},
            "spec": {"clusterIP": "None", "selector": {"batch.kubernetes.io/job-name": "gang"}},
        },
    )
    plain = core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
    )
    assert plain.spec.cluster_ip.startswith("10.")
    assert plain.spec.ports[0].target_port == 80
    manifest = job_manifest("gang", "sleep 100000", completions=2, parallelism=2, indexed=True)
    manifest["spec"]["template"]["spec"]["subdomain"] = "gang"
    batch.create_namespaced_job(namespace, manifest)

    def hostnames():
        try:
            endpoints = core.read_namespaced_endpoints("gang", namespace)
        except ApiException:
            return []
        subsets = endpoints.subsets or []
        return sorted(a.hostname for s in subsets for a in s.addresses or [])

    assert wait_for(lambda: hostnames() == ["gang-0", "gang-1"], timeout=15)


def test_a_pod_recreated_under_the_same_name_keeps_its_own_devices(core, namespace, sim):
    limits = {"nvidia.com/gpu": 1}
    selector = {"kubernetes.io/hostname": "gpu-h100-1"}
    core.create_namespaced_pod(
        namespace, pod_manifest("same", ["sleep", "100000"], limits=limits, node_selector=selector)
    )
    wait_for(lambda: phase(core, namespace, "same") == "Running")
    core.delete_namespaced_pod("same", namespace, grace_period_seconds=0)
    core.create_namespaced_pod(
        namespace, pod_manifest("same", ["sleep", "100000"], limits=limits, node_selector=selector)
    )
    wait_for(lambda: phase(core, namespace, "same") == "Running")
    time.sleep(0.5)  # let the old pod's task finish its clean-up
    status, body = sim.request("GET", "/kubesim/nodes/gpu-h100-1/pod-resources")
    assert status == 200
    held = [p for p in body["pod_resources"] if p["namespace"] == namespace and p["name"] == "same"]
    assert len(held) == 1
    uuid = core.read_namespaced_pod("same", namespace).metadata.annotations["kubesim.dev/gpu-uuids"]
    assert held[0]["containers"][0]["devices"][0]["device_ids"] == [uuid]
