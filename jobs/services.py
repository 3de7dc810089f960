"""Writes for jobs: submit, cancel and the one writer of Job.state.

Services take keyword-only arguments and an `actor`; they check roles with tenants.permissions,
write their own JobEvent rows and enqueue reconciliation only after the transaction commits.
"""

import logging
import secrets
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.models import Job, JobEvent, JobKind
from jobs.selectors import job_manifests, pool_facts_for_project
from jobs.states import JobState, can_transition, sources_for
from jobs.validation import JobRequest, ValidationResult, validate_job_request
from quotas.models import GpuPool
from tenants.models import Membership, Project
from tenants.permissions import WRITER_ROLES, can_write, is_staff

log = logging.getLogger(__name__)


class InvalidTransition(Exception):
    """The state table does not allow this change (e.g. cancelling a finished job)."""

    def __init__(self, job_id: int, current: str, to: str):
        self.job_id, self.current, self.to = job_id, current, to
        label = JobState(current).label if current in JobState.values else current
        super().__init__(f"Job {job_id} is {label}; it cannot become {JobState(to).label}.")


def job_transition(job: Job, *, to: str, reason: str, message: str = "", source: str) -> Job:
    """Move a job to `to` if the state table allows it from its current state.

    Compare-and-set: the UPDATE is filtered on the state it read, so concurrent writers (a
    reconcile and a cancel) cannot both win; the loser re-reads and re-checks. The JobEvent is
    written in the same transaction. Raises InvalidTransition when the table forbids the move.
    Updates `job` in place and returns it.
    """
    allowed = sources_for(to)
    for _ in range(5):
        with transaction.atomic():
            current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
            if current is None:
                raise Job.DoesNotExist(f"job {job.pk} does not exist")
            if current not in allowed:
                raise InvalidTransition(job.pk, current, to)
            now = timezone.now()
            updated = Job.objects.filter(pk=job.pk, state=current).update(
                state=to,
                state_reason=reason[:64],
                state_message=message,
                state_changed_at=now,
                updated_at=now,
            )
            if not updated:
                continue  # someone else moved it between our read and write; re-read
            JobEvent.objects.create(
                job_id=job.pk,
                from_state=current,
                to_state=to,
                reason=reason[:64],
                message=message,
                source=source,
            )
        job.state, job.state_reason, job.state_message, job.state_changed_at = (
            to,
            reason[:64],
            message,
            now,
        )
        return job
    raise InvalidTransition(job.pk, job.state, to)


def job_note_status(job: Job, *, reason: str, message: str) -> None:
    """Refresh the why-text of the current state (no transition, no event)."""
    if (job.state_reason, job.state_message) == (reason[:64], message):
        return
    Job.objects.filter(pk=job.pk, state=job.state).update(
        state_reason=reason[:64], state_message=message, updated_at=timezone.now()
    )
    job.state_reason, job.state_message = reason[:64], message


def enqueue_reconcile(job_id: int) -> None:
    """Queue a reconcile once the surrounding transaction commits (never inside it)."""
    from jobs.tasks import reconcile_job

    transaction.on_commit(lambda: _send(reconcile_job, job_id))


def _send(task, job_id: int) -> None:
    # A broker outage must not fail the request that stored the job: the periodic resync
    # picks the job up within one period.
    try:
        task.delay(job_id)
    except Exception:  # the broker client raises many types; the resync is the safety net
        log.warning("could not enqueue reconcile of job %s; the resync will", job_id, exc_info=True)


@dataclass
class SubmitOutcome:
    job: Job | None
    validation: ValidationResult
    manifests: list[dict[str, Any]]  # rendered for dry runs
    events: list[JobEvent] = field(default_factory=list)


def _writable_project(actor: Any, project: Project | str) -> Project:
    """The project if the actor may submit to it: ValidationError when they cannot see it (the
    same answer as a missing project), PermissionDenied when they only view it."""
    slug = project if isinstance(project, str) else project.slug
    found: Project | None = project if isinstance(project, Project) else None
    role = None
    if getattr(actor, "is_authenticated", False):
        membership = next(
            iter(
                Membership.objects.filter(user_id=actor.pk, project__slug=slug)
                .select_related("project")
                .order_by()[:1]
            ),
            None,
        )
        if membership is not None:
            role, found = membership.role, found or membership.project
    if found is None and is_staff(actor):
        found = Project.objects.filter(slug=slug).first()
    if found is None or (role is None and not is_staff(actor)):
        raise ValidationError({"project": [f"No project {slug!r} that you belong to."]})
    if not (is_staff(actor) or role in WRITER_ROLES):
        raise PermissionDenied(f"Your role in project '{slug}' cannot submit jobs.")
    return found


def _generated_name(kind: str) -> str:
    return f"{kind}-{timezone.now():%m%d-%H%M}-{secrets.token_hex(2)}"


def job_submit(
    *,
    actor: Any,
    project: Project | str,
    data: dict[str, Any],
    dry_run: bool = False,
    source: str = "api",
) -> SubmitOutcome:
    """Validate a request and store the job (Submitted), or only render it when dry_run.

    Raises ValidationError ({field: [messages]}) for bad input (unless dry_run, which returns
    the errors), PermissionDenied for a viewer.
    """
    project = _writable_project(actor, project)
    kind = data.get("kind") or ""
    backend = data.get("backend") or (project.default_gang_backend if kind == "gang" else "")
    request = JobRequest(
        project_slug=project.slug,
        kind=kind,
        image=data.get("image") or "",
        name=data.get("name") or "",
        command=data.get("command") if data.get("command") is not None else [],
        env=data.get("env") if data.get("env") is not None else {},
        gpus=data.get("gpus"),
        mig_profile=data.get("mig_profile") or "",
        replicas=data.get("replicas"),
        pool=data.get("pool") or "",
        cpu=data.get("cpu") or "",
        memory=data.get("memory") or "",
        priority=data.get("priority") or "normal",
        max_runtime_minutes=data.get("max_runtime_minutes"),
        backend=backend,
    )
    result = validate_job_request(request, pool_facts_for_project(project=project))
    name = request.name or _generated_name(kind or "job")
    # A real submission relies on the unique constraint (one query less on the hot path).
    if dry_run and result.ok and Job.objects.active().filter(project=project, name=name).exists():
        result.add("name", f"A job named {name!r} is already active in project {project.slug}.")
    if not result.ok and not dry_run:
        raise ValidationError(result.errors)
    job = None
    if result.ok:
        r = result.resolved
        job = Job(
            project=project,
            submitter=actor,
            name=name,
            kind=kind,
            image=request.image,
            command=list(request.command),
            env=dict(request.env),
            gpus=r.gpus,
            mig_profile=request.mig_profile if kind == JobKind.MIG else "",
            replicas=r.replicas,
            pool=GpuPool.objects.get(slug=request.pool) if request.pool else None,
            cpu=r.cpu,
            memory=r.memory,
            priority=request.priority,
            max_runtime_minutes=r.max_runtime_minutes,
            backend=r.backend,
            state=JobState.SUBMITTED,
        )
    if dry_run:
        # Nothing is stored; names show id 0 until a real submission assigns the id.
        manifests = job_manifests(job, job_id=0) if job is not None else []
        return SubmitOutcome(job=None, validation=result, manifests=manifests)
    try:
        with transaction.atomic():
            job.save()
            event = JobEvent.objects.create(
                job=job,
                from_state="",
                to_state=JobState.SUBMITTED,
                reason="Submitted",
                message=f"submitted by {getattr(actor, 'username', actor)}",
                source=source,
            )
            enqueue_reconcile(job.pk)
    except IntegrityError as exc:
        # Lost a race with an identical name submitted at the same moment.
        raise ValidationError(
            {"name": [f"A job named {name!r} is already active in project {project.slug}."]}
        ) from exc
    return SubmitOutcome(job=job, validation=result, manifests=[], events=[event])


def job_cancel(*, actor: Any, job: Job, source: str = "api") -> Job:
    """Cancel: the job becomes Cancelled now and its cluster objects are deleted after commit.

    Raises PermissionDenied for a viewer and InvalidTransition for a finished job.
    """
    if not can_write(actor, job.project):
        raise PermissionDenied(f"Your role in project '{job.project.slug}' cannot cancel jobs.")
    if not can_transition(job.state, JobState.CANCELLED):
        raise InvalidTransition(job.pk, job.state, JobState.CANCELLED)
    with transaction.atomic():
        job_transition(
            job,
            to=JobState.CANCELLED,
            reason="Cancelled",
            message=f"cancelled by {getattr(actor, 'username', actor)}",
            source=source,
        )
        Job.objects.filter(pk=job.pk).update(cleanup_pending=True)
        job.cleanup_pending = True
        enqueue_reconcile(job.pk)
    return job


def job_record_event(job: Job, *, reason: str, message: str, source: str) -> JobEvent:
    """A note in the job's history that is not a state change (a warning from GPU metrics, an
    XID error): from_state and to_state are both the job's current state."""
    current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first() or job.state
    return JobEvent.objects.create(
        job_id=job.pk,
        from_state=current,
        to_state=current,
        reason=reason[:64],
        message=message,
        source=source,
    )
