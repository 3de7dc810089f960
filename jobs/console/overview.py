"""The staff overview: per pool what it has, what quotas promise and what is used now; who
borrows and who lends; the longest-waiting jobs and why; the idle allocations.

Reads only: pools and quotas (quotas.selectors, numbers from quotas.arithmetic), the queue use
the cluster watcher keeps (QueueUsage), jobs and their waiting explanation (jobs.explain,
written by the watcher), and the GPU efficiency summaries (gpumetrics).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from gpumetrics.models import JobGpuSummary
from jobs.models import Job, QueueUsage
from jobs.states import JobState
from quotas.selectors import pool_list, pool_subscriptions

WAITING_STATES = (JobState.SUBMITTED, JobState.QUEUED, JobState.PREEMPTED)


@dataclass(frozen=True)
class ResourceUse:
    resource: str  # gpu | MIG profile
    guaranteed: int  # sum of the projects' nominal quota
    in_use: Decimal
    pending: int  # workloads waiting in the pool's queues (per queue, summed)


@dataclass
class PoolOverview:
    slug: str
    name: str
    gpu_model: str
    capacity_gpus: int
    guaranteed_gpus: int  # whole + GPUs set aside for the MIG quotas
    in_use_gpus: Decimal
    warning: str | None
    summary: str
    resources: list[ResourceUse] = field(default_factory=list)

    @property
    def use_percent(self) -> int:
        if not self.capacity_gpus:
            return 0
        return min(100, round(100 * float(self.in_use_gpus) / self.capacity_gpus))

    @property
    def guaranteed_percent(self) -> int:
        if not self.capacity_gpus:
            return 0
        return min(100, round(100 * self.guaranteed_gpus / self.capacity_gpus))


@dataclass(frozen=True)
class Exchange:
    """One project borrowing or lending in a pool and resource now."""

    project: str
    pool: str
    resource: str
    amount: Decimal
    in_use: Decimal
    guaranteed: Decimal


def pool_overview() -> list[PoolOverview]:
    pools = list(pool_list())
    subscriptions = pool_subscriptions(pools=pools)
    use: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    pending: dict[tuple[str, str], int] = defaultdict(int)
    for pool, resource, in_use, waiting in QueueUsage.objects.exclude(pool="").values_list(
        "pool", "resource", "in_use", "pending_workloads"
    ):
        use[(pool, resource)] += in_use
        pending[(pool, resource)] += waiting
    out = []
    for pool in pools:
        sub = subscriptions[pool.pk]
        guaranteed = {"gpu": sub.full_gpus, **dict(sub.mig_instances)}
        resources = sorted(
            set(guaranteed) | {r for (p, r) in use if p == pool.slug},
            key=lambda r: (r != "gpu", r),
        )
        out.append(
            PoolOverview(
                slug=pool.slug,
                name=pool.name,
                gpu_model=pool.gpu_model,
                capacity_gpus=sub.capacity_gpus,
                guaranteed_gpus=sub.needed_gpus,
                in_use_gpus=use.get((pool.slug, "gpu"), Decimal(0)),
                warning=sub.message,
                summary=sub.summary,
                resources=[
                    ResourceUse(
                        resource=r,
                        guaranteed=guaranteed.get(r, 0),
                        in_use=use.get((pool.slug, r), Decimal(0)),
                        pending=pending.get((pool.slug, r), 0),
                    )
                    for r in resources
                ],
            )
        )
    return out


def exchanges() -> tuple[list[Exchange], list[Exchange]]:
    """(borrowers, lenders) now, largest amount first."""
    rows = QueueUsage.objects.filter(Q(borrowed__gt=0) | Q(lent__gt=0)).select_related("project")
    borrowers, lenders = [], []
    for row in rows:
        name = row.project.slug if row.project else row.queue_name
        if row.borrowed > 0:
            borrowers.append(
                Exchange(name, row.pool, row.resource, row.borrowed, row.in_use, row.guaranteed)
            )
        if row.lent > 0:
            lenders.append(
                Exchange(name, row.pool, row.resource, row.lent, row.in_use, row.guaranteed)
            )

    def order(items: list[Exchange]) -> list[Exchange]:
        return sorted(items, key=lambda e: (-e.amount, e.project, e.pool, e.resource))

    return order(borrowers), order(lenders)


def longest_waiting(*, limit: int = 10) -> list[Job]:
    """Jobs waiting for quota or placement, the longest-waiting first; each carries `waited`
    (a timedelta) and its explanation."""
    jobs = list(
        Job.objects.filter(state__in=WAITING_STATES)
        .select_related("project", "pool", "submitter")
        .order_by("state_changed_at", "pk")[:limit]
    )
    now = timezone.now()
    for job in jobs:
        job.waited = now - job.state_changed_at
    return jobs


def idle_allocations(*, limit: int = 20) -> list[JobGpuSummary]:
    """Running jobs whose GPUs sit idle (the metrics summary says so, or the idle warning was
    given), the lowest utilisation first."""
    return list(
        JobGpuSummary.objects.filter(job__state=JobState.RUNNING)
        .filter(Q(idle=True) | Q(idle_warned_at__isnull=False))
        .select_related("job__project", "job__pool", "job__submitter")
        .order_by("util_mean", "job_id")[:limit]
    )
