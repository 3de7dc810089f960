"""What the portal tells users about, built from its own records: a job's end (with its last
log lines and GPU efficiency), a job waiting longer than its owner's limit (with the
explanation), a decided quota request; and the periodic sweep that finds waiting jobs and
catches what a lost message left undone. The idle-GPU warning is sent by gpumetrics where it
judges the job (gpumetrics.services.check_idle)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import CharField, Exists, OuterRef, Value
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from gpumetrics.selectors import summary_dict
from gpumetrics.services import summarise_ended_job
from jobs.logs.selectors import LogsUnavailable, choose_pod, tail_text
from jobs.models import Job
from jobs.states import JobState
from notifications.events import JOB_ENDED, JOB_WAITING, QUOTA_REQUEST_DECIDED
from notifications.models import Notification, NotificationState, UserSettings
from notifications.selectors import waiting_minutes
from notifications.services import dispatch, flush_digest, notify
from planner.selectors import rightsizing_sentence

log = logging.getLogger(__name__)

LOG_LINES = 20
ENDED_STATES = (JobState.SUCCEEDED, JobState.FAILED)
WAITING_STATES = (JobState.QUEUED, JobState.PREEMPTED)


def job_url(job_id: int) -> str:
    base = settings.PORTAL_BASE_URL.rstrip("/")
    return f"{base}/jobs/{job_id}/" if base else ""


def _job_facts(job: Job) -> dict[str, Any]:
    return {
        "id": job.pk,
        "name": job.name,
        "project": job.project.slug,
        "state": job.state,
        "reason": job.state_reason,
        "message": job.state_message,
        "pool": job.pool.slug if job.pool else None,
        "gpus": job.gpus,
        "mig_profile": job.mig_profile,
        "replicas": job.replicas,
        "url": job_url(job.pk),
    }


def last_log_lines(job: Job, lines: int = LOG_LINES) -> str:
    """The kept tail, or the last lines read from the cluster now (the pods still exist at the
    job's end); "" when there are none or the cluster cannot give them."""
    if job.logs_tail:
        return "\n".join(job.logs_tail.splitlines()[-lines:])
    try:
        pod = choose_pod(job)
        return tail_text(job.project.namespace, pod.name, lines=lines)
    except LogsUnavailable:
        return ""
    except Exception:  # no cluster reachable: the message goes out without the lines
        log.info("job %s: no log lines for its notification", job.pk, exc_info=True)
        return ""


def efficiency_sentence(summary: dict[str, Any] | None) -> str:
    if not summary or summary.get("util_mean") is None:
        return "GPU efficiency: no GPU metrics were recorded for this job."
    parts = [f"mean utilisation {summary['util_mean']:.0f} %"]
    if summary.get("util_p95") is not None:
        parts.append(f"p95 {summary['util_p95']:.0f} %")
    if summary.get("fb_peak_mib") is not None and summary.get("fb_total_mib"):
        parts.append(
            f"peak memory {summary['fb_peak_mib'] / 1024:.1f} of "
            f"{summary['fb_total_mib'] / 1024:.0f} GiB"
        )
    parts.append(f"{summary.get('gpu_hours') or 0:.2f} GPU-hours")
    verdict = {
        "idle": "its GPUs were mostly idle",
        "busy": "its GPUs were busy",
        "too_short": "too short to judge idleness",
    }.get(summary.get("idle_verdict") or "", "")
    return "GPU efficiency: " + ", ".join(parts) + (f"; {verdict}." if verdict else ".")


def _json_summary(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if summary is None:
        return None
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in summary.items()}


def announce_job_end(job_id: int) -> bool:
    """Tell the submitter that the job succeeded or failed (once: dedupe key job.ended:<id>).
    The GPU summary is made final first (idempotent, also done by gpumetrics' own task)."""
    job = (
        Job.objects.select_related("project", "pool", "submitter")
        .filter(pk=job_id, state__in=ENDED_STATES)
        .first()
    )
    if job is None:
        return False
    if Notification.objects.filter(user=job.submitter, dedupe_key=f"{JOB_ENDED}:{job.pk}").exists():
        return False
    summarise_ended_job(job.pk)
    summary = summary_dict(job)
    tail = last_log_lines(job)
    outcome = "succeeded" if job.state == JobState.SUCCEEDED else "failed"
    lines = [f"Job {job.pk} ({job.name}) in project {job.project.slug} {outcome}."]
    if job.state_message:
        lines.append(job.state_message)
    lines += ["", efficiency_sentence(summary)]
    rightsizing = rightsizing_sentence(job)  # planner: a smaller request that would have fit
    if rightsizing:
        lines.append(rightsizing)
    if tail:
        lines += ["", f"Last {LOG_LINES} log lines:", tail]
    if url := job_url(job.pk):
        lines += ["", url]
    notify(
        JOB_ENDED,
        user=job.submitter,
        subject=f"Job {job.pk} ({job.name}) {outcome}",
        text="\n".join(lines),
        payload={
            "job": _job_facts(job),
            "gpu_efficiency": _json_summary(summary),
            "log_tail": tail,
            "rightsizing": rightsizing or None,
        },
        dedupe_key=f"{JOB_ENDED}:{job.pk}",
        project=job.project,
    )
    return True


def announce_waiting(job: Job, minutes: int) -> None:
    waited = int((timezone.now() - job.state_changed_at).total_seconds() // 60)
    explanation = job.explanation or job.state_message or "The cluster has not said why."
    lines = [
        f"Job {job.pk} ({job.name}) in project {job.project.slug} has been waiting for "
        f"{waited} minutes (your limit: {minutes}).",
        "",
        explanation,
    ]
    if url := job_url(job.pk):
        lines += ["", url]
    notify(
        JOB_WAITING,
        user=job.submitter,
        subject=f"Job {job.pk} ({job.name}) has waited {waited} minutes",
        text="\n".join(lines),
        payload={"job": _job_facts(job), "waited_minutes": waited, "explanation": explanation},
        dedupe_key=f"{JOB_WAITING}:{job.pk}",
        project=job.project,
    )


def _not_told(event: str):
    return ~Exists(
        Notification.objects.filter(
            user_id=OuterRef("submitter_id"),
            dedupe_key=Concat(Value(f"{event}:"), Cast(OuterRef("pk"), CharField())),
        )
    )


def announce_waiting_jobs(*, limit: int = 500) -> int:
    """Each job waiting longer than its submitter's limit, told once."""
    now = timezone.now()
    candidates = (
        Job.objects.filter(
            state__in=WAITING_STATES, state_changed_at__lte=now - timedelta(minutes=1)
        )
        .filter(_not_told(JOB_WAITING))
        .select_related("project", "pool", "submitter")
        .order_by("state_changed_at")[:limit]
    )
    limits: dict[int, int] = {}
    told = 0
    for job in candidates:
        if job.submitter_id not in limits:
            limits[job.submitter_id] = waiting_minutes(job.submitter)
        minutes = limits[job.submitter_id]
        if job.state_changed_at <= now - timedelta(minutes=minutes):
            announce_waiting(job, minutes)
            told += 1
    return told


def announce_lost_job_ends(*, limit: int = 200) -> int:
    """Job ends of the last hour whose notification never came (a lost message)."""
    now = timezone.now()
    ids = list(
        Job.objects.filter(
            state__in=ENDED_STATES,
            state_changed_at__gte=now - timedelta(hours=1),
            state_changed_at__lte=now - timedelta(minutes=2),
        )
        .filter(_not_told(JOB_ENDED))
        .values_list("pk", flat=True)[:limit]
    )
    return sum(announce_job_end(pk) for pk in ids)


def sweep() -> dict[str, int]:
    now = timezone.now()
    stale = now - timedelta(minutes=2)
    pending = list(
        Notification.objects.filter(
            state=NotificationState.PENDING, created_at__lte=stale
        ).values_list("pk", flat=True)[:500]
    )
    for pk in pending:
        dispatch(pk)
    overdue = list(
        UserSettings.objects.filter(digest_due_at__lte=now - timedelta(seconds=30)).values_list(
            "user_id", flat=True
        )
    )
    for user_id in overdue:
        flush_digest(user_id)
    return {
        "waiting": announce_waiting_jobs(),
        "job_ends": announce_lost_job_ends(),
        "dispatched": len(pending),
        "digests": len(overdue),
    }


def announce_quota_request_decided(request_obj: Any) -> None:
    """See notifications.events.quota_request_decided for the attributes it reads."""
    requester = request_obj.requester
    project = getattr(request_obj, "project", None)
    pool = getattr(request_obj, "pool", None)
    pool_name = getattr(pool, "slug", None) or getattr(pool, "name", None) or str(pool or "")
    project_slug = getattr(project, "slug", "") or str(project or "")
    decision = str(getattr(request_obj, "decision", "") or "decided")
    gpus = getattr(request_obj, "gpus", None)
    note = str(getattr(request_obj, "note", "") or "")
    until = getattr(request_obj, "until", None)
    decided_by = getattr(request_obj, "decided_by", None)
    pk = getattr(request_obj, "pk", None) or getattr(request_obj, "id", None)
    what = f"{gpus} more GPUs in pool {pool_name} for project {project_slug}"
    lines = [f"Your request for {what} was {decision}."]
    if until:
        lines.append(
            f"Until: {until:%Y-%m-%d %H:%M} UTC." if hasattr(until, "hour") else f"Until: {until}."
        )
    if decided_by is not None:
        lines.append(f"Decided by {decided_by}.")
    if note:
        lines += ["", note]
    notify(
        QUOTA_REQUEST_DECIDED,
        user=requester,
        subject=f"Quota request {decision}: {what}",
        text="\n".join(lines),
        payload={
            "request": pk,
            "project": project_slug,
            "pool": pool_name,
            "gpus": gpus,
            "decision": decision,
            "note": note,
            "until": until.isoformat() if hasattr(until, "isoformat") else until,
        },
        dedupe_key=f"{QUOTA_REQUEST_DECIDED}:{pk}:{decision}",
        project=project if hasattr(project, "pk") else None,
    )
