"""Kubernetes objects for the admin's quota model, as plain dicts. Pure functions.

Mapping (the README's "Decisions" lists the names): a GPU pool is a Kueue ResourceFlavor; a
department is a Kueue Cohort and a Volcano parent Queue; a project is a namespace, a ClusterQueue,
a LocalQueue, a Volcano leaf Queue and a ResourceQuota; each priority class is a Kueue
WorkloadPriorityClass and a scheduling.k8s.io PriorityClass. Every object carries the managed-by
label and an owner-kind label, so a sync can list exactly what the portal owns and delete what is
no longer desired.

Amounts come in already computed (guaranteed and maximum per project, pool and resource) by
quotas.arithmetic; nothing here does quota arithmetic beyond summing across pools.
"""

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from portal.kube import labels as L

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
FULL_GPU = "gpu"  # ProjectQuota.resource for whole GPUs
RESOURCE_QUOTA_NAME = "gpu-portal"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

KUEUE_API = "kueue.x-k8s.io/v1beta2"
VOLCANO_QUEUE_API = "scheduling.volcano.sh/v1beta1"


# --- names (deterministic, prefixed so they never collide with objects others created) ---------
def flavor_name(pool_slug: str) -> str:
    return f"gp-pool-{pool_slug}"


def cohort_name(department_slug: str) -> str:
    return f"gp-dept-{department_slug}"


def volcano_department_queue_name(department_slug: str) -> str:
    return f"gp-dept-{department_slug}"


def cluster_queue_name(project_slug: str) -> str:
    return f"gp-{project_slug}"


def local_queue_name(project_slug: str) -> str:
    return f"gp-{project_slug}"


def volcano_project_queue_name(project_slug: str) -> str:
    return f"gp-{project_slug}"


def workload_priority_class_name(priority: str) -> str:
    return f"gp-{priority}"


def priority_class_name(priority: str) -> str:
    return f"gp-{priority}"


def extended_resource_name(resource: str) -> str:
    """'gpu' → nvidia.com/gpu; a MIG profile such as '1g.10gb' → nvidia.com/mig-1g.10gb."""
    if resource == FULL_GPU:
        return GPU_RESOURCE
    from quotas.mig import resource_name

    return resource_name(resource)


# --- inputs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PoolSpec:
    slug: str
    node_labels: dict[str, str]
    mig_profiles: tuple[str, ...]
    total_gpus: int
    default_cpu: str
    default_memory: str


@dataclass(frozen=True)
class QuotaAmount:
    pool_slug: str
    resource: str  # "gpu" or a MIG profile
    guaranteed: int
    maximum: int | None  # None = may borrow without limit


@dataclass(frozen=True)
class ProjectSpec:
    slug: str
    namespace: str
    department_slug: str
    quotas: tuple[QuotaAmount, ...] = ()
    pod_security: str = "restricted"  # the Pod Security level the namespace enforces


@dataclass(frozen=True)
class DepartmentSpec:
    slug: str


@dataclass(frozen=True)
class PrioritySpec:
    name: str
    value: int
    preemptible: bool
    description: str = ""


@dataclass(frozen=True)
class QuotaModel:
    pools: tuple[PoolSpec, ...]
    departments: tuple[DepartmentSpec, ...]
    projects: tuple[ProjectSpec, ...]
    priorities: tuple[PrioritySpec, ...] = field(default_factory=tuple)


# --- helpers ------------------------------------------------------------------------------------
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")


def scale_quantity(quantity: str, factor: int) -> str:
    """'64Gi' × 4 → '256Gi'; keeps the unit so the value stays exact."""
    match = _QUANTITY.match(quantity.strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {quantity!r}")
    number = Decimal(match.group(1)) * factor
    text = format(number.normalize(), "f")
    return f"{text}{match.group(2)}"


def _labels(owner_kind: str, **extra: str) -> dict[str, str]:
    return L.managed_labels(**{L.OWNER_KIND_KEY: owner_kind}, **extra)


# --- per object ---------------------------------------------------------------------------------
def resource_flavor(pool: PoolSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": [dict(GPU_TOLERATION)]}
    if pool.node_labels:
        spec["nodeLabels"] = dict(sorted(pool.node_labels.items()))
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {
            "name": flavor_name(pool.slug),
            "labels": _labels("pool", **{L.POOL_KEY: pool.slug}),
        },
        "spec": spec,
    }


def cohort(department: DepartmentSpec) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "Cohort",
        "metadata": {
            "name": cohort_name(department.slug),
            "labels": _labels("department", **{L.DEPARTMENT_KEY: department.slug}),
        },
        "spec": {},
    }


def workload_priority_class(priority: PrioritySpec) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "WorkloadPriorityClass",
        "metadata": {
            "name": workload_priority_class_name(priority.name),
            "labels": _labels("priority", **{L.PRIORITY_KEY: priority.name}),
        },
        "value": priority.value,
        "description": priority.description or f"GPU Portal priority {priority.name}",
    }


def pod_priority_class(priority: PrioritySpec) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": priority_class_name(priority.name),
            "labels": _labels("priority", **{L.PRIORITY_KEY: priority.name}),
        },
        "value": priority.value,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": priority.description or f"GPU Portal priority {priority.name}",
    }


def preemption_policy(priorities: tuple[PrioritySpec, ...]) -> dict[str, Any]:
    """Kueue preemption derived from the priority classes.

    If no class may be preempted, nothing is ever preempted. Otherwise a workload may preempt
    lower-priority ones in its own ClusterQueue, a ClusterQueue may reclaim its lent quota from
    any borrower in its cohort, and a borrower may preempt only workloads whose priority is at
    most that of the highest preemptible class (so non-preemptible classes are safe from it).
    """
    preemptible = [p.value for p in priorities if p.preemptible]
    if not preemptible:
        return {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"}
    return {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {
            "policy": "LowerPriority",
            "maxPriorityThreshold": max(preemptible),
        },
    }


def _project_pools(project: ProjectSpec, pools: tuple[PoolSpec, ...]) -> list[PoolSpec]:
    used = {q.pool_slug for q in project.quotas}
    return [p for p in sorted(pools, key=lambda p: p.slug) if p.slug in used]


def _covered_resources(pools: list[PoolSpec]) -> list[str]:
    mig = sorted({extended_resource_name(m) for p in pools for m in p.mig_profiles})
    return ["cpu", "memory", GPU_RESOURCE, *mig]


def _quota_entry(name: str, nominal: Any, borrowing: Any | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "nominalQuota": nominal}
    if borrowing is not None:
        entry["borrowingLimit"] = borrowing
    return entry


def cluster_queue(
    project: ProjectSpec, pools: tuple[PoolSpec, ...], priorities: tuple[PrioritySpec, ...]
) -> dict[str, Any]:
    project_pools = _project_pools(project, pools)
    covered = _covered_resources(project_pools)
    amounts = {(q.pool_slug, extended_resource_name(q.resource)): q for q in project.quotas}
    flavors = []
    for pool in project_pools:
        resources = [
            # CPU and memory are not rationed by the portal: each pool's whole share, so they
            # never block a GPU job that its GPU quota admits.
            _quota_entry("cpu", scale_quantity(pool.default_cpu, pool.total_gpus), None),
            _quota_entry("memory", scale_quantity(pool.default_memory, pool.total_gpus), None),
        ]
        for name in covered[2:]:
            amount = amounts.get((pool.slug, name))
            if amount is None:
                resources.append(_quota_entry(name, 0, 0))
                continue
            borrowing = (
                None if amount.maximum is None else max(amount.maximum - amount.guaranteed, 0)
            )
            resources.append(_quota_entry(name, amount.guaranteed, borrowing))
        flavors.append({"name": flavor_name(pool.slug), "resources": resources})
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": project.namespace}},
        "cohortName": cohort_name(project.department_slug),
        "queueingStrategy": "BestEffortFIFO",
        "preemption": preemption_policy(priorities),
    }
    if flavors:
        spec["resourceGroups"] = [{"coveredResources": covered, "flavors": flavors}]
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue_name(project.slug), "labels": _project_labels(project)},
        "spec": spec,
    }


def _project_labels(project: ProjectSpec) -> dict[str, str]:
    return _labels(
        "project", **{L.PROJECT_KEY: project.slug, L.DEPARTMENT_KEY: project.department_slug}
    )


def namespace(project: ProjectSpec) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": project.namespace,
            "labels": {
                **_project_labels(project),
                # The project's choice; portal pods are built to meet it (jobs/manifests.py).
                # Warn on anything short of "restricted" either way.
                "pod-security.kubernetes.io/enforce": project.pod_security,
                "pod-security.kubernetes.io/warn": "restricted",
            },
        },
    }


def local_queue(project: ProjectSpec) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {
            "name": local_queue_name(project.slug),
            "namespace": project.namespace,
            "labels": _project_labels(project),
        },
        "spec": {"clusterQueue": cluster_queue_name(project.slug)},
    }


def _sum_by_resource(quotas: tuple[QuotaAmount, ...], attr: str) -> dict[str, int | None]:
    totals: dict[str, int | None] = {}
    for q in quotas:
        name = extended_resource_name(q.resource)
        value = getattr(q, attr)
        current = totals.get(name, 0)
        totals[name] = None if value is None or current is None else current + value
    return totals


def _resource_list(totals: dict[str, int | None]) -> dict[str, str]:
    return {name: str(v) for name, v in sorted(totals.items()) if v is not None}


def volcano_project_queue(project: ProjectSpec) -> dict[str, Any]:
    capability = _resource_list(_sum_by_resource(project.quotas, "maximum"))
    deserved = _resource_list(_sum_by_resource(project.quotas, "guaranteed"))
    spec: dict[str, Any] = {
        "weight": 1,
        "reclaimable": True,
        "parent": volcano_department_queue_name(project.department_slug),
        "deserved": deserved,
    }
    if capability:
        spec["capability"] = capability
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": {
            "name": volcano_project_queue_name(project.slug),
            "labels": _project_labels(project),
        },
        "spec": spec,
    }


def volcano_department_queue(
    department: DepartmentSpec, projects: tuple[ProjectSpec, ...]
) -> dict[str, Any]:
    """The parent queue: deserved and capability are the sums of its children's (Volcano requires
    children's deserved to fit in the parent's, and a child's capability not to exceed it)."""
    members = [p for p in projects if p.department_slug == department.slug]
    quotas = tuple(q for p in members for q in p.quotas)
    capability = _resource_list(_sum_by_resource(quotas, "maximum"))
    deserved = _resource_list(_sum_by_resource(quotas, "guaranteed"))
    spec: dict[str, Any] = {"weight": 1, "reclaimable": True, "deserved": deserved}
    if capability:
        spec["capability"] = capability
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": {
            "name": volcano_department_queue_name(department.slug),
            "labels": _labels("department", **{L.DEPARTMENT_KEY: department.slug}),
        },
        "spec": spec,
    }


def resource_quota(project: ProjectSpec, pools: tuple[PoolSpec, ...]) -> dict[str, Any]:
    """A hard cap on GPU requests in the namespace at the project's maximum usable amount."""
    maxima = _sum_by_resource(project.quotas, "maximum")
    hard: dict[str, str] = {f"requests.{GPU_RESOURCE}": str(maxima.get(GPU_RESOURCE) or 0)}
    if maxima.get(GPU_RESOURCE, 0) is None:
        del hard[f"requests.{GPU_RESOURCE}"]
    for pool in _project_pools(project, pools):
        for profile in pool.mig_profiles:
            name = extended_resource_name(profile)
            if name in maxima and maxima[name] is None:
                continue
            hard[f"requests.{name}"] = str(maxima.get(name) or 0)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": RESOURCE_QUOTA_NAME,
            "namespace": project.namespace,
            "labels": _project_labels(project),
        },
        "spec": {"hard": dict(sorted(hard.items()))},
    }


def desired_quota_objects(model: QuotaModel) -> list[dict[str, Any]]:
    """Every object the quota model asks for, in an order that applies cleanly (parents first)."""
    objects: list[dict[str, Any]] = []
    objects += [resource_flavor(p) for p in sorted(model.pools, key=lambda p: p.slug)]
    for priority in sorted(model.priorities, key=lambda p: p.name):
        objects += [workload_priority_class(priority), pod_priority_class(priority)]
    departments = sorted(model.departments, key=lambda d: d.slug)
    objects += [cohort(d) for d in departments]
    objects += [volcano_department_queue(d, model.projects) for d in departments]
    for project in sorted(model.projects, key=lambda p: p.slug):
        objects += [
            namespace(project),
            cluster_queue(project, model.pools, model.priorities),
            local_queue(project),
            volcano_project_queue(project),
            resource_quota(project, model.pools),
        ]
    return objects


# Kinds a quota sync owns, in apply order; deletes of stale objects go in reverse order.
QUOTA_KINDS: tuple[tuple[str, str], ...] = (
    (KUEUE_API, "ResourceFlavor"),
    (KUEUE_API, "WorkloadPriorityClass"),
    ("scheduling.k8s.io/v1", "PriorityClass"),
    (KUEUE_API, "Cohort"),
    ("v1", "Namespace"),
    (KUEUE_API, "ClusterQueue"),
    (KUEUE_API, "LocalQueue"),
    (VOLCANO_QUEUE_API, "Queue"),
    ("v1", "ResourceQuota"),
)
