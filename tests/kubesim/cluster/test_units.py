"""Pure parts of the controllers: the container shell, scheduler filters and messages."""

from __future__ import annotations

import pytest
from kubesim.controllers import scheduler
from kubesim.controllers.node import shell


def _plan(command, args=None, env=None, default=60.0):
    container = {"command": command, **({"args": args} if args else {})}
    return shell.plan(container, env or {}, default)


def test_script_runs_as_written_in_simulated_time():
    t = _plan(
        ["sh", "-c", 'echo start; sleep 5 && echo "index $JOB_COMPLETION_INDEX"; exit 3'],
        env={"JOB_COMPLETION_INDEX": "2"},
    )
    assert t.scripted
    assert t.lines == [(0.0, "start"), (5.0, "index 2")]
    assert (t.duration, t.exit_code) == (5.0, 3)


def test_script_connectors_and_newlines():
    t = _plan(["/bin/bash", "-c"], ["false || echo recovered\nsleep 1m\ntrue && echo done\nfalse"])
    assert t.lines == [(0.0, "recovered"), (60.0, "done")]
    assert (t.duration, t.exit_code) == (60.0, 1)
    assert _plan(["sh", "-c", "false && echo never"]).lines == []


def test_redirections_to_stderr_and_dev_null_are_accepted():
    t = _plan(
        ["sh", "-c", "echo oops >&2; echo quiet > /dev/null 2>&1; echo kept 2>/dev/null; exit 2"]
    )
    assert t.scripted
    assert [text for _, text in t.lines] == ["oops", "kept"]
    assert t.exit_code == 2


def test_exec_form_sleep_and_unknown_programs():
    assert _plan(["sleep", "30"]).duration == 30.0
    opaque = _plan(["python", "train.py"], default=120.0)
    assert not opaque.scripted
    assert opaque.duration == 120.0
    assert opaque.exit_code == 0
    piped = _plan(["sh", "-c", "echo a | grep a"], default=7.0)
    assert not piped.scripted
    assert piped.duration == 7.0


def test_progress_lines_grow_with_elapsed_time():
    early = shell.progress_lines("s", 600.0, 60.0, gpus=["GPU-1"], command="python train.py")
    late = shell.progress_lines("s", 600.0, 600.0, gpus=["GPU-1"], command="python train.py")
    assert len(early) < len(late)
    assert any("loss" in text and "epoch" in text for _, text in early)
    assert late[-1][1].startswith("training finished")


def _node(name="n1", taints=None, labels=None, gpus="8", cpu="64"):
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110", "nvidia.com/gpu": gpus}
        },
    }


def _pod(gpus=1, tolerations=None, selector=None, affinity=None):
    spec = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        "tolerations": tolerations or [],
    }
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = affinity
    return {"metadata": {"name": "p"}, "spec": spec}


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_filters_word_their_reasons_like_kube_scheduler():
    assert scheduler.fit_pod(_pod(), _node(taints=[GPU_TAINT]), {}) == (
        "node(s) had untolerated taint {nvidia.com/gpu: present}"
    )
    assert scheduler.fit_pod(_pod(tolerations=TOLERATE), _node(taints=[GPU_TAINT]), {}) is None
    assert scheduler.fit_pod(_pod(9, TOLERATE), _node(), {}) == "Insufficient nvidia.com/gpu"
    assert (
        scheduler.fit_pod(_pod(2), _node(), {"nvidia.com/gpu": 7}) == "Insufficient nvidia.com/gpu"
    )
    assert scheduler.fit_pod(_pod(selector={"zone": "a"}), _node(), {}) == (
        "node(s) didn't match Pod's node affinity/selector"
    )


@pytest.mark.parametrize(
    ("operator", "values", "labels", "fits"),
    [
        ("In", ["a", "b"], {"zone": "a"}, True),
        ("In", ["b"], {"zone": "a"}, False),
        ("NotIn", ["a"], {"zone": "a"}, False),
        ("NotIn", ["a"], {}, True),
        ("Exists", None, {"zone": "x"}, True),
        ("Exists", None, {}, False),
        ("DoesNotExist", None, {}, True),
    ],
)
def test_required_node_affinity(operator, values, labels, fits):
    expression = {"key": "zone", "operator": operator, **({"values": values} if values else {})}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expression]}]
            }
        }
    }
    assert (scheduler.fit_pod(_pod(0, affinity=affinity), _node(labels=labels), {}) is None) == fits


def test_failure_message_is_a_sorted_histogram_with_the_preemption_summary():
    per_node = {
        "cpu-0": ["node(s) had untolerated taint {nvidia.com/gpu: present}"],
        "cpu-1": ["node(s) had untolerated taint {nvidia.com/gpu: present}"],
        **{f"gpu-{i}": ["Insufficient nvidia.com/gpu"] for i in range(6)},
    }
    assert scheduler.failure_message(8, per_node) == (
        "0/8 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "6 Insufficient nvidia.com/gpu. preemption: 0/8 nodes are available: "
        "2 Preemption is not helpful for scheduling, "
        "6 No preemption victims found for incoming pod."
    )
    assert scheduler.failure_message(0, {}) == "no nodes available to schedule pods"
    assert scheduler.failure_message(
        2, {"a": ["Insufficient cpu"], "b": ["Insufficient cpu"]}, preemption_policy="Never"
    ) == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    )


def test_pod_requests_default_to_limits_and_take_the_largest_init_container():
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
            "containers": [
                {
                    "name": "a",
                    "resources": {
                        "limits": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"}
                    },
                },
                {"name": "b", "resources": {"requests": {"cpu": "1"}}},
            ],
        }
    }
    assert scheduler.pod_requests(pod) == {
        "cpu": 4000,
        "memory": 1024**3,
        "nvidia.com/gpu": 2,
        "pods": 1,
    }


def test_gang_placement_is_all_or_nothing():
    nodes = [_node("a", gpus="8"), _node("b", gpus="8")]
    pods = [dict(_pod(4), metadata={"name": f"w{i}"}) for i in range(4)]
    placement, failure = scheduler.place(pods, nodes, {})
    assert failure is None
    assert sorted(placement.values()) == ["a", "a", "b", "b"]
    placement, failure = scheduler.place([*pods, dict(_pod(4), metadata={"name": "w4"})], nodes, {})
    assert failure is not None


def test_device_manager_frees_a_deleted_pods_gpus_before_admitting_the_next():
    """A pod bound where a just-deleted pod held all GPUs is admitted (real device manager:
    UpdateAllocatedDevices before Allocate), while a pod that still exists keeps its GPUs."""
    from kubesim.cluster import default_cluster
    from kubesim.controllers.node.kubelet import AdmissionError, DeviceManager

    def pod(name: str, uid: str) -> dict:
        return {
            "metadata": {"namespace": "ns", "name": name, "uid": uid},
            "spec": {
                "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]
            },
        }

    cluster = default_cluster()
    node = next(
        n.name for n in cluster.nodes if n.name.startswith("gpu-h100-") and "mig" not in n.name
    )
    devices = DeviceManager(cluster)
    devices.allocate(node, pod("old", "u1"))
    living = {"u1"}

    def exists(_namespace: str, _name: str, uid: str) -> bool:
        return uid in living

    with pytest.raises(AdmissionError, match="Requested: 8, Available: 0"):
        devices.allocate(node, pod("new", "u2"), exists=exists)
    living.clear()  # the old pod is deleted from the API
    plan = devices.allocate(node, pod("new", "u2"), exists=exists)
    assert len(plan["c"]["nvidia.com/gpu"]) == 8
    assert {h[1] for h in devices.assigned[node].values()} == {"new"}
