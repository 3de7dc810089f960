"""Reads: member limits, what a member or a project holds, quota requests."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet, Sum

from governance import member_limits
from governance.models import MemberGpuLimit, QuotaRequest, RequestStatus
from jobs.models import Job, QueueUsage
from jobs.states import ACTIVE, JobState
from quotas.models import FULL_GPU, GpuPool, ProjectQuota
from tenants.models import Project
from tenants.permissions import is_project_admin
from tenants.selectors import restrict_to_visible

HELD_FIELDS = ("pk", "pool__slug", "eligible_pools", "gpus", "replicas", "kind", "mig_profile")


def pools_of(pool_slug: str | None, eligible_pools: list[str] | None) -> list[str]:
    """The pools a job may occupy: its pinned pool, else every eligible one."""
    return [pool_slug] if pool_slug else list(eligible_pools or [])


def request_of_row(row: dict[str, Any]) -> member_limits.GpuRequest:
    pods = row["replicas"] if row["kind"] == "gang" else 1
    return member_limits.request_of(
        gpus=row["gpus"], pods=pods, mig_profile=row["mig_profile"] or ""
    )


@dataclass(frozen=True)
class EffectiveLimit:
    pool: str
    gpu_model: str
    max_gpus: int


def effective_limits(*, project_id: int, user_id: int, pools: list[str]) -> list[EffectiveLimit]:
    """The member's limit in each of these pools that has one: their own row, else the
    project's default for every member."""
    # One query for both (every reconcile of a first apply asks): defaults, then own rows.
    rows = MemberGpuLimit.objects.filter(
        Q(user_id=user_id) | Q(user__isnull=True), project_id=project_id, pool__slug__in=pools
    ).values_list("pool__slug", "pool__gpu_model", "max_gpus", "user_id")
    found: dict[str, tuple[str, int]] = {}
    for slug, model, cap, _owner in sorted(rows, key=lambda row: row[3] is not None):
        found[slug] = (model, cap)
    return [EffectiveLimit(slug, model, cap) for slug, (model, cap) in sorted(found.items())]


def member_held_requests(
    *, project_id: int, user_id: int, pools: list[str], exclude_job_id: int | None = None
) -> dict[str, list[member_limits.GpuRequest]]:
    """Per pool, the requests of the member's jobs that are in the cluster and not ended."""
    jobs = Job.objects.filter(
        project_id=project_id,
        submitter_id=user_id,
        state__in=sorted(ACTIVE),
        applied_at__isnull=False,
        cleanup_pending=False,
    )
    if exclude_job_id is not None:
        jobs = jobs.exclude(pk=exclude_job_id)
    held: dict[str, list[member_limits.GpuRequest]] = defaultdict(list)
    for row in jobs.values(*HELD_FIELDS):
        for pool in pools_of(row["pool__slug"], row["eligible_pools"]):
            if pool in pools:
                held[pool].append(request_of_row(row))
    return held


def member_limit_list(*, project: Project) -> QuerySet[MemberGpuLimit]:
    return MemberGpuLimit.objects.filter(project=project).select_related("pool", "user")


def member_limits_visible_to(user: Any) -> QuerySet[MemberGpuLimit]:
    return restrict_to_visible(
        MemberGpuLimit.objects.select_related("project", "pool", "user"),
        user=user,
        project_field="project",
    )


def held_jobs_of_project(*, project: Project) -> QuerySet[Job]:
    """Jobs waiting in the portal for their submitter's GPU limit."""
    return Job.objects.filter(
        project=project,
        state=JobState.SUBMITTED,
        applied_at__isnull=True,
        state_reason=member_limits.MEMBER_LIMIT_REASON,
    ).select_related("submitter")


def project_pools(*, project: Project) -> QuerySet[GpuPool]:
    """The pools the project has a quota in (the pools a limit or a request may name)."""
    return GpuPool.objects.filter(project_quotas__project=project).distinct().order_by("slug")


def project_gpu_quota(*, project: Project, pool: GpuPool) -> ProjectQuota | None:
    return ProjectQuota.objects.filter(project=project, pool=pool, resource=FULL_GPU).first()


def project_gpus_running(*, project_id: int, pool: str) -> int:
    """Whole GPUs the project's jobs hold in the pool now (admitted or running): the larger of
    the portal's job rows and the cluster's queue status as the watcher last read it."""
    running = Job.objects.filter(
        project_id=project_id, state__in=[JobState.ADMITTED, JobState.RUNNING]
    )
    requests = [
        request_of_row(row)
        for row in running.values(*HELD_FIELDS)
        if pool in pools_of(row["pool__slug"], row["eligible_pools"]) and not row["mig_profile"]
    ]
    from_jobs = member_limits.gpus_held("", requests)
    reported = QueueUsage.objects.filter(
        project_id=project_id, pool=pool, resource=FULL_GPU
    ).aggregate(n=Sum("in_use"))["n"]
    return max(from_jobs, int(reported or 0))


def quota_requests_visible_to(user: Any) -> QuerySet[QuotaRequest]:
    return restrict_to_visible(
        QuotaRequest.objects.select_related("project", "pool", "requester", "decided_by"),
        user=user,
        project_field="project",
    )


def quota_request_list(*, project: Project) -> QuerySet[QuotaRequest]:
    return QuotaRequest.objects.filter(project=project).select_related(
        "pool", "requester", "decided_by"
    )


def pending_quota_requests() -> QuerySet[QuotaRequest]:
    return (
        QuotaRequest.objects.filter(status=RequestStatus.PENDING)
        .select_related("project", "pool", "requester")
        .order_by("created_at", "id")
    )


def quota_requests_to_end(*, today: Any) -> QuerySet[QuotaRequest]:
    """Approved requests past their last day, and those still ending."""
    return QuotaRequest.objects.filter(
        status__in=[RequestStatus.APPROVED, RequestStatus.EXPIRING], until__lt=today
    ).order_by("id")


def section_context(*, user: Any, project: Project) -> dict[str, Any]:
    """What the project page's governance sections show (the forms are added by the caller)."""
    return {
        "project": project,
        "can_govern": is_project_admin(user, project),
        "limits": list(member_limit_list(project=project)),
        "held_jobs": list(held_jobs_of_project(project=project)[:50]),
        "quota_requests": list(quota_request_list(project=project)[:20]),
        "pools": list(project_pools(project=project).values_list("slug", flat=True)),
    }


def jobs_waiting_on_members_of(ended_job_ids: list[int]) -> list[tuple[int, int | None]]:
    """(job id, array id) of the jobs waiting for the GPU limit of the submitters of these
    ended jobs, in their projects: they may fit now. One query."""
    if not ended_job_ids:
        return []
    ended = Job.objects.filter(pk__in=ended_job_ids)
    return list(
        Job.objects.filter(
            state=JobState.SUBMITTED,
            applied_at__isnull=True,
            state_reason=member_limits.MEMBER_LIMIT_REASON,
            project_id__in=ended.values("project_id"),
            submitter_id__in=ended.values("submitter_id"),
        )
        .order_by("pk")
        .values_list("pk", "array_id")[:500]
    )
