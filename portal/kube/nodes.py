"""The cluster's GPU nodes as the cluster page needs them: name, labels and GPU inventory.

One LIST of nodes, remembered for a short while per process (like portal.kube.discovery), so a
busy cluster page costs the API server one request per CACHE_SECONDS, not one per view.

The inventory comes from the node's `kubesim.dev/gpus` annotation when present (UUIDs, MIG
instances and their profiles). A real cluster has no such annotation: the GPUs are then the
node's `nvidia.com/gpu` capacity and its `nvidia.com/mig-<profile>` resources, numbered in
order, without UUIDs (the page matches holders by GPU index there).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from portal.kube import apply as kube
from portal.kube.client import settings_key

CACHE_SECONDS = 15.0
GPUS_ANNOTATION = "kubesim.dev/gpus"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"

_lock = threading.Lock()
_cache: dict[str, tuple[float, list[NodeInfo]]] = {}


@dataclass(frozen=True)
class MigSlice:
    uuid: str
    profile: str


@dataclass(frozen=True)
class NodeGpu:
    index: int
    uuid: str  # "" when the cluster does not publish UUIDs
    model: str
    mig: tuple[MigSlice, ...] = ()


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    gpus: tuple[NodeGpu, ...] = ()
    ready: bool = True
    unschedulable: bool = False


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def _from_annotation(text: str) -> tuple[NodeGpu, ...] | None:
    try:
        entries = json.loads(text)
    except (TypeError, ValueError):
        return None
    if not isinstance(entries, list):
        return None
    gpus = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        mig = tuple(
            MigSlice(uuid=str(d.get("uuid") or ""), profile=str(d.get("profile") or ""))
            for d in entry.get("migDevices") or []
            if isinstance(d, dict)
        )
        gpus.append(
            NodeGpu(
                index=_int(entry.get("index")),
                uuid=str(entry.get("uuid") or ""),
                model=str(entry.get("model") or ""),
                mig=mig if entry.get("migEnabled") else (),
            )
        )
    return tuple(sorted(gpus, key=lambda g: g.index))


def _from_capacity(capacity: dict[str, Any], model: str) -> tuple[NodeGpu, ...]:
    """Whole GPUs first, then one pseudo-GPU per MIG resource kind holding its slices (the
    Kubernetes API does not say which physical GPU a slice lives on)."""
    gpus = [NodeGpu(index=i, uuid="", model=model) for i in range(_int(capacity.get(GPU_RESOURCE)))]
    for name in sorted(k for k in capacity if k.startswith(MIG_PREFIX)):
        profile = name[len(MIG_PREFIX) :]
        slices = tuple(MigSlice(uuid="", profile=profile) for _ in range(_int(capacity[name])))
        if slices:
            gpus.append(NodeGpu(index=len(gpus), uuid="", model=model, mig=slices))
    return tuple(gpus)


def node_info(node: dict[str, Any]) -> NodeInfo:
    """A Node object (as the API returns it) → NodeInfo. Pure."""
    meta, spec, status = (
        node.get("metadata") or {},
        node.get("spec") or {},
        node.get("status") or {},
    )
    labels = dict(meta.get("labels") or {})
    model = labels.get("nvidia.com/gpu.product", "")
    gpus = _from_annotation((meta.get("annotations") or {}).get(GPUS_ANNOTATION))
    if gpus is None:
        gpus = _from_capacity(status.get("capacity") or {}, model)
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return NodeInfo(
        name=meta.get("name") or "",
        labels=labels,
        gpus=gpus,
        ready=ready,
        unschedulable=bool(spec.get("unschedulable")),
    )


def gpu_nodes(*, max_age: float = CACHE_SECONDS) -> list[NodeInfo]:
    """The cluster's nodes that have GPUs, by name (max_age=0: ask now).

    Raises portal.kube.apply.KubeError when the cluster cannot be read.
    """
    now = time.monotonic()
    key = settings_key()
    with _lock:
        hit = _cache.get(key)
    if hit is not None and now - hit[0] < max_age:
        return hit[1]
    nodes = [node_info(obj) for obj in kube.list_objects("v1", "Node")]
    nodes = sorted((n for n in nodes if n.gpus), key=lambda n: n.name)
    with _lock:
        _cache[key] = (now, nodes)
    return nodes


def forget() -> None:
    """Drop the remembered nodes (between tests)."""
    with _lock:
        _cache.clear()
