"""Kueue v0.19 behaviour beyond Jobs at full size, in a running kubesim: PartialAdmission of a Job
with `kueue.x-k8s.io/job-min-parallelism`, and the pod integration (a plain pod and Kueue's own
pod-group example held by a scheduling gate until admitted)."""

from __future__ import annotations

import uuid

import pytest
import yaml
from kubernetes import client
from kubesim.testing import shared_crds_dir, wait_for

from .test_kueue_e2e import GPU, GROUP, VERSION, condition, custom, gpu_queues, workload_for

pytestmark = [pytest.mark.kubesim]


def _workloads(api, namespace) -> list[dict]:
    return custom(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")[
        "items"
    ]


def test_job_with_min_parallelism_is_admitted_with_fewer_pods(api, namespace):
    suffix = uuid.uuid4().hex[:6]
    gpu_queues(api, namespace, suffix, [("lq", 8, {})])
    batch = client.BatchV1Api(api)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {
                "name": "elastic",
                "labels": {"kueue.x-k8s.io/queue-name": "lq"},
                "annotations": {"kueue.x-k8s.io/job-min-parallelism": "2"},
            },
            "spec": {
                "parallelism": 6,
                "completions": 6,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "train",
                                "image": "pytorch/pytorch",
                                "command": ["sh", "-c", "sleep 100000"],
                                "resources": {"limits": {GPU: "3"}},
                            }
                        ],
                    }
                },
            },
        },
    )

    def admitted():
        wl = workload_for(api, namespace, "elastic")
        return wl if wl and (condition(wl, "Admitted") or {}).get("status") == "True" else None

    wl = wait_for(admitted, timeout=30, message="the partial workload was never admitted")
    # 6 pods x 3 GPUs do not fit in 8; the largest count >= 2 that fits is 2
    assert wl["spec"]["podSets"][0]["minCount"] == 2
    assert wl["status"]["admission"]["podSetAssignments"][0]["count"] == 2
    job = wait_for(
        lambda: (j := batch.read_namespaced_job("elastic", namespace)).spec.suspend is False and j,
        timeout=30,
    )
    assert job.spec.parallelism == 2
    assert job.metadata.annotations["kueue.x-k8s.io/job-original-parallelism"] == "6"


def test_plain_pod_with_a_queue_is_gated_until_admitted(api, namespace):
    suffix = uuid.uuid4().hex[:6]
    gpu_queues(api, namespace, suffix, [("lq", 1, {})])
    core = client.CoreV1Api(api)

    def pod(name: str) -> dict:
        return {
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "pytorch/pytorch",
                        "command": ["sh", "-c", "sleep 100000"],
                        "resources": {"limits": {GPU: "1"}},
                    }
                ],
            },
        }

    created = core.create_namespaced_pod(namespace, pod("first"))
    assert [g.name for g in created.spec.scheduling_gates] == ["kueue.x-k8s.io/admission"]
    assert created.metadata.labels["kueue.x-k8s.io/managed"] == "true"
    core.create_namespaced_pod(namespace, pod("second"))

    def running(name: str):
        current = core.read_namespaced_pod(name, namespace)
        return current if current.status.phase == "Running" else None

    first = wait_for(lambda: running("first"), timeout=30, message="admitted pod never ran")
    assert first.spec.node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert not first.spec.scheduling_gates
    workloads = {w["metadata"]["name"]: w for w in _workloads(api, namespace)}
    assert len(workloads) == 2
    pending = next(w for n, w in workloads.items() if n.startswith("pod-second-"))
    assert (condition(pending, "QuotaReserved") or {}).get("status") != "True"
    second = core.read_namespaced_pod("second", namespace)
    assert [g.name for g in second.spec.scheduling_gates] == ["kueue.x-k8s.io/admission"]


def test_kueue_pod_group_example_runs_as_one_workload(api, namespace, kubectl):
    examples = shared_crds_dir() / "kueue" / "examples"
    setup = yaml.safe_load_all((examples / "single-clusterqueue-setup.yaml").read_text())
    suffix = uuid.uuid4().hex[:6]
    for doc in setup:
        if doc["kind"] in ("ResourceFlavor", "ClusterQueue"):
            doc["metadata"]["name"] += f"-{suffix}"
            if doc["kind"] == "ClusterQueue":
                doc["spec"]["resourceGroups"][0]["flavors"][0]["name"] += f"-{suffix}"
            plural = "resourceflavors" if doc["kind"] == "ResourceFlavor" else "clusterqueues"
            custom(api).create_cluster_custom_object(GROUP, VERSION, plural, doc)
        else:
            doc["metadata"]["namespace"] = namespace
            doc["spec"]["clusterQueue"] += f"-{suffix}"
            custom(api).create_namespaced_custom_object(
                GROUP, VERSION, namespace, "localqueues", doc
            )
    kubectl("create", "-n", namespace, "-f", str(examples / "kueue-pod-group.yaml"))
    core = client.CoreV1Api(api)

    def finished():
        items = _workloads(api, namespace)
        return items if items and (condition(items[0], "Finished") or {}).get("status") else None

    (wl,) = wait_for(finished, timeout=60, message="the pod group never finished")
    assert wl["metadata"]["name"] == "sample-group"
    assert sum(ps["count"] for ps in wl["spec"]["podSets"]) == 2
    assert condition(wl, "Finished")["reason"] == "Succeeded"
    phases = {p.status.phase for p in core.list_namespaced_pod(namespace).items}
    assert phases == {"Succeeded"}
