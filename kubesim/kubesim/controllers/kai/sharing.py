"""GPU sharing as KAI does it: a pod's GPU request (whole devices, a `gpu-fraction`, or
`gpu-memory` in MiB, on `gpu-fraction-num-devices` devices), the admission webhook's checks and
mutation, and the objects the binder creates (reservation pods, the shared-GPU ConfigMaps).
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import string
from dataclasses import dataclass

from kubesim.api.errors import ApiError
from kubesim.api.quantity import Quantity, QuantityError

SCHEDULER_NAME = "kai-scheduler"
RESERVATION_NAMESPACE = "kai-resource-reservation"
RESERVATION_APP = "kai-resource-reservation"
RESERVATION_CONTAINER = "resource-reservation"
RESERVATION_IMAGE = "ghcr.io/kai-scheduler/kai-scheduler/resource-reservation:v0.17.0"
GPU_INDEX_ANNOTATION = "run.ai/reserve_for_gpu_index"
GPU_GROUP_LABEL = "runai-gpu-group"
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
NUM_DEVICES = "gpu-fraction-num-devices"
FRACTION_CONTAINER = "gpu-fraction-container-name"
MPS = "mps"
RECEIVED_TYPE = "received-resource-type"
CONFIGMAP_ANNOTATION = "runai/shared-gpu-configmap"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
RUNTIME_CLASS = "nvidia"
POD_WEBHOOK = "admission.kai-scheduler.svc"
DEFAULT_GPU_MEMORY_MIB = 100  # what KAI assumes for a node without the memory label


@dataclass(frozen=True)
class GpuRequest:
    """What a pod asks of GPUs. `portion` is thousandths of one device per shared device."""

    whole: int = 0
    portion: int = 0
    memory_mib: int = 0
    devices: int = 1

    @property
    def fractional(self) -> bool:
        return self.portion > 0 or self.memory_mib > 0

    def portion_on(self, gpu_memory_mib: int) -> int:
        """The share of one device this request takes on a GPU with that much memory."""
        if self.memory_mib:
            return min(1000, math.ceil(self.memory_mib * 1000 / max(gpu_memory_mib, 1)))
        return self.portion

    def quota(self, gpu_memory_mib: int) -> int:
        """GPUs (in thousandths) the queue is charged for this pod."""
        if self.fractional:
            return self.portion_on(gpu_memory_mib) * self.devices
        return self.whole * 1000


def gpu_request(pod: dict) -> GpuRequest:
    """Read from a pod that passed admission (so the annotations parse)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    devices = 1
    if annotations.get(NUM_DEVICES):
        try:
            devices = max(1, int(annotations[NUM_DEVICES]))
        except ValueError:
            devices = 1
    if annotations.get(GPU_FRACTION):
        try:
            portion = round(float(annotations[GPU_FRACTION]) * 1000)
        except ValueError:
            portion = 0
        return GpuRequest(portion=max(1, min(999, portion)), devices=devices)
    if annotations.get(GPU_MEMORY):
        try:
            memory = int(annotations[GPU_MEMORY])
        except ValueError:
            memory = 0
        if memory > 0:
            return GpuRequest(memory_mib=memory, devices=devices)
    whole = 0
    spec = pod.get("spec") or {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get("nvidia.com/gpu")
        if value is None:
            value = (resources.get("requests") or {}).get("nvidia.com/gpu")
        if value is not None:
            try:
                whole += int(Quantity.parse(str(value)).value)
            except (QuantityError, ValueError):
                continue
    return GpuRequest(whole=whole)


def node_gpu_memory(node: dict) -> int:
    """MiB of one GPU on the node, from the GPU feature discovery label (floored to 100 MiB)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    try:
        memory = int(labels.get(GPU_MEMORY_LABEL, ""))
    except ValueError:
        return DEFAULT_GPU_MEMORY_MIB
    return max(DEFAULT_GPU_MEMORY_MIB, memory - memory % 100)


def portion_text(portion: int) -> str:
    """The BindRequest's receivedGPU.portion ("%.2f")."""
    return f"{portion / 1000:.2f}"


# ----------------------------------------------------------------------------------------------
# Admission (the pod webhook's gpusharing plugin)


def _deny(message: str) -> ApiError:
    return ApiError(
        403,
        "Forbidden",
        f'admission webhook "{POD_WEBHOOK}" denied the request: {message}',
    )


def _has_whole_gpu_limit(pod: dict) -> bool:
    spec = pod.get("spec") or {}
    for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if "nvidia.com/gpu" in ((container.get("resources") or {}).get("limits") or {}):
            return True
    return False


_DECIMAL = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def validation_error(pod: dict) -> str | None:
    """KAI's ValidateGpuRequests, in its order and words; None when the pod is fine."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    has_fraction = GPU_FRACTION in annotations
    has_memory = GPU_MEMORY in annotations
    has_count = NUM_DEVICES in annotations
    whole = _has_whole_gpu_limit(pod)
    fractional = has_fraction or has_memory
    if not fractional and annotations.get(MPS) == "true":
        return "MPS is only supported with GPU fraction request"
    if has_fraction and whole:
        return "cannot have both GPU fraction request and whole GPU resource request/limit"
    if has_memory and (has_fraction or whole):
        return "cannot request both GPU and GPU memory"
    if has_count and not fractional:
        return (
            "cannot request multiple fractional devices without specifying fraction portion or "
            "gpu-memory"
        )
    if has_memory:
        text = str(annotations[GPU_MEMORY])
        if not text.isdigit() or int(text) == 0:
            return "gpu-memory annotation value must be a positive integer greater than 0"
    if has_fraction:
        text = str(annotations[GPU_FRACTION])
        try:
            value = float(text)
        except ValueError:
            return "gpu-fraction annotation value must be a positive number smaller than 1.0"
        if not math.isnan(value) and not (0 < value < 1):  # NaN is caught as a non-quantity
            return "gpu-fraction annotation value must be a positive number smaller than 1.0"
        if not _DECIMAL.match(text.strip()) or text != text.strip():
            return (
                "gpu-fraction annotation value must be a float written with a decimal point or "
                f"a scientific notation .given value: {text}"
            )
    if has_count:
        text = str(annotations[NUM_DEVICES])
        if not text.isdigit() or int(text) == 0:
            return "fraction count annotation value must be a positive integer greater than 0"
    return None


def _fraction_container(pod: dict) -> tuple[dict, int, bool] | None:
    """(container, index, is_init) that receives the GPU: gpu-fraction-container-name, else the
    first container."""
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    wanted = annotations.get(FRACTION_CONTAINER)
    if wanted:
        for index, container in enumerate(spec.get("containers") or []):
            if container.get("name") == wanted:
                return container, index, False
        for index, container in enumerate(spec.get("initContainers") or []):
            if container.get("name") == wanted:
                return container, index, True
        return None
    containers = spec.get("containers") or []
    return (containers[0], 0, False) if containers else None


def configmap_names(pod: dict) -> tuple[str, str] | None:
    """(capabilities ConfigMap, env-vars ConfigMap) of a fraction pod mutated at admission."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    prefix = annotations.get(CONFIGMAP_ANNOTATION)
    found = _fraction_container(pod)
    if not prefix or found is None:
        return None
    _container, index, init = found
    base = f"{prefix}-{'i' if init else ''}{index}"
    return base, f"{base}-evar"


def mutate(pod: dict) -> None:
    """The gpusharing mutation on CREATE: the fraction container reads NVIDIA_VISIBLE_DEVICES,
    GPU_PORTION and RUNAI_NUM_OF_GPUS from a ConfigMap the binder fills in, plus an envFrom of a
    second one; fraction pods get the `nvidia` runtime class."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if GPU_FRACTION not in annotations and GPU_MEMORY not in annotations:
        return
    spec = pod.setdefault("spec", {})
    found = _fraction_container(pod)
    if found is None:
        return
    container, index, _init = found
    meta = pod.setdefault("metadata", {})
    meta_annotations = meta.setdefault("annotations", {})
    if CONFIGMAP_ANNOTATION not in meta_annotations:
        owners = meta.get("ownerReferences") or []
        base = (owners[0].get("name") if owners else None) or meta.get("name") or ""
        base = base or (meta.get("generateName") or "pod").rstrip("-")
        limit = 63 - 13 - len("shared-gpu") - len(str(index)) - 1 - 5
        base = base[:limit].rstrip(".-")
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=7))  # noqa: S311
        meta_annotations[CONFIGMAP_ANNOTATION] = f"{base}-{suffix}-shared-gpu"
    names = configmap_names(pod)
    if names is None:
        return
    capabilities, env_vars = names
    env = [
        e
        for e in container.get("env") or []
        if e.get("name") not in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION")
    ]
    for name in ("NVIDIA_VISIBLE_DEVICES", "RUNAI_NUM_OF_GPUS", "GPU_PORTION"):
        env.append(
            {"name": name, "valueFrom": {"configMapKeyRef": {"key": name, "name": capabilities}}}
        )
    container["env"] = env
    env_from = container.setdefault("envFrom", [])
    if not any((e.get("configMapRef") or {}).get("name") == env_vars for e in env_from):
        env_from.append({"configMapRef": {"name": env_vars, "optional": False}})
    volume_name = re.sub(r"[^a-z0-9-]+", "-", f"{capabilities}-vol".lower()).strip("-")
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != volume_name]
    volumes.append({"name": volume_name, "configMap": {"name": capabilities}})
    spec["volumes"] = volumes
    if not spec.get("runtimeClassName"):
        spec["runtimeClassName"] = RUNTIME_CLASS


def pod_admission(operation: str, pod: dict, old: dict | None) -> None:
    """Admission for pods of the KAI scheduler: validate on create and update, mutate on create."""
    if operation not in ("CREATE", "UPDATE"):
        return
    if (pod.get("spec") or {}).get("schedulerName") != SCHEDULER_NAME:
        return
    if operation == "UPDATE" and old is not None:
        before = (old.get("metadata") or {}).get("annotations") or {}
        after = (pod.get("metadata") or {}).get("annotations") or {}
        if all(before.get(k) == after.get(k) for k in (GPU_FRACTION, GPU_MEMORY, NUM_DEVICES, MPS)):
            return  # status writes and the binder's labels: nothing sharing-related changed
    message = validation_error(pod)
    if message:
        raise _deny(message)
    if operation == "CREATE":
        mutate(pod)


# ----------------------------------------------------------------------------------------------
# Objects the binder creates


def reservation_pod_name(node: str, group: str) -> str:
    digest = hashlib.sha256(f"{node}/{group}".encode()).hexdigest()
    return f"gpu-reservation-{digest[:16]}"


def reservation_pod(node: str, group: str, tolerations: list | None) -> dict:
    """The pod that holds one whole GPU for a group of fraction pods (it sleeps; the real one reads
    its GPU's UUID through NVML and writes it to its own annotation)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": reservation_pod_name(node, group),
            "namespace": RESERVATION_NAMESPACE,
            "labels": {"app": RESERVATION_APP, GPU_GROUP_LABEL: group},
            "annotations": {"karpenter.sh/do-not-disrupt": "true"},
        },
        "spec": {
            "nodeName": node,
            "tolerations": list(tolerations or []),
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": RESERVATION_CONTAINER,
                    "image": RESERVATION_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "args": ["sleep", "infinity"],
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"nvidia.com/gpu": "1"},
                    },
                    "env": [
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {
                            "name": "POD_NAMESPACE",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                        },
                    ],
                }
            ],
        },
    }


def is_reservation_pod(pod: dict) -> bool:
    meta = pod.get("metadata") or {}
    return meta.get("namespace") == RESERVATION_NAMESPACE and (meta.get("name") or "").startswith(
        "gpu-reservation"
    )


def pod_groups(pod: dict) -> list[str]:
    """The GPU groups a fraction pod is bound to (one label, or one per device)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if GPU_GROUP_LABEL in labels:
        return [labels[GPU_GROUP_LABEL]]
    prefix = GPU_GROUP_LABEL + "/"
    return sorted(v for k, v in labels.items() if k.startswith(prefix))


def group_labels(groups: list[str], devices: int) -> dict[str, str]:
    if devices > 1:
        return {f"{GPU_GROUP_LABEL}/{g}": g for g in groups}
    return {GPU_GROUP_LABEL: groups[0]}


def configmaps(pod: dict, uuids: list[str], portion: int) -> list[dict]:
    """The two ConfigMaps the fraction container reads (owned by the pod)."""
    names = configmap_names(pod)
    if names is None:
        return []
    meta = pod["metadata"]
    owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta.get("uid", "")}
    visible = ",".join(uuids)
    data = {
        "NVIDIA_VISIBLE_DEVICES": visible,
        "GPU_PORTION": portion_text(portion),
        "RUNAI_NUM_OF_GPUS": portion_text(portion),
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": meta.get("namespace"),
                "ownerReferences": [owner],
            },
            "data": dict(data) if index == 0 else {"NVIDIA_VISIBLE_DEVICES": visible},
        }
        for index, name in enumerate(names)
    ]
