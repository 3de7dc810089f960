"""Kubernetes objects for the admin's quota model, as plain dicts. Pure functions.

Mapping (docs/admin-guide/quota-sync.md lists the names): a GPU pool is a Kueue ResourceFlavor; a
department is a Kueue Cohort and, per pool, a Volcano parent Queue; a project is a namespace, a
ClusterQueue, a LocalQueue, per pool a Volcano leaf Queue, and a ResourceQuota, plus (TenantAccess)
a NetworkPolicy isolating the namespace from the other tenants' and a RoleBinding granting the
portal's own service account its tenant role there; each priority class is a Kueue
WorkloadPriorityClass and a scheduling.k8s.io PriorityClass. Every object carries the managed-by
label and an owner-kind label, so a sync can list exactly what the portal owns and delete what is
no longer desired.

A pool whose scheduler is KAI (issue 25) gets none of the Kueue and Volcano objects: per pool a
KAI department Queue and under it (parentQueue) a project Queue per project with quota there.

Amounts come in already computed (guaranteed and maximum per project, pool and resource) by
quotas.arithmetic; a department's amounts come from quotas.arithmetic.department_usable.
"""

import re
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from portal.kube import labels as L
from quotas import arithmetic

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
FULL_GPU = "gpu"  # ProjectQuota.resource for whole GPUs
RESOURCE_QUOTA_NAME = "gpu-portal"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

KUEUE_API = "kueue.x-k8s.io/v1beta2"
VOLCANO_QUEUE_API = "scheduling.volcano.sh/v1beta1"
KAI_QUEUE_API = "scheduling.run.ai/v2"
KAI_NODE_POOL_LABEL = "kai.scheduler/node-pool"
KAI = "kai"  # GpuPool.scheduler of a KAI pool
NETWORKING_API = "networking.k8s.io/v1"
RBAC_API = "rbac.authorization.k8s.io/v1"
NETWORK_POLICY_NAME = "gp-tenant-isolation"
TENANT_ROLE_BINDING_NAME = "gpu-portal"


# --- names (deterministic, prefixed so they never collide with objects others created) ---------
def flavor_name(pool_slug: str) -> str:
    return f"gp-pool-{pool_slug}"


def cohort_name(department_slug: str) -> str:
    return f"gp-dept-{department_slug}"


def volcano_department_queue_name(department_slug: str, pool_slug: str) -> str:
    """The department's Volcano queue for one pool ('.' cannot occur in a slug: unambiguous)."""
    return f"gp-dept-{department_slug}.{pool_slug}"


def kai_department_queue_name(department_slug: str, pool_slug: str) -> str:
    """The department's KAI queue for one pool (the parent of its projects' queues there)."""
    return f"gp-dept-{department_slug}.{pool_slug}"


def kai_project_queue_name(project_slug: str, pool_slug: str) -> str:
    """The project's KAI leaf queue for one pool: the queue label of its jobs there."""
    return f"gp-{project_slug}.{pool_slug}"


def cluster_queue_name(project_slug: str) -> str:
    return f"gp-{project_slug}"


def local_queue_name(project_slug: str) -> str:
    return f"gp-{project_slug}"


def volcano_project_queue_name(project_slug: str, pool_slug: str) -> str:
    """The project's Volcano leaf queue for one pool; every Volcano gang is pinned to one pool."""
    return f"gp-{project_slug}.{pool_slug}"


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
    scheduler: str = "kueue"  # kueue | volcano | kai
    over_quota_weight: int = 1  # KAI: the project queues' overQuotaWeight unless a quota says


@dataclass(frozen=True)
class QuotaAmount:
    pool_slug: str
    resource: str  # "gpu" or a MIG profile
    guaranteed: int
    maximum: int | None  # None = may borrow without limit
    over_quota_weight: int | None = None  # KAI pools; None = the pool's


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
class TenantAccess:
    """What a project namespace gets besides its quota: network isolation from the other
    tenants, and the portal's own access to it (settings PORTAL_TENANT_NETWORK_POLICY,
    PORTAL_NAMESPACE, PORTAL_TENANT_ROLE, PORTAL_SERVICE_ACCOUNT)."""

    network_policy: bool = True
    portal_namespace: str = "gpu-portal"
    # The ClusterRole bound to the portal's service account in each project namespace; "" binds
    # nothing (the portal's identity holds those permissions some other way, e.g. a kubeconfig).
    role: str = ""
    service_account: str = "gpu-portal"


@dataclass(frozen=True)
class QuotaModel:
    pools: tuple[PoolSpec, ...]
    departments: tuple[DepartmentSpec, ...]
    projects: tuple[ProjectSpec, ...]
    priorities: tuple[PrioritySpec, ...] = field(default_factory=tuple)
    tenant: TenantAccess = field(default_factory=TenantAccess)


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


def _protection_expressible(priorities: tuple[PrioritySpec, ...]) -> bool:
    """Kueue's LowerPriority rules let every class preempt the classes below it, so a class can
    be kept from preemption only if no class is above it: every non-preemptible class must
    share the highest value."""
    top = max((p.value for p in priorities), default=0)
    return all(p.value == top for p in priorities if not p.preemptible)


def preemption_policy(priorities: tuple[PrioritySpec, ...]) -> dict[str, Any]:
    """Kueue preemption derived from the priority classes, so that a non-preemptible class is
    never preempted by anything (its promise) — chosen over reclaiming every lent GPU at once.

    - withinClusterQueue LowerPriority: a job may preempt lower-priority jobs of its project.
    - reclaimWithinCohort LowerPriority: a project takes back the quota it lent only from
      borrowers of lower priority than the job that needs it (with ``Any`` a lender's low job
      could evict another project's high job); equal or higher borrowers keep it until they end.
    - borrowWithinCohort LowerPriority up to the highest preemptible value: a borrowing job may
      preempt other projects' lower-priority borrowers, never a non-preemptible class.

    No preemption at all (Never) when no class is preemptible, or when the flags cannot be
    expressed with Kueue's rules (a non-preemptible class below another class): the safe side,
    shown to the admin by explain_preemption.
    """
    preemptible = [p.value for p in priorities if p.preemptible]
    if not preemptible or not _protection_expressible(priorities):
        return {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"}
    return {
        "withinClusterQueue": "LowerPriority",
        "reclaimWithinCohort": "LowerPriority",
        "borrowWithinCohort": {
            "policy": "LowerPriority",
            "maxPriorityThreshold": max(preemptible),
        },
    }


@dataclass(frozen=True)
class PreemptionExplanation:
    """The emitted policy in words, for the priorities admin page (one source: the policy)."""

    policy: dict[str, Any]
    classes: tuple[tuple[str, int, str], ...]  # (name, value, who may preempt it)
    guarantee: str
    warnings: tuple[str, ...] = ()


def _names(classes: list[PrioritySpec]) -> str:
    return ", ".join(p.name for p in sorted(classes, key=lambda p: -p.value))


def explain_preemption(priorities: tuple[PrioritySpec, ...]) -> PreemptionExplanation:
    policy = preemption_policy(priorities)
    ordered = sorted(priorities, key=lambda p: -p.value)
    warnings: list[str] = []
    if policy["withinClusterQueue"] == "Never":
        if any(p.preemptible for p in priorities):
            above = [p.name for p in ordered if not p.preemptible and p.value < ordered[0].value]
            warnings.append(
                f"Marked not preemptible but below another class: {', '.join(above)}. Kueue "
                "lets every class preempt the classes below it, so the portal turned preemption "
                "off altogether. Give the non-preemptible classes the highest value."
            )
        lines = tuple((p.name, p.value, "Never preempted: preemption is off.") for p in ordered)
        guarantee = (
            "Quota lent to another project comes back only when the borrowing jobs end "
            "(at most their maximum runtime): nothing is preempted."
        )
        return PreemptionExplanation(policy, lines, guarantee, tuple(warnings))
    threshold = policy["borrowWithinCohort"]["maxPriorityThreshold"]
    lines = []
    for p in ordered:
        higher = [q for q in priorities if q.value > p.value]
        if not higher:
            lines.append((p.name, p.value, "Never preempted (no class has a higher priority)."))
            continue
        who = _names(higher)
        text = (
            f"By {who} jobs of its own project; by {who} jobs of the project it borrowed from, "
            "when it runs on borrowed quota"
        )
        if p.value <= threshold:
            text += (
                f"; by borrowing {who} jobs of other projects, while its project is above its "
                "guarantee"
            )
        lines.append((p.name, p.value, text + "."))
    guarantee = (
        "A project gets back the quota it lent at once from borrowing jobs of lower priority than "
        "the job that needs it; borrowing jobs of the same or higher priority keep it until they "
        "end (at most their maximum runtime)."
    )
    return PreemptionExplanation(policy, tuple(lines), guarantee, tuple(warnings))


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


def network_policy(project: ProjectSpec, portal_namespace: str) -> dict[str, Any]:
    """Ingress to the project's pods from its own namespace (a gang's pods talk to each other),
    from the portal's namespace, and from any namespace that is not a tenant's (ingress
    controllers, monitoring); never from another project's namespace. Effective only where the
    cluster's CNI enforces NetworkPolicies."""
    return {
        "apiVersion": NETWORKING_API,
        "kind": "NetworkPolicy",
        "metadata": {
            "name": NETWORK_POLICY_NAME,
            "namespace": project.namespace,
            "labels": _project_labels(project),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"podSelector": {}},
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": portal_namespace}
                            }
                        },
                        {
                            # Tenant namespaces carry the managed-by label (namespace()); every
                            # other namespace lacks it or has another value.
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {
                                        "key": L.MANAGED_BY_KEY,
                                        "operator": "NotIn",
                                        "values": [L.MANAGED_BY],
                                    }
                                ]
                            }
                        },
                    ]
                }
            ],
        },
    }


def tenant_role_binding(project: ProjectSpec, access: TenantAccess) -> dict[str, Any]:
    """Grants the portal's service account the tenant ClusterRole in the project's namespace
    only: what it writes there (jobs, Secrets, claims) it cannot write anywhere else."""
    return {
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": {
            "name": TENANT_ROLE_BINDING_NAME,
            "namespace": project.namespace,
            "labels": _project_labels(project),
        },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": access.role,
        },
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": access.service_account,
                "namespace": access.portal_namespace,
            }
        ],
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


# --- Volcano --------------------------------------------------------------------------------------
# Volcano queues know resource names, not pools, so the portal keeps one queue per pool: a leaf
# gp-<project>.<pool> under a parent gp-dept-<department>.<pool>, and pins every Volcano gang to
# one pool (jobs.validation.choose_gang_pool, node affinity in jobs.manifests). Amounts come from
# quotas.arithmetic: a leaf's deserved is the project's guarantee and its capability the
# project's maximum in that pool; the parent's deserved and capability are the department's
# (department_usable: the sum of its projects' guarantees, as it never borrows from another
# department). Every GPU resource the pool offers is listed, 0 when there is no quota: with the
# capacity plugin an absent resource would inherit the parent's (root: unlimited) capability.


def _pool_gpu_resources(pool: PoolSpec | None) -> list[str]:
    mig = sorted(extended_resource_name(p) for p in (pool.mig_profiles if pool else ()))
    return [GPU_RESOURCE, *mig]


def _department_amounts(
    department_slug: str, projects: tuple[ProjectSpec, ...]
) -> dict[tuple[str, str], arithmetic.UsableAmount]:
    """(pool, resource) → the department's usable amount, from quotas.arithmetic."""
    entries = [
        arithmetic.QuotaEntry(
            project=p.slug,
            department=p.department_slug,
            pool=q.pool_slug,
            resource=q.resource,
            nominal=q.guaranteed,
        )
        for p in projects
        if p.department_slug == department_slug
        for q in p.quotas
    ]
    return {
        (pool, resource): amount
        for (_dept, pool, resource), amount in arithmetic.department_usable(entries).items()
    }


def _volcano_queue(name: str, labels: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": VOLCANO_QUEUE_API,
        "kind": "Queue",
        "metadata": {"name": name, "labels": labels},
        "spec": {"weight": 1, "reclaimable": True, **spec},
    }


def _amount_lists(
    pool: PoolSpec | None, amounts: dict[str, tuple[int, int]]
) -> tuple[dict[str, str], dict[str, str]]:
    """(deserved, capability) over every GPU resource of the pool; amounts: name → (g, max)."""
    names = sorted({*_pool_gpu_resources(pool), *amounts})
    deserved = {n: str(amounts.get(n, (0, 0))[0]) for n in names}
    capability = {n: str(amounts.get(n, (0, 0))[1]) for n in names}
    return deserved, capability


def volcano_project_queues(
    project: ProjectSpec,
    pools: tuple[PoolSpec, ...],
    projects: tuple[ProjectSpec, ...] = (),
) -> list[dict[str, Any]]:
    """One leaf queue per pool the project has quota in (projects: its department's, for an
    unlimited borrowing limit, which reaches up to the department's total)."""
    by_slug = {p.slug: p for p in pools}
    department = _department_amounts(project.department_slug, projects or (project,))
    queues = []
    for pool_slug in sorted({q.pool_slug for q in project.quotas}):
        amounts: dict[str, tuple[int, int]] = {}
        for q in project.quotas:
            if q.pool_slug != pool_slug:
                continue
            # Never above what the department holds (a leaf above its parent is refused).
            ceiling = department[(pool_slug, q.resource)].maximum
            maximum = ceiling if q.maximum is None else min(q.maximum, ceiling)
            amounts[extended_resource_name(q.resource)] = (q.guaranteed, max(maximum, q.guaranteed))
        deserved, capability = _amount_lists(by_slug.get(pool_slug), amounts)
        queues.append(
            _volcano_queue(
                volcano_project_queue_name(project.slug, pool_slug),
                {**_project_labels(project), L.POOL_KEY: pool_slug},
                {
                    "parent": volcano_department_queue_name(project.department_slug, pool_slug),
                    "deserved": deserved,
                    "capability": capability,
                },
            )
        )
    return queues


def volcano_department_queues(
    department: DepartmentSpec, projects: tuple[ProjectSpec, ...], pools: tuple[PoolSpec, ...] = ()
) -> list[dict[str, Any]]:
    """One parent queue per pool the department's projects have quota in."""
    by_slug = {p.slug: p for p in pools}
    amounts_by_pool: dict[str, dict[str, tuple[int, int]]] = {}
    for (pool_slug, resource), amount in _department_amounts(department.slug, projects).items():
        amounts_by_pool.setdefault(pool_slug, {})[extended_resource_name(resource)] = (
            amount.guaranteed,
            amount.maximum,
        )
    queues = []
    for pool_slug, amounts in sorted(amounts_by_pool.items()):
        deserved, capability = _amount_lists(by_slug.get(pool_slug), amounts)
        queues.append(
            _volcano_queue(
                volcano_department_queue_name(department.slug, pool_slug),
                _labels("department", **{L.DEPARTMENT_KEY: department.slug, L.POOL_KEY: pool_slug}),
                {"deserved": deserved, "capability": capability},
            )
        )
    return queues


# --- KAI Scheduler -------------------------------------------------------------------------------
# Like Volcano, KAI queues know resources, not pools: one leaf queue per (project, KAI pool) under
# one parent per (department, KAI pool), and a KAI job names the leaf of its one pool. The GPU
# numbers come from quotas.arithmetic as for Volcano: quota = the guarantee, limit = the most the
# project may ever use there (never above the department's); the department queue is guaranteed
# its projects' sum and has no limit (see kai_department_queues). CPU and memory are not rationed by
# the portal: -1 on every level, since KAI reads an absent or 0 limit as "nothing allowed".
# MIG quotas have no KAI resource name: a KAI pool's queues carry whole-GPU quota only.


def _kai_resources(gpu_quota: float, gpu_limit: float, weight: int) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {
        "cpu": dict(unlimited),
        "memory": dict(unlimited),
        "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": weight},
    }


def _kai_queue(
    name: str, labels: dict[str, str], pool: PoolSpec, spec: dict[str, Any]
) -> dict[str, Any]:
    # KAI shards nodes, queues and PodGroups by this label: a pool selected by it must have its
    # queues in the same shard.
    shard = pool.node_labels.get(KAI_NODE_POOL_LABEL)
    if shard:
        labels = {**labels, KAI_NODE_POOL_LABEL: shard}
    return {
        "apiVersion": KAI_QUEUE_API,
        "kind": "Queue",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


def kai_pools(pools: tuple[PoolSpec, ...]) -> list[PoolSpec]:
    return [p for p in sorted(pools, key=lambda p: p.slug) if p.scheduler == KAI]


def kai_department_queues(
    department: DepartmentSpec, projects: tuple[ProjectSpec, ...], pools: tuple[PoolSpec, ...]
) -> list[dict[str, Any]]:
    """One parent queue per KAI pool the department's projects have quota in."""
    amounts = _department_amounts(department.slug, projects)
    queues = []
    for pool in kai_pools(pools):
        if not any(pool_slug == pool.slug for pool_slug, _ in amounts):
            continue
        gpu = amounts.get((pool.slug, FULL_GPU))
        quota = gpu.guaranteed if gpu else 0
        queues.append(
            _kai_queue(
                kai_department_queue_name(department.slug, pool.slug),
                _labels("department", **{L.DEPARTMENT_KEY: department.slug, L.POOL_KEY: pool.slug}),
                pool,
                {
                    "displayName": f"department {department.slug}",
                    # No limit of its own: KAI checks a parent's limit before it reclaims, so a
                    # limit at the department's sum would keep a project from taking back what
                    # another project of the department borrowed. Each project's limit (never
                    # above the department's sum) is the cap.
                    "resources": _kai_resources(quota, -1, 1),
                },
            )
        )
    return queues


def kai_project_queues(
    project: ProjectSpec, pools: tuple[PoolSpec, ...], projects: tuple[ProjectSpec, ...] = ()
) -> list[dict[str, Any]]:
    """One leaf queue per KAI pool the project has quota in."""
    department = _department_amounts(project.department_slug, projects or (project,))
    used = {q.pool_slug for q in project.quotas}
    queues = []
    for pool in kai_pools(pools):
        if pool.slug not in used:
            continue
        gpu = next(
            (q for q in project.quotas if q.pool_slug == pool.slug and q.resource == FULL_GPU),
            None,
        )
        quota, limit, weight = 0, 0, pool.over_quota_weight
        if gpu is not None:
            ceiling = department[(pool.slug, FULL_GPU)].maximum
            maximum = ceiling if gpu.maximum is None else min(gpu.maximum, ceiling)
            quota, limit = gpu.guaranteed, max(maximum, gpu.guaranteed)
            weight = gpu.over_quota_weight or pool.over_quota_weight
        queues.append(
            _kai_queue(
                kai_project_queue_name(project.slug, pool.slug),
                {**_project_labels(project), L.POOL_KEY: pool.slug},
                pool,
                {
                    "displayName": project.slug,
                    "parentQueue": kai_department_queue_name(project.department_slug, pool.slug),
                    "resources": _kai_resources(quota, limit, weight),
                },
            )
        )
    return queues


def _outside_pools(project: ProjectSpec, excluded: set[str]) -> ProjectSpec:
    """The project with its quotas in the excluded pools left out."""
    if not excluded:
        return project
    return replace(project, quotas=tuple(q for q in project.quotas if q.pool_slug not in excluded))


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
    # KAI pools are left out of the Kueue and Volcano objects: their jobs go to KAI alone.
    kai_slugs = {p.slug for p in kai_pools(model.pools)}
    other_pools = tuple(p for p in model.pools if p.slug not in kai_slugs)
    other_projects = tuple(_outside_pools(p, kai_slugs) for p in model.projects)
    objects += [resource_flavor(p) for p in sorted(other_pools, key=lambda p: p.slug)]
    for priority in sorted(model.priorities, key=lambda p: p.name):
        objects += [workload_priority_class(priority), pod_priority_class(priority)]
    departments = sorted(model.departments, key=lambda d: d.slug)
    objects += [cohort(d) for d in departments]
    for department in departments:
        objects += volcano_department_queues(department, other_projects, other_pools)
        objects += kai_department_queues(department, model.projects, model.pools)
    access = model.tenant
    by_slug = {p.slug: p for p in other_projects}
    for project in sorted(model.projects, key=lambda p: p.slug):
        objects.append(namespace(project))
        if access.role:  # before anything the portal writes into the namespace
            objects.append(tenant_role_binding(project, access))
        if access.network_policy:
            objects.append(network_policy(project, access.portal_namespace))
        kueue_view = by_slug[project.slug]
        objects += [
            cluster_queue(kueue_view, other_pools, model.priorities),
            local_queue(project),
            *volcano_project_queues(kueue_view, other_pools, other_projects),
            *kai_project_queues(project, model.pools, model.projects),
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
    (NETWORKING_API, "NetworkPolicy"),
    (KUEUE_API, "ClusterQueue"),
    (KUEUE_API, "LocalQueue"),
    (VOLCANO_QUEUE_API, "Queue"),
    (KAI_QUEUE_API, "Queue"),
    ("v1", "ResourceQuota"),
)
ROLE_BINDING_KIND = (RBAC_API, "RoleBinding")


def owned_kinds(access: TenantAccess) -> tuple[tuple[str, str], ...]:
    """The kinds a sync lists to find what it owns. RoleBindings only while it writes them:
    switching PORTAL_TENANT_ROLE off leaves the existing ones alone rather than deleting the
    portal's own access to its tenants' namespaces."""
    return (ROLE_BINDING_KIND, *QUOTA_KINDS) if access.role else QUOTA_KINDS
