"""All GPU quota arithmetic, as pure functions on plain values.

Vocabulary (one meaning each, everywhere in the portal):

* **nominal** (guaranteed): what a project always gets in a pool for one resource — whole GPUs
  (resource ``"gpu"``) or instances of one MIG profile (e.g. ``"1g.10gb"``).
  Kueue: ``ClusterQueue.spec.resourceGroups[].flavors[].resources[].nominalQuota`` of the
  project's ClusterQueue for the pool's ResourceFlavor. Volcano: ``Queue.spec.deserved`` (and
  ``guarantee``).
* **borrowing limit**: how much more than nominal a project may use when others in its cohort
  leave their nominal idle. ``None`` means no limit of its own: it may borrow all the idle
  nominal of its cohort. Kueue: ``borrowingLimit`` (omitted when None).
* **cohort**: the projects that lend to each other — the projects of one department, per pool
  and resource. Kueue: ``ClusterQueue.spec.cohortName`` = the department. A project never
  borrows across departments.
* **maximum**: the most a project can ever use = nominal + what it may borrow, where what it may
  borrow is bounded by its borrowing limit, by the other projects' nominal in the cohort (the
  cohort can only lend what it is guaranteed) and by the department cap. Volcano:
  ``Queue.spec.capability`` of the project's queue for that pool. The maximum is never below
  nominal. A department's maximum is the sum of its projects' nominal (``department_usable``).
* **department cap** (``DepartmentQuota.limit``): an upper bound on the sum of the department's
  projects' nominal in a pool for a resource. A cap below that sum is a violation.
* **over-subscription**: a pool promises more than it has when the GPUs needed by the sum of all
  nominal quotas exceed its GPU count. Whole-GPU quotas count one GPU each. MIG quotas count as
  the GPUs that must be partitioned to hold them: per profile, the sum of nominal instances
  divided by how many of that profile fit on one GPU, rounded up (7 × 1g.10gb = 1 H100, 6 ×
  2g.20gb = 2 H100). This is exact for GPUs partitioned one profile per GPU (mig-parted's
  ``all-<profile>`` configs, and kubesim's default MIG node) and errs on the safe side for
  GPUs that mix profiles.

Functions take and return frozen dataclasses or ints, never models, so the admin, the REST API,
the Kueue/Volcano manifest builders and the benchmarks all compute the same numbers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from quotas import mig

FULL_GPU = "gpu"


@dataclass(frozen=True)
class QuotaEntry:
    """One project's quota for one resource in one pool (a ProjectQuota row as plain values)."""

    project: str
    department: str
    pool: str
    resource: str
    nominal: int
    borrowing_limit: int | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.pool, self.resource)

    @property
    def cohort(self) -> tuple[str, str, str]:
        return (self.department, self.pool, self.resource)


@dataclass(frozen=True)
class DepartmentCap:
    """A DepartmentQuota row as plain values: the department's projects' nominal sum ≤ limit."""

    department: str
    pool: str
    resource: str
    limit: int

    @property
    def cohort(self) -> tuple[str, str, str]:
        return (self.department, self.pool, self.resource)


@dataclass(frozen=True)
class UsableAmount:
    """What a project can use of one resource in one pool."""

    guaranteed: int
    maximum: int

    @property
    def borrowable(self) -> int:
        """How much above the guarantee it may use (Kueue's effective borrowing)."""
        return self.maximum - self.guaranteed


def usable_amount(
    *,
    nominal: int,
    borrowing_limit: int | None,
    cohort_nominal: int,
    department_cap: int | None = None,
) -> UsableAmount:
    """The guaranteed and maximum amount of one project for one pool and resource.

    ``cohort_nominal`` is the sum of nominal of every project in the cohort (same department,
    pool and resource), this project included; the others' share is what the cohort can lend.

    >>> usable_amount(nominal=8, borrowing_limit=4, cohort_nominal=20)
    UsableAmount(guaranteed=8, maximum=12)
    >>> usable_amount(nominal=8, borrowing_limit=None, cohort_nominal=10)
    UsableAmount(guaranteed=8, maximum=10)
    """
    if nominal < 0 or (borrowing_limit is not None and borrowing_limit < 0):
        raise ValueError("nominal and borrowing limit must not be negative")
    lendable = max(0, cohort_nominal - nominal)
    borrow = lendable if borrowing_limit is None else min(borrowing_limit, lendable)
    maximum = nominal + borrow
    if department_cap is not None:
        maximum = min(maximum, department_cap)
    return UsableAmount(guaranteed=nominal, maximum=max(nominal, maximum))


def cohort_nominals(quotas: Iterable[QuotaEntry]) -> dict[tuple[str, str, str], int]:
    """Sum of nominal per cohort key (department, pool, resource)."""
    sums: dict[tuple[str, str, str], int] = defaultdict(int)
    for quota in quotas:
        sums[quota.cohort] += quota.nominal
    return dict(sums)


def usable_amounts(
    quotas: Iterable[QuotaEntry], caps: Iterable[DepartmentCap] = ()
) -> dict[tuple[str, str, str], UsableAmount]:
    """usable_amount for every quota, keyed by (project, pool, resource).

    ``quotas`` must hold every quota of the cohorts concerned (all projects of the departments),
    not only the projects being displayed, or the maximum is underestimated.
    """
    quotas = list(quotas)
    sums = cohort_nominals(quotas)
    limits = {cap.cohort: cap.limit for cap in caps}
    return {
        quota.key: usable_amount(
            nominal=quota.nominal,
            borrowing_limit=quota.borrowing_limit,
            cohort_nominal=sums[quota.cohort],
            department_cap=limits.get(quota.cohort),
        )
        for quota in quotas
    }


def department_usable(quotas: Iterable[QuotaEntry]) -> dict[tuple[str, str, str], UsableAmount]:
    """What a whole department can use, keyed by cohort (department, pool, resource).

    Its projects borrow only from each other (never across departments), so together they can
    never hold more than the sum of their nominal quotas: that sum is both the department's
    guarantee and its maximum. (A department cap bounds that sum; a cap below it is a violation
    reported by department_cap_violations, not a lower maximum, since Kueue lends what is
    nominal.) Volcano: the department queue's ``deserved`` and ``capability``.

    >>> department_usable([QuotaEntry("a", "d", "h100", "gpu", 8, 4),
    ...                    QuotaEntry("b", "d", "h100", "gpu", 6, None)])
    {('d', 'h100', 'gpu'): UsableAmount(guaranteed=14, maximum=14)}
    """
    return {
        cohort: UsableAmount(guaranteed=total, maximum=total)
        for cohort, total in cohort_nominals(quotas).items()
    }


@dataclass(frozen=True)
class CapViolation:
    """A department cap that its projects' nominal quotas exceed."""

    department: str
    pool: str
    resource: str
    limit: int
    needed: int

    @property
    def excess(self) -> int:
        return self.needed - self.limit

    @property
    def message(self) -> str:
        return (
            f"Department {self.department} caps {describe_resource(self.resource)} in pool "
            f"{self.pool} at {self.limit}, but its projects' guaranteed quotas add up to "
            f"{self.needed} ({self.excess} more than allowed)."
        )


def department_cap_violations(
    quotas: Iterable[QuotaEntry], caps: Iterable[DepartmentCap]
) -> list[CapViolation]:
    """Every department cap exceeded by the sum of its projects' nominal, in a stable order."""
    sums = cohort_nominals(quotas)
    violations = [
        CapViolation(
            department=cap.department,
            pool=cap.pool,
            resource=cap.resource,
            limit=cap.limit,
            needed=sums.get(cap.cohort, 0),
        )
        for cap in caps
        if sums.get(cap.cohort, 0) > cap.limit
    ]
    return sorted(violations, key=lambda v: (v.department, v.pool, v.resource))


def department_headroom(*, limit: int, others_nominal: int) -> int:
    """The largest nominal one project may have under a cap the other projects already use."""
    return max(0, limit - others_nominal)


def cap_error_for_quota(
    *,
    department: str,
    pool: str,
    resource: str,
    limit: int,
    others_nominal: int,
    nominal: int,
) -> str | None:
    """The error for a project quota of ``nominal`` under a department cap, or None if it fits.

    ``others_nominal`` is the sum of the department's other projects' nominal in the cohort.
    """
    allowed = department_headroom(limit=limit, others_nominal=others_nominal)
    if nominal <= allowed:
        return None
    return (
        f"Department {department} caps {describe_resource(resource)} in pool {pool} at {limit} "
        f"and its other projects hold {others_nominal}: this quota needs {nominal}, "
        f"at most {allowed} is allowed."
    )


def cap_error_for_limit(
    *, department: str, pool: str, resource: str, limit: int, projects_nominal: int
) -> str | None:
    """The error for a department cap below what its projects already hold, or None."""
    if limit >= projects_nominal:
        return None
    return (
        f"The projects of department {department} already hold {projects_nominal} "
        f"{describe_resource(resource)} in pool {pool}; the cap must be at least "
        f"{projects_nominal} (got {limit})."
    )


def describe_resource(resource: str) -> str:
    """'GPUs' for whole GPUs, the profile name followed by 'MIG instances' otherwise."""
    return "GPUs" if resource == FULL_GPU else f"{resource} MIG instances"


def mig_gpus_needed(gpu_model: str, instances: Mapping[str, int]) -> int:
    """Whole GPUs that must be MIG-partitioned to hold these instance counts, one profile per GPU.

    A profile the model does not have (stale data) is counted as one GPU per instance, the safe
    side.

    >>> mig_gpus_needed("NVIDIA-H100-80GB-HBM3", {"1g.10gb": 7, "2g.20gb": 4})
    3
    """
    family = mig.family_for_model(gpu_model)
    total = 0
    for profile, count in instances.items():
        if count <= 0:
            continue
        row = family.profile(profile) if family else None
        per_gpu = row.max_per_gpu if row else 1
        total += math.ceil(count / per_gpu)
    return total


@dataclass(frozen=True)
class PoolSubscription:
    """How much of a pool the nominal quotas promise, against what it has."""

    pool: str
    capacity_gpus: int
    full_gpus: int
    mig_instances: Mapping[str, int] = field(default_factory=dict)
    mig_gpus: int = 0

    @property
    def needed_gpus(self) -> int:
        return self.full_gpus + self.mig_gpus

    @property
    def oversubscribed(self) -> bool:
        return self.needed_gpus > self.capacity_gpus

    @property
    def excess_gpus(self) -> int:
        return max(0, self.needed_gpus - self.capacity_gpus)

    @property
    def free_gpus(self) -> int:
        """GPUs no quota guarantees (what is left to hand out)."""
        return max(0, self.capacity_gpus - self.needed_gpus)

    @property
    def summary(self) -> str:
        """e.g. '30 of 32 GPUs guaranteed (26 whole, 4 for MIG: 1g.10gb ×28)'."""
        parts = f"{self.needed_gpus} of {self.capacity_gpus} GPUs guaranteed"
        if self.mig_gpus:
            mig_text = ", ".join(f"{p} ×{n}" for p, n in sorted(self.mig_instances.items()) if n)
            parts += f" ({self.full_gpus} whole, {self.mig_gpus} for MIG: {mig_text})"
        return parts

    @property
    def message(self) -> str | None:
        """A warning when over-subscribed, None otherwise."""
        if not self.oversubscribed:
            return None
        return (
            f"Pool {self.pool} is over-subscribed: {self.summary}; its nominal quotas need "
            f"{self.excess_gpus} GPU(s) more than the pool has, so not every guarantee can be met."
        )


def pool_subscription(
    *, pool: str, gpu_model: str, capacity_gpus: int, quotas: Iterable[QuotaEntry]
) -> PoolSubscription:
    """Sum the nominal quotas of one pool (entries of other pools are ignored)."""
    full = 0
    instances: dict[str, int] = defaultdict(int)
    for quota in quotas:
        if quota.pool != pool:
            continue
        if quota.resource == FULL_GPU:
            full += quota.nominal
        else:
            instances[quota.resource] += quota.nominal
    return PoolSubscription(
        pool=pool,
        capacity_gpus=capacity_gpus,
        full_gpus=full,
        mig_instances=dict(instances),
        mig_gpus=mig_gpus_needed(gpu_model, instances),
    )


def format_quota_summary(entries: Iterable[tuple[str, str, int, int | None]]) -> str:
    """A one-line summary of quotas: (pool, resource, nominal, borrowing limit) tuples.

    Pools are separated by '; ' and whole GPUs come first:
    'a100: 4 gpu (+4); h100: 8 gpu (+any), 1g.10gb ×7'.
    """
    by_pool: dict[str, list[tuple[str, int, int | None]]] = defaultdict(list)
    for pool, resource, nominal, borrowing_limit in entries:
        by_pool[pool].append((resource, nominal, borrowing_limit))
    parts = []
    for pool in sorted(by_pool):
        items = []
        for resource, nominal, limit in sorted(
            by_pool[pool], key=lambda r: resource_sort_key(r[0])
        ):
            text = f"{nominal} gpu" if resource == FULL_GPU else f"{resource} ×{nominal}"
            borrow = "any" if limit is None else str(limit)
            if limit != 0:
                text += f" (+{borrow})"
            items.append(text)
        parts.append(f"{pool}: " + ", ".join(items))
    return "; ".join(parts)


def resource_sort_key(resource: str) -> tuple[int, int, int, str]:
    """Whole GPUs first, then MIG profiles small to large (1g.10gb before 1g.20gb, 2g.20gb)."""
    if resource == FULL_GPU:
        return (0, 0, 0, "")
    match = mig.PROFILE_RE.match(resource)
    if match is None:
        return (2, 0, 0, resource)
    return (1, int(match.group(1)), int(match.group(2)), resource)


# --- CPU and memory ------------------------------------------------------------------------------
# They are not rationed separately: each GPU of a pool brings the pool's default CPU and memory
# per pod. quotas.manifests.cluster_queue gives each project's ClusterQueue, per pool, the default
# × the pool's GPUs as nominal CPU and memory, so that is the most a job can be admitted with; one
# pod can use at most one node's worth, the default × GPUs per node.
@dataclass(frozen=True)
class CpuMemoryShare:
    """The most CPU (cores) or memory (bytes) one pod, and one job, can have in a pool."""

    per_pod: Decimal
    per_job: Decimal


def cpu_memory_share(*, per_gpu: Decimal, gpus_per_node: int, node_count: int) -> CpuMemoryShare:
    """CPU or memory a pool's ClusterQueue covers, from the pool's default per GPU."""
    return CpuMemoryShare(
        per_pod=per_gpu * gpus_per_node, per_job=per_gpu * gpus_per_node * node_count
    )


def cpu_memory_shortfall(
    *, per_pod: Decimal, pods: int, share: CpuMemoryShare
) -> tuple[Decimal, Decimal] | None:
    """None if `pods` pods of `per_pod` each fit the share; else (needed, available) for the
    first bound broken (per pod, then the whole job)."""
    if per_pod > share.per_pod:
        return per_pod, share.per_pod
    if per_pod * pods > share.per_job:
        return per_pod * pods, share.per_job
    return None
