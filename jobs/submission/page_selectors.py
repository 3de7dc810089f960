"""Reads for the researcher's pages (home, submit form, job list): quota bars, the project's use
per pool, my active jobs and GPU-hours. Every function runs a fixed number of queries whatever
the number of rows, so the pages stay cheap as jobs pile up."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from credentials.selectors import credentials_of_project
from jobs.models import Job, JobKind, JobPod, JobTemplate, QueueUsage
from jobs.states import ACTIVE, TERMINAL
from quotas.models import GpuPool
from quotas.selectors import quota_rows_for_projects
from tenants.models import Project
from volumes.selectors import checkpoint_volume_of, volume_facts_for_project

RESUMABLE_LIMIT = 50  # the latest finished jobs offered to resume from


@dataclass(frozen=True)
class QuotaBar:
    """One bar of the home page: a project's use of one resource in one pool."""

    pool: str
    resource: str
    in_use: int
    guaranteed: int
    maximum: int

    @property
    def label(self) -> str:
        return "GPUs" if self.resource == "gpu" else f"MIG {self.resource}"

    @property
    def borrowable(self) -> int:
        return max(0, self.maximum - self.guaranteed)

    @property
    def scale(self) -> int:
        return max(self.maximum, self.in_use, 1)

    def _pct(self, value: int) -> str:
        return f"{min(100.0, 100.0 * value / self.scale):.1f}"

    @property
    def in_use_pct(self) -> str:
        return self._pct(self.in_use)

    @property
    def guaranteed_pct(self) -> str:
        return self._pct(self.guaranteed)

    @property
    def borrowing(self) -> bool:
        return self.in_use > self.guaranteed


def in_use_for_projects(*, projects: list[Project]) -> dict[int, dict[tuple[str, str], int]]:
    """{project id: {(pool slug, resource): amount in use}} from the cluster's queue status."""
    out: dict[int, dict[tuple[str, str], int]] = {p.pk: {} for p in projects}
    rows = QueueUsage.objects.filter(project__in=[p.pk for p in projects]).values_list(
        "project_id", "pool", "resource", "in_use"
    )
    for project_id, pool, resource, in_use in rows:
        key = (pool, resource)
        bucket = out.setdefault(project_id, {})
        bucket[key] = bucket.get(key, 0) + int(in_use or 0)
    return out


def quota_bars_for_projects(*, projects: list[Project]) -> dict[int, list[QuotaBar]]:
    """One bar per pool and resource the project has quota in (four queries in all)."""
    quota = quota_rows_for_projects(projects=projects)
    use = in_use_for_projects(projects=projects)
    return {
        p.pk: [
            QuotaBar(
                pool=row.pool_slug,
                resource=row.resource,
                in_use=use[p.pk].get((row.pool_slug, row.resource), 0),
                guaranteed=row.nominal,
                maximum=row.maximum,
            )
            for row in quota.get(p.pk, [])
        ]
        for p in projects
    }


def my_active_jobs(*, user: Any, limit: int = 20) -> QuerySet[Job]:
    """The user's own jobs that are not finished, newest first."""
    return (
        Job.objects.visible_to(user)
        .filter(submitter=user, state__in=ACTIVE)
        .select_related("project", "pool")
        .order_by("-created_at", "-id")[:limit]
    )


def week_start(now: datetime) -> datetime:
    """Monday 00:00 of the week `now` is in (in `now`'s timezone)."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight - timedelta(days=now.weekday())


def gpu_share(*, kind: str, gpus: int, mig_profile: str, fraction: float | None = None) -> float:
    """GPUs one pod holds: whole GPUs, a MIG slice's compute share (3g → 3/7), or the part of
    one GPU a KAI fraction job holds."""
    if fraction is not None:
        return fraction
    if kind == JobKind.MIG:
        head = (mig_profile or "").split("g", 1)[0]
        return min(1.0, int(head) / 7) if head.isdigit() else 1.0
    return float(gpus)


def gpu_hours(
    pods: list[tuple[datetime | None, datetime | None, float]], *, since: datetime, now: datetime
) -> float:
    """GPU-hours held since `since`: each pod's (start, end or still running, GPUs) overlap."""
    total = 0.0
    for started, finished, share in pods:
        if started is None:
            continue
        begin, end = max(started, since), min(finished or now, now)
        if end > begin:
            total += share * (end - begin).total_seconds() / 3600
    return total


def my_gpu_hours_this_week(*, user: Any, now: datetime | None = None) -> float:
    now = now or timezone.now()
    since = week_start(timezone.localtime(now))
    rows = (
        JobPod.objects.filter(job__submitter=user, started_at__isnull=False)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=since))
        .values_list(
            "started_at", "finished_at", "job__kind", "job__gpus", "job__mig_profile", "job_id"
        )
    )
    from jobs.selectors import fraction_shares

    fractions = fraction_shares({row[5] for row in rows if not row[3]})
    pods = [
        (start, end, gpu_share(kind=k, gpus=g, mig_profile=m, fraction=fractions.get(j)))
        for start, end, k, g, m, j in rows
    ]
    return gpu_hours(pods, since=since, now=now)


def pool_choices() -> list[GpuPool]:
    return list(GpuPool.objects.order_by("slug"))


def templates_for_projects(*, projects: list[Project]) -> list[JobTemplate]:
    return list(
        JobTemplate.objects.filter(project__in=[p.pk for p in projects])
        .select_related("project")
        .order_by("project__slug", "name")
    )


def advanced_choices(*, project: Project) -> dict[str, Any]:
    """The submit form's advanced choices for a project: its volumes, its credentials and, when
    it has a checkpoint volume, its finished jobs to resume from (None without one)."""
    volumes = volume_facts_for_project(project=project)
    resumable = None
    if checkpoint_volume_of(volumes) is not None:
        resumable = list(
            Job.objects.filter(project=project, state__in=TERMINAL)
            .only("pk", "name", "state")
            .order_by("-created_at", "-id")[:RESUMABLE_LIMIT]
        )
    return {
        "volumes": sorted(volumes.values(), key=lambda v: v.name),
        "credentials": credentials_of_project(project_id=project.pk),
        "resumable": resumable,
    }
