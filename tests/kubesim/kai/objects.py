"""Manifests and reads for the KAI tests (the official client against kubesim)."""

from __future__ import annotations

from kubernetes import client
from kubesim.testing import wait_for

GROUP = "scheduling.run.ai"
POOL_LABEL = "kai.scheduler/node-pool"
QUEUE_LABEL = "kai.scheduler/queue"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
RESERVATION_NS = "kai-resource-reservation"


def queue(
    name: str,
    *,
    pool: str | None,
    gpu_quota: float,
    gpu_limit: float = -1,
    weight: float = 1,
    parent: str | None = None,
) -> dict:
    """A Queue as the portal writes one: cpu and memory unlimited, the GPU numbers given."""
    spec: dict = {
        "resources": {
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": weight},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    metadata: dict = {"name": name}
    if pool:
        metadata["labels"] = {POOL_LABEL: pool}
    return {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": metadata, "spec": spec}


def create_queues(api, *queues: dict) -> None:
    custom = client.CustomObjectsApi(api)
    for body in queues:
        custom.create_cluster_custom_object(GROUP, "v2", "queues", body)


def pod_spec(*, gpus: int = 0, seconds: int = 3600, priority_class: str | None = None) -> dict:
    resources: dict = {"requests": {"cpu": "1", "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec = {
        "schedulerName": "kai-scheduler",
        "restartPolicy": "Never",
        "tolerations": [GPU_TOLERATION],
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "command": ["sleep", str(seconds)],
                "resources": resources,
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def pod(
    name: str,
    queue_name: str,
    pool: str | None,
    *,
    fraction: str | None = None,
    annotations: dict | None = None,
    **spec_options,
) -> dict:
    labels = {QUEUE_LABEL: queue_name}
    if pool:
        labels[POOL_LABEL] = pool
    notes = dict(annotations or {})
    if fraction is not None:
        notes["gpu-fraction"] = fraction
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": notes},
        "spec": pod_spec(**spec_options),
    }


def read_pod(api, namespace: str, name: str):
    return client.CoreV1Api(api).read_namespaced_pod(name, namespace)


def gpu_uuid_of(api, pod) -> str | None:
    """The GPU a fraction pod got, as a user finds it: its runai-gpu-group label, the reservation
    pod with the same label, that pod's run.ai/reserve_for_gpu_index annotation."""
    group = (pod.metadata.labels or {}).get("runai-gpu-group")
    if not group:
        return None
    reservations = (
        client.CoreV1Api(api)
        .list_namespaced_pod(RESERVATION_NS, label_selector=f"runai-gpu-group={group}")
        .items
    )
    if not reservations:
        return None
    return (reservations[0].metadata.annotations or {}).get("run.ai/reserve_for_gpu_index")


def podgroup_of(api, namespace: str, pod_name: str) -> dict:
    pg_name = wait_for(
        lambda: (read_pod(api, namespace, pod_name).metadata.annotations or {}).get(
            "pod-group-name"
        ),
        timeout=20,
        message=f"pod {pod_name} was never grouped",
    )
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, "v2alpha2", namespace, "podgroups", pg_name
    )


def unschedulable_reasons(podgroup: dict) -> list[dict]:
    for condition in (podgroup.get("status") or {}).get("schedulingConditions") or []:
        if condition.get("type") == "UnschedulableOnNodePool" and condition.get("status") == "True":
            return condition.get("reasons") or []
    return []


def phases(api, namespace: str) -> dict[str, str]:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return {p.metadata.name: p.status.phase for p in pods}
