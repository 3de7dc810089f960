"""Volcano gang scheduling in a running kubesim (default cluster: three full 8 x H100 nodes)."""

from __future__ import annotations

import time

import pytest
from kubernetes import client
from kubesim.testing import wait_for

GPU = "nvidia.com/gpu"
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
TOLERATE_GPU = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]


def gpu_pod_spec(gpus: int, command: str) -> dict:
    return {
        "restartPolicy": "Never",
        "nodeSelector": H100,
        "tolerations": TOLERATE_GPU,
        "containers": [
            {
                "name": "train",
                "image": "pytorch/pytorch",
                "command": ["sh", "-c", command],
                "resources": {"limits": {GPU: str(gpus)}},
            }
        ],
    }


def bound(pods) -> list[str]:
    return [p.metadata.name for p in pods if p.spec.node_name]


def test_gang_waits_for_free_gpus_and_starts_whole(api, namespace):
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    # Occupy one of the three full H100 nodes.
    core.create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "blocker"},
            "spec": gpu_pod_spec(8, "sleep 1000000"),
        },
    )
    wait_for(lambda: core.read_namespaced_pod("blocker", namespace).spec.node_name, timeout=20)

    worker = {
        "name": "worker",
        "replicas": 2,
        "template": {"spec": gpu_pod_spec(8, "sleep 30; echo done")},
    }
    master = {
        "name": "master",
        "replicas": 1,
        "template": {"spec": gpu_pod_spec(8, "sleep 30; echo done")},
    }
    custom.create_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        namespace,
        "jobs",
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "gang"},
            "spec": {
                "minAvailable": 3,
                "tasks": [master, worker],
                "plugins": {"pytorch": ["--master=master", "--worker=worker"]},
            },
        },
    )

    selector = "volcano.sh/job-name=gang"
    pods = wait_for(
        lambda: (
            (p := core.list_namespaced_pod(namespace, label_selector=selector).items)
            and len(p) == 3
            and p
        ),
        timeout=20,
        message="the gang's pods were not created",
    )
    # Two of three pods would fit; for a while none is bound.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        assert bound(pods) == [], "a gang member was bound before the whole gang fitted"
        time.sleep(0.2)
    job = custom.get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", "gang"
    )
    assert job["status"]["state"]["phase"] == "Pending"
    pg_name = f"gang-{job['metadata']['uid']}"
    pg = custom.get_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", namespace, "podgroups", pg_name
    )
    assert pg["spec"]["minMember"] == 3
    unschedulable = next(c for c in pg["status"]["conditions"] if c["type"] == "Unschedulable")
    assert "tasks in gang unschedulable" in unschedulable["message"]

    core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
    seen_partial = []

    def all_bound():
        current = core.list_namespaced_pod(namespace, label_selector=selector).items
        names = bound(current)
        if 0 < len(names) < 3:
            seen_partial.append(names)
        return len(names) == 3 and current

    pods = wait_for(all_bound, timeout=30, message="the gang never started")
    assert seen_partial == []
    env = {p.metadata.name: {e.name: e.value for e in p.spec.containers[0].env or []} for p in pods}
    assert env["gang-master-0"]["RANK"] == "0"
    assert env["gang-worker-1"]["RANK"] == "2"
    assert env["gang-worker-1"]["MASTER_ADDR"] == "gang-master-0.gang"

    def phase():
        return custom.get_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", "gang"
        )["status"]["state"]["phase"]

    wait_for(lambda: phase() == "Completed", timeout=60, message="the gang job never completed")
    queue = custom.get_cluster_custom_object(
        "scheduling.volcano.sh", "v1beta1", "queues", "default"
    )
    assert queue["status"]["state"] == "Open"


def test_webhook_denies_min_available_above_replicas(api, namespace):
    custom = client.CustomObjectsApi(api)
    with pytest.raises(client.ApiException) as denied:
        custom.create_namespaced_custom_object(
            "batch.volcano.sh",
            "v1alpha1",
            namespace,
            "jobs",
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "bad"},
                "spec": {
                    "minAvailable": 5,
                    "tasks": [
                        {
                            "name": "main",
                            "replicas": 2,
                            "template": {"spec": gpu_pod_spec(1, "true")},
                        }
                    ],
                },
            },
        )
    assert denied.value.status == 400
    assert (
        "admission webhook \\\"validatejob.volcano.sh\\\" denied the request: job 'minAvailable'"
        in (denied.value.body)
    )
