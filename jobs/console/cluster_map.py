"""The cluster page's data: pools → nodes → GPUs and MIG slices, each free or held by a job.

Sources (nothing new is stored):
- the nodes and their GPU inventory, read from the cluster through portal.kube.nodes (cached
  for a few seconds per process);
- the pools (quotas.GpuPool): a node belongs to the pool whose node labels it carries (the most
  specific pool when several match, as two pools of one GPU model differ by an extra label);
- who holds a device: the pods the cluster watcher records (JobPod: node, gpu_uuids,
  gpu_indices) of jobs that are not finished.

`build_cluster_map` is pure (unit tested without a cluster); `cluster_map_for` gathers the
inputs and applies tenancy: a holder is a link for a viewer who may see its job, and only
"another project" otherwise (no name, project or user of a foreign job leaks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jobs.models import Job, JobPod
from jobs.states import ACTIVE
from portal.kube.nodes import NodeInfo, gpu_nodes
from quotas.models import GpuPool

# Pod phases in which a pod holds its devices.
HOLDING_PHASES = frozenset({"Pending", "Running", ""})


@dataclass(frozen=True)
class Holder:
    """A job holding a device; `visible` = the viewer may open it (else "another project")."""

    job_id: int
    visible: bool
    label: str = ""  # "project/job-name" when visible
    state: str = ""


@dataclass(frozen=True)
class DeviceView:
    """A whole GPU or a MIG slice."""

    label: str  # "GPU 3" or "1g.10gb"
    uuid: str
    holder: Holder | None


@dataclass(frozen=True)
class GpuView:
    index: int
    uuid: str
    model: str
    holder: Holder | None  # whole-GPU holder (None for a MIG GPU: see slices)
    slices: tuple[DeviceView, ...] = ()
    # KAI GPU fractions: who holds which part of a shared GPU (holder, share), biggest first.
    parts: tuple[tuple[Holder, float], ...] = ()

    @property
    def mig(self) -> bool:
        return bool(self.slices)

    @property
    def split(self) -> bool:
        return bool(self.parts)

    @property
    def free_share(self) -> float:
        return max(0.0, round(1.0 - sum(share for _, share in self.parts), 3))


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    unschedulable: bool
    gpus: tuple[GpuView, ...]

    @property
    def devices(self) -> int:
        return sum(len(g.slices) if g.mig else 1 for g in self.gpus)

    @property
    def held(self) -> int:
        return sum(
            sum(1 for s in g.slices if s.holder) if g.mig else (1 if g.holder or g.parts else 0)
            for g in self.gpus
        )

    @property
    def free(self) -> int:
        return self.devices - self.held


@dataclass
class PoolView:
    slug: str
    name: str
    gpu_model: str
    nodes: list[NodeView] = field(default_factory=list)

    @property
    def devices(self) -> int:
        return sum(n.devices for n in self.nodes)

    @property
    def held(self) -> int:
        return sum(n.held for n in self.nodes)

    @property
    def free(self) -> int:
        return self.devices - self.held


@dataclass(frozen=True)
class PodHold:
    """A pod's devices on a node (from JobPod)."""

    job_id: int
    node: str
    gpu_uuids: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    share: float | None = None  # a KAI fraction's part of its (shared) GPU


@dataclass(frozen=True)
class PoolSelector:
    slug: str
    name: str
    gpu_model: str
    node_labels: dict[str, str]


@dataclass
class ClusterMap:
    pools: list[PoolView]
    error: str = ""  # why the nodes could not be read (the page still renders)

    @property
    def devices(self) -> int:
        return sum(p.devices for p in self.pools)

    @property
    def held(self) -> int:
        return sum(p.held for p in self.pools)


OTHER_POOL = "(no pool)"


def pool_of(node: NodeInfo, pools: Iterable[PoolSelector]) -> PoolSelector | None:
    """The pool whose node labels the node carries; the one with most labels wins."""
    matches = [
        p
        for p in pools
        if p.node_labels and all(node.labels.get(k) == v for k, v in p.node_labels.items())
    ]
    return max(matches, key=lambda p: (len(p.node_labels), p.slug), default=None)


def build_cluster_map(
    *,
    nodes: Iterable[NodeInfo],
    pools: Iterable[PoolSelector],
    holds: Iterable[PodHold],
    holder_for: Callable[[int], Holder],
) -> ClusterMap:
    """Pure: group the nodes by pool and mark each device with the job holding it."""
    pools = list(pools)
    by_uuid: dict[str, int] = {}
    by_index: dict[tuple[str, int], int] = {}
    shared: dict[str, dict[int, float]] = {}
    for hold in holds:
        if hold.share is not None:
            for uuid in hold.gpu_uuids:
                shared.setdefault(uuid, {})[hold.job_id] = hold.share
            continue
        for uuid in hold.gpu_uuids:
            by_uuid[uuid] = hold.job_id
        if not hold.gpu_uuids:
            for index in hold.gpu_indices:
                by_index[(hold.node, index)] = hold.job_id
    views: dict[str, PoolView] = {
        p.slug: PoolView(slug=p.slug, name=p.name, gpu_model=p.gpu_model) for p in pools
    }

    def holder(job_id: int | None) -> Holder | None:
        return None if job_id is None else holder_for(job_id)

    for node in nodes:
        gpus = []
        for gpu in node.gpus:
            if gpu.mig:
                slices = tuple(
                    DeviceView(label=s.profile, uuid=s.uuid, holder=holder(by_uuid.get(s.uuid)))
                    if s.uuid
                    else DeviceView(label=s.profile, uuid="", holder=None)
                    for s in gpu.mig
                )
                gpus.append(GpuView(gpu.index, gpu.uuid, gpu.model, holder=None, slices=slices))
                continue
            job_id = by_uuid.get(gpu.uuid) if gpu.uuid else None
            if job_id is None:
                job_id = by_index.get((node.name, gpu.index))
            parts = tuple(
                (holder_for(j), share)
                for j, share in sorted(
                    shared.get(gpu.uuid, {}).items(), key=lambda item: (-item[1], item[0])
                )
            )
            gpus.append(GpuView(gpu.index, gpu.uuid, gpu.model, holder=holder(job_id), parts=parts))
        pool = pool_of(node, pools)
        slug = pool.slug if pool else OTHER_POOL
        if slug not in views:
            model = node.labels.get("nvidia.com/gpu.product", "")
            views[slug] = PoolView(slug=slug, name="Nodes in no portal pool", gpu_model=model)
        views[slug].nodes.append(
            NodeView(node.name, node.ready, node.unschedulable, gpus=tuple(gpus))
        )
    ordered = sorted(views.values(), key=lambda v: (v.slug == OTHER_POOL, v.slug))
    return ClusterMap(pools=ordered)


def _holds() -> list[PodHold]:
    from jobs.selectors import fraction_shares

    rows = list(
        JobPod.objects.filter(
            deleted=False, job__state__in=sorted(ACTIVE), phase__in=sorted(HOLDING_PHASES)
        )
        .exclude(node="")
        .values_list("job_id", "node", "gpu_uuids", "gpu_indices", "gpu_group")
    )
    shares = fraction_shares({row[0] for row in rows if row[4]})
    return [
        PodHold(
            job_id=job_id,
            node=node,
            gpu_uuids=tuple(uuids or ()),
            gpu_indices=tuple(indices or ()),
            share=shares.get(job_id) if group else None,
        )
        for job_id, node, uuids, indices, group in rows
    ]


def cluster_map_for(*, user: Any, max_age: float | None = None) -> ClusterMap:
    """The cluster as `user` may see it. A cluster that cannot be read gives the pools without
    nodes and an `error` sentence instead of a failed page."""
    from kubernetes.config.config_exception import ConfigException

    from portal.kube.apply import KubeError

    pools = [
        PoolSelector(p.slug, p.name, p.gpu_model, dict(p.node_labels or {}))
        for p in GpuPool.objects.order_by("slug")
    ]
    error = ""
    try:
        nodes = gpu_nodes() if max_age is None else gpu_nodes(max_age=max_age)
    except (KubeError, ConfigException) as exc:  # unreachable, or no usable kubeconfig
        nodes, error = [], f"The cluster cannot be read right now ({exc})."
    holds = _holds()
    job_ids = {h.job_id for h in holds}
    visible = {
        job.pk: job
        for job in Job.objects.visible_to(user)
        .filter(pk__in=job_ids)
        .select_related("project")
        .only("pk", "name", "state", "project__slug")
    }

    def holder_for(job_id: int) -> Holder:
        job = visible.get(job_id)
        if job is None:
            return Holder(job_id=0, visible=False)
        return Holder(
            job_id=job.pk,
            visible=True,
            label=f"{job.project.slug}/{job.name}",
            state=job.get_state_display(),
        )

    result = build_cluster_map(nodes=nodes, pools=pools, holds=holds, holder_for=holder_for)
    result.error = error
    return result
