"""Writes for jobs: submit, cancel and the one writer of Job.state.

Services take keyword-only arguments and an `actor`; they check roles with tenants.permissions,
write their own JobEvent rows and enqueue reconciliation only after the transaction commits.
"""

import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone
from psycopg.errors import DeadlockDetected

from audit import services as audit_services
from governance.selectors import jobs_waiting_on_members_of
from jobs import mounts as job_mounts
from jobs import secret_refs
from jobs.idempotency import IdempotencyKey, raise_if_already_submitted, record_submission
from jobs.models import Job, JobEvent, JobKind, JobPod
from jobs.reconcile.bulk import move_rows
from jobs.selectors import credential_facts_for_project, job_manifests, pool_facts_for_project
from jobs.states import TERMINAL, JobState, can_transition
from jobs.validation import JobRequest, ValidationResult, validate_job_request
from portal.celery import app as celery_app
from portal.outage import unavailable_service
from quotas.models import GpuPool
from tenants.models import Membership, Project
from tenants.permissions import WRITER_ROLES, can_write, is_staff
from volumes.selectors import checkpoint_volume_of, volume_facts_for_project

log = logging.getLogger(__name__)


class InvalidTransition(Exception):
    """The state table does not allow this change (e.g. cancelling a finished job)."""

    def __init__(self, job_id: int, current: str, to: str):
        self.job_id, self.current, self.to = job_id, current, to
        label = JobState(current).label if current in JobState.values else current
        super().__init__(f"Job {job_id} is {label}; it cannot become {JobState(to).label}.")


class StaleTransition(InvalidTransition):
    """The job is no longer in the state the caller saw; nothing was written."""

    def __init__(self, job_id: int, current: str, expected: str, to: str):
        self.expected = expected
        super().__init__(job_id, current, to)


def job_transition(
    job: Job,
    *,
    to: str,
    expected_from: str,
    reason: str,
    message: str = "",
    source: str,
) -> Job:
    """Move a job from `expected_from` (the state the caller saw) to `to`.

    Compare-and-set on what the caller saw, not on a fresh read: the UPDATE is filtered on
    `expected_from`, so a writer acting on a stale snapshot (a bulk resync that listed the job
    before a reconcile moved it on) changes nothing and writes no event. Raises InvalidTransition
    when the table forbids expected_from → to, and StaleTransition (a subclass) when the stored
    state is no longer `expected_from`. The JobEvent is written in the same transaction. Updates
    `job` in place and returns it. The change is published (portal:jobs:<project>) after commit.
    """
    expected, to = str(expected_from), str(to)
    if not can_transition(expected, to):
        raise InvalidTransition(job.pk, expected, to)
    now = timezone.now()
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state=expected).update(
            state=to,
            state_reason=reason[:64],
            state_message=message,
            state_changed_at=now,
            updated_at=now,
        )
        if not updated:
            current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
            if current is None:
                raise Job.DoesNotExist(f"job {job.pk} does not exist")
            raise StaleTransition(job.pk, current, expected, to)
        JobEvent.objects.create(
            job_id=job.pk,
            from_state=expected,
            to_state=to,
            reason=reason[:64],
            message=message,
            source=source,
        )
        publish_job_change(job.pk, to)
        if to in TERMINAL:
            enqueue_gpu_summary(job.pk)
            if to in NOTIFIED_ENDINGS:
                enqueue_job_end_notice(job.pk)
            wake_member_limited([job.pk])
            if getattr(job, "array_id", None):
                # A finished element frees a slot of its array's parallelism.
                enqueue_array_reconcile(job.array_id)
    job.state, job.state_reason, job.state_message, job.state_changed_at = (
        to,
        reason[:64],
        message,
        now,
    )
    return job


@dataclass(frozen=True)
class Move:
    """One job to move from the state it was read in (`job.state`) to `to`."""

    job: Job
    to: str
    reason: str
    message: str = ""


# Rows a bulk write touches per statement (the id lists stay a reasonable size).
BULK_WRITE_BATCH = 1000


def job_transition_many(moves: list[Move], *, source: str, reconciled: bool = False) -> list[Job]:
    """`job_transition` for many jobs at once (the resync's moves): the same compare-and-set on
    the state each job was read in, in a handful of statements instead of several per job.

    A move the state table forbids, or whose job is no longer in the state read (a reconcile or
    the watcher moved it meanwhile), is left out: nothing written, no event. Returns the jobs
    that moved, updated in place; each gets its JobEvent and its live notice after commit.
    `reconciled` also stamps last_reconciled_at on the jobs moved (the caller just read them
    in the cluster), saving a second write of each row.
    """
    wanted = {m.job.pk: m for m in moves if can_transition(str(m.job.state), str(m.to))}
    moved: list[Move] = []
    for chunk in _chunks(list(wanted), BULK_WRITE_BATCH):
        batch = [wanted[pk] for pk in chunk]
        try:
            moved.extend(_transition_chunk(batch, source=source, reconciled=reconciled))
        except OperationalError as exc:
            if not isinstance(exc.__cause__, DeadlockDetected):
                raise
            # Another multi-row writer (an array cancel) locked some of these rows in another
            # order; nothing of the chunk was written. One job at a time cannot deadlock.
            log.warning("bulk transition deadlocked; moving %d jobs one by one", len(batch))
            moved.extend(_transition_each(batch, source=source, reconciled=reconciled))
    return [m.job for m in moved]


def _transition_each(moves: list[Move], *, source: str, reconciled: bool) -> list[Move]:
    moved = []
    for m in moves:
        try:
            job_transition(
                m.job,
                to=m.to,
                expected_from=m.job.state,
                reason=m.reason,
                message=m.message,
                source=source,
            )
        except InvalidTransition:
            continue  # moved meanwhile: left alone, as in the bulk path
        moved.append(m)
    if reconciled and moved:
        job_record_reconciled([m.job.pk for m in moved])
    return moved


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _transition_chunk(moves: list[Move], *, source: str, reconciled: bool) -> list[Move]:
    now = timezone.now()
    stamp = {"last_reconciled_at": now} if reconciled else {}
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # One statement: lock in id order, compare-and-set, insert the events.
            rows = [(m.job.pk, str(m.job.state), str(m.to), m.reason, m.message) for m in moves]
            ids = move_rows(rows, now=now, source=source, reconciled=reconciled)
            moved = [m for m in moves if m.job.pk in ids]
        else:
            moved = _transition_chunk_orm(moves, now=now, source=source, stamp=stamp)
        _after_moves(moved)
    for m in moved:
        job = m.job
        job.state, job.state_reason, job.state_message = str(m.to), m.reason[:64], m.message
        job.state_changed_at = now
    return moved


def _transition_chunk_orm(moves: list[Move], *, now, source: str, stamp: dict) -> list[Move]:
    """The same moves for other databases (SQLite in the demo): a few statements per chunk."""
    # Lock the rows (in id order: two bulk passes never deadlock) and keep those still in
    # the state read; the locks hold until commit, so the UPDATEs below see that state too.
    current = dict(
        Job.objects.select_for_update()
        .filter(pk__in=[m.job.pk for m in moves])
        .order_by("pk")
        .values_list("pk", "state")
    )
    moved = [m for m in moves if current.get(m.job.pk) == str(m.job.state)]
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for m in moved:
        key = (str(m.job.state), str(m.to), m.reason[:64], m.message)
        groups.setdefault(key, []).append(m.job.pk)
    for (expected, to, reason, message), ids in groups.items():
        Job.objects.filter(pk__in=ids, state=expected).update(
            state=to,
            state_reason=reason,
            state_message=message,
            state_changed_at=now,
            updated_at=now,
            **stamp,
        )
    JobEvent.objects.bulk_create(
        [
            JobEvent(
                job_id=m.job.pk,
                from_state=str(m.job.state),
                to_state=str(m.to),
                reason=m.reason[:64],
                message=m.message,
                source=source,
            )
            for m in moved
        ],
        batch_size=BULK_WRITE_BATCH,
    )
    return moved


def _after_moves(moved: list[Move]) -> None:
    """What follows moves, once committed: live notices, array passes, summaries, notices."""
    publish_job_changes([(m.job.pk, m.job.project_id, str(m.to)) for m in moved])
    arrays = {m.job.array_id for m in moved if str(m.to) in TERMINAL and m.job.array_id is not None}
    for array_id in sorted(arrays):
        enqueue_array_reconcile(array_id)  # finished elements free slots of their array
    for m in moved:
        if str(m.to) in TERMINAL:
            enqueue_gpu_summary(m.job.pk)
        if str(m.to) in NOTIFIED_ENDINGS:
            enqueue_job_end_notice(m.job.pk)
    wake_member_limited([m.job.pk for m in moved if str(m.to) in TERMINAL])


def job_note_status_many(notes: list[tuple[Job, str, str]]) -> int:
    """`job_note_status` for many jobs: (job, reason, message) each, one UPDATE per distinct
    text (and only for jobs whose text changed; a job no longer in the state read keeps its
    text). Returns how many jobs had a new text."""
    groups: dict[tuple[str, str, str], list[Job]] = {}
    for job, reason, message in notes:
        if (job.state_reason, job.state_message) != (reason[:64], message):
            groups.setdefault((str(job.state), reason[:64], message), []).append(job)
    now = timezone.now()
    for (state, reason, message), jobs in groups.items():
        for chunk in _chunks(jobs, BULK_WRITE_BATCH):
            Job.objects.filter(pk__in=[j.pk for j in chunk], state=state).update(
                state_reason=reason, state_message=message, updated_at=now
            )
        for job in jobs:
            job.state_reason, job.state_message = reason, message
    return sum(len(jobs) for jobs in groups.values())


def publish_job_changes(changes: list[tuple[int, int, str]]) -> None:
    """Many `publish_job_change`s (job id, project id, new state) after commit, sent to Redis
    in one pipeline rather than one round trip each."""
    if changes:
        transaction.on_commit(lambda: _publish_many(changes))


def _publish_many(changes: list[tuple[int, int, str]]) -> None:
    from portal import pubsub

    if not pubsub.enabled():
        return
    slugs = dict(
        Project.objects.filter(pk__in={p for _, p, _ in changes}).values_list("pk", "slug")
    )
    pubsub.publish_many(
        [
            (f"portal:jobs:{slugs[project_id]}", {"job": job_id, "state": state})
            for job_id, project_id, state in changes
            if project_id in slugs
        ]
    )


def publish_job_change(job_id: int, state: str, *, project_slug: str | None = None) -> None:
    """After commit, tell live pages (Redis pub/sub channel portal:jobs:<project slug>) that a
    job changed: {"job": id, "state": state}; state "" means "look it up" (its timeline
    changed). Best effort: no Redis configured, or Redis down, costs only liveness (pages also
    poll)."""
    transaction.on_commit(lambda: _publish(job_id, state, project_slug))


def _publish(job_id: int, state: str, project_slug: str | None) -> None:
    from portal import pubsub

    if not pubsub.enabled():
        return
    if project_slug is None or not state:
        row = Job.objects.filter(pk=job_id).values_list("project__slug", "state").first()
        if row is None:
            return
        project_slug, state = project_slug or row[0], state or row[1]
    pubsub.publish(f"portal:jobs:{project_slug}", {"job": job_id, "state": state})


def job_note_status(job: Job, *, reason: str, message: str) -> None:
    """Refresh the why-text of the current state (no transition, no event)."""
    if (job.state_reason, job.state_message) == (reason[:64], message):
        return
    Job.objects.filter(pk=job.pk, state=job.state).update(
        state_reason=reason[:64], state_message=message, updated_at=timezone.now()
    )
    job.state_reason, job.state_message = reason[:64], message


def job_record_event(job: Job, *, reason: str, message: str, source: str) -> JobEvent:
    """An event that is not a state change (cluster objects removed, a blocked apply explained,
    a GPU metrics warning, an XID error): from and to are both the job's stored state."""
    state = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first() or job.state
    event = JobEvent.objects.create(
        job_id=job.pk,
        from_state=state,
        to_state=state,
        reason=reason[:64],
        message=message,
        source=source,
    )
    publish_job_change(job.pk, "")  # the timeline changed
    return event


def job_explain_blocked(job: Job, *, reason: str, message: str, source: str) -> bool:
    """Tell the user why a job cannot go on (the why-text of its state, plus one event the first
    time). Returns True when this was news (the caller logs it for staff then)."""
    if job.state_reason == reason[:64] and job.state_message == message:
        return False
    job_note_status(job, reason=reason, message=message)
    job_record_event(job, reason=reason, message=message, source=source)
    return True


def job_mark_cleaned(job: Job) -> None:
    """The cancelled job's cluster objects are confirmed gone (called under the job's lock)."""
    Job.objects.filter(pk=job.pk).update(cleanup_pending=False, updated_at=timezone.now())
    job.cleanup_pending = False


def job_record_logs(job: Job, *, tail: str) -> None:
    """Keep the last log lines of a finished job before its cluster objects are removed."""
    Job.objects.filter(pk=job.pk).update(logs_tail=tail, updated_at=timezone.now())
    job.logs_tail = tail


def job_record_applied(job: Job) -> None:
    """The manifests were applied for the first time."""
    now = timezone.now()
    Job.objects.filter(pk=job.pk, applied_at__isnull=True).update(
        applied_at=now, last_reconciled_at=now
    )
    job.applied_at = job.applied_at or now


def job_record_reconciled(job_ids: list[int]) -> None:
    Job.objects.filter(pk__in=job_ids).update(last_reconciled_at=timezone.now())


# Sent by name: the tasks module sits above the services and imports them, never the reverse.
RECONCILE_TASK = "jobs.tasks.reconcile_job"


def enqueue_reconcile(job_id: int) -> None:
    """Queue a reconcile once the surrounding transaction commits (never inside it)."""
    transaction.on_commit(lambda: _send(job_id))


ARRAY_RECONCILE_TASK = "jobs.tasks.reconcile_array"


def enqueue_array_reconcile(array_id: int) -> None:
    """Queue one pass over an array (apply held elements, clean up cancelled ones) after commit."""
    transaction.on_commit(lambda: _send(array_id, task=ARRAY_RECONCILE_TASK))


def wake_member_limited(ended_job_ids: list[int]) -> None:
    """Jobs waiting for their submitter's GPU limit (governance) are checked again at once when
    one of that member's jobs ends, not only at the next resync."""
    waiting = jobs_waiting_on_members_of(ended_job_ids)
    for array_id in sorted({array_id for _, array_id in waiting if array_id is not None}):
        enqueue_array_reconcile(array_id)
    for job_id, array_id in waiting:
        if array_id is None:
            enqueue_reconcile(job_id)


GPU_SUMMARY_TASK = "gpumetrics.tasks.summarise_ended_job"


def enqueue_gpu_summary(job_id: int) -> None:
    """After commit, have the ended job's GPU efficiency summary computed now (the periodic
    maintenance task is the backstop if this message is lost)."""
    transaction.on_commit(lambda: _send(job_id, task=GPU_SUMMARY_TASK))


JOB_END_NOTICE_TASK = "notifications.tasks.job_ended"
# A cancellation is the user's own doing (or an admin's, who says so): no message for it.
NOTIFIED_ENDINGS = frozenset({JobState.SUCCEEDED, JobState.FAILED})


def enqueue_job_end_notice(job_id: int) -> None:
    """After commit, have the job's submitter told that it ended (notifications app: their
    e-mail and webhooks, in tasks of their own, so nothing here waits for a slow endpoint)."""
    transaction.on_commit(lambda: _send(job_id, task=JOB_END_NOTICE_TASK))


def _send(job_id: int, task: str = RECONCILE_TASK) -> None:
    # A broker outage must not fail the request that stored the job: the periodic resync
    # picks the job up within one period.
    try:
        celery_app.send_task(task, args=(job_id,))
    except Exception as exc:  # the broker client raises many types; the resync is the safety net
        # A known outage is one line; anything else keeps its traceback.
        known = unavailable_service(exc) is not None
        log.warning(
            "could not enqueue %s(%s): %s; the resync will", task, job_id, exc, exc_info=not known
        )


@dataclass
class SubmitOutcome:
    job: Job | None
    validation: ValidationResult
    manifests: list[dict[str, Any]]  # rendered for dry runs
    events: list[JobEvent] = field(default_factory=list)
    # Advice that does not stop the job (plain env values that look like credentials).
    warnings: list[str] = field(default_factory=list)
    # A dry run's validated job, not stored (job arrays copy it into their elements).
    unsaved: Job | None = None


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


@dataclass(frozen=True)
class CheckpointPlace:
    directory: str = ""
    claim: str = ""
    resume_from: Job | None = None


def _checkpoint_for(
    *,
    project: Project,
    name: str,
    volumes: dict[str, job_mounts.VolumeFacts],
    resume_from: Any,
    env: Any,
    result: ValidationResult,
) -> CheckpointPlace:
    """Where the job keeps checkpoints: /checkpoints/<project>/<job name> on the project's
    checkpoint volume, or, with resume_from, the earlier job's directory (errors go to result)."""
    volume = checkpoint_volume_of(volumes)
    if volume is not None and isinstance(env, dict) and job_mounts.CHECKPOINT_ENV in env:
        result.add(
            "env",
            f"{job_mounts.CHECKPOINT_ENV} is set by the portal (the project has a checkpoint "
            "volume) and cannot be overridden.",
        )
    if resume_from is None:
        if volume is None:
            return CheckpointPlace()
        return CheckpointPlace(
            directory=job_mounts.checkpoint_dir(project.slug, name), claim=volume.claim_name
        )
    earlier = None
    if isinstance(resume_from, int) and not isinstance(resume_from, bool):
        earlier = Job.objects.filter(pk=resume_from, project=project).first()
    if earlier is None:
        result.add("resume_from", f"No job {resume_from!r} in project {project.slug}.")
        return CheckpointPlace()
    if volume is None:
        result.add(
            "resume_from",
            f"Project {project.slug} has no checkpoint volume, so there are no checkpoints to "
            "resume from; a project admin can name one.",
        )
        return CheckpointPlace()
    if not earlier.is_terminal:
        result.add(
            "resume_from",
            f"Job {earlier.name} ({earlier.pk}) is still {earlier.state}; two runs must not "
            "write the same checkpoints. Cancel it or wait until it ends.",
        )
        return CheckpointPlace()
    return CheckpointPlace(
        directory=earlier.checkpoint_dir or job_mounts.checkpoint_dir(project.slug, earlier.name),
        claim=earlier.checkpoint_claim or volume.claim_name,
        resume_from=earlier,
    )


def job_request_from(*, project: Project, data: dict[str, Any]) -> JobRequest:
    """The validation input for request data (the API's, the form's, a saved template's), with
    the project's defaults: one place, so every way in validates the same request."""
    kind = data.get("kind") or ""
    return JobRequest(
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
        backend=data.get("backend") or "",
        default_gang_backend=project.default_gang_backend if kind == "gang" else "",
        gpu_fraction=data.get("gpu_fraction"),
        gpu_memory=data.get("gpu_memory"),
        mounts=data.get("mounts"),
        shm_size=data.get("shm_size") or "",
        termination_grace_seconds=data.get("termination_grace_seconds"),
        secret_files=data.get("secret_files") if data.get("secret_files") is not None else [],
        device=data.get("device") or None,
    )


def job_submit(
    *,
    actor: Any,
    project: Project | str,
    data: dict[str, Any],
    dry_run: bool = False,
    source: str = "api",
    idempotency: IdempotencyKey | None = None,
    resubmit_of: Job | None = None,
    portal_credentials: Iterable[secret_refs.CredentialFacts] = (),
) -> SubmitOutcome:
    """Validate a request and store the job (Submitted), or only render it when dry_run.

    Raises ValidationError ({field: [messages]}) for bad input (unless dry_run, which returns
    the errors), PermissionDenied for a viewer. With `idempotency` the key is stored with the
    job; AlreadySubmitted when a concurrent request with the same key stored its job first
    (callers look for an earlier submission of the key before calling: jobs.idempotency).
    `portal_credentials`: Secrets the portal itself writes for this job (a workspace's token),
    which its env may reference besides the project's credentials; never from a request.
    """
    project = _writable_project(actor, project)
    kind = data.get("kind") or ""
    request = job_request_from(project=project, data=data)
    # The project's credentials are read only for a request that names one (the hot path
    # without references stays one query shorter).
    names_credentials = bool(request.secret_files) or (
        isinstance(request.env, dict) and any(map(secret_refs.is_reference, request.env.values()))
    )
    volumes = volume_facts_for_project(project=project)
    credentials = credential_facts_for_project(project=project) if names_credentials else {}
    credentials.update({c.name: c for c in portal_credentials})
    result = validate_job_request(
        request, pool_facts_for_project(project=project), credentials, volumes=volumes
    )
    warnings = (
        secret_refs.plain_credential_warnings(request.env) if isinstance(request.env, dict) else []
    )

    name = request.name or _generated_name(kind or "job")
    checkpoint = _checkpoint_for(
        project=project,
        name=name,
        volumes=volumes,
        resume_from=data.get("resume_from"),
        env=request.env,
        result=result,
    )
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
            secret_files=list(request.secret_files),
            gpus=r.gpus,
            mig_profile=request.mig_profile if kind == JobKind.MIG else "",
            device_request=dict(request.device or {}),
            replicas=r.replicas,
            pool=GpuPool.objects.get(slug=request.pool) if request.pool else None,
            eligible_pools=list(r.eligible_pools),
            cpu=r.cpu,
            memory=r.memory,
            priority=request.priority,
            max_runtime_minutes=r.max_runtime_minutes,
            backend=r.backend,
            gpu_fraction=r.gpu_fraction,
            gpu_memory=r.gpu_memory,
            mounts=[m.as_dict() for m in r.mounts],
            shm_size=r.shm_size,
            termination_grace_seconds=r.termination_grace_seconds,
            checkpoint_dir=checkpoint.directory,
            checkpoint_claim=checkpoint.claim,
            resume_from=checkpoint.resume_from,
            state=JobState.SUBMITTED,
        )
    if dry_run:
        # Nothing is stored; names show id 0 until a real submission assigns the id.
        manifests = job_manifests(job, job_id=0) if job is not None else []
        return SubmitOutcome(
            job=None, validation=result, manifests=manifests, warnings=warnings, unsaved=job
        )
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
            if idempotency is not None:
                record_submission(user=actor, key=idempotency, job=job)
            audit_services.record(
                "job.resubmit" if resubmit_of is not None else "job.submit",
                actor=actor,
                target=job,
                changes=_audited_request(job),
                detail=" ".join(
                    filter(
                        None,
                        [
                            f"Again of job {resubmit_of.pk}." if resubmit_of is not None else "",
                            f"Resumes job {job.resume_from_id}." if job.resume_from_id else "",
                        ],
                    )
                ),
            )
            enqueue_reconcile(job.pk)
    except IntegrityError as exc:
        # Lost a race: with the same Idempotency-Key (answer with the winner's job), or with an
        # identical name submitted at the same moment.
        raise_if_already_submitted(user=actor, key=idempotency)
        raise ValidationError(
            {"name": [f"A job named {name!r} is already active in project {project.slug}."]}
        ) from exc
    return SubmitOutcome(
        job=job, validation=result, manifests=[], events=[event], warnings=warnings
    )


def _audited_request(job: Job) -> dict[str, Any]:
    # What was asked for, without env values or file contents (they may hold secrets).
    return audit_services.created(
        {
            "kind": job.kind,
            "image": job.image,
            "gpus": job.gpus,
            "replicas": job.replicas,
            "pool": job.pool.slug if job.pool_id else "",
            "priority": job.priority,
            "env_names": sorted(job.env) if isinstance(job.env, dict) else [],
        }
    )


def job_cancel(*, actor: Any, job: Job, source: str = "api") -> Job:
    """Cancel: the job becomes Cancelled now and its cluster objects are deleted after commit.

    Cancelling is allowed from every active state, so the state compared against is the one
    stored right now (re-read if a reconcile moves the job on meanwhile). Raises
    PermissionDenied for a viewer and InvalidTransition for a finished job.
    """
    if not can_write(actor, job.project):
        raise PermissionDenied(f"Your role in project '{job.project.slug}' cannot cancel jobs.")
    return job_stop(
        job,
        reason="Cancelled",
        message=f"cancelled by {getattr(actor, 'username', actor)}",
        source=source,
        actor=actor,
    )


def job_stop(job: Job, *, reason: str, message: str, source: str, actor: Any = None) -> Job:
    """Cancel without a role check, with its own reason: job_cancel after its check, and the
    portal's own stops (an idle workspace; actor None). The job becomes Cancelled and its
    objects are deleted after commit."""
    for _ in range(5):
        current = Job.objects.filter(pk=job.pk).values_list("state", flat=True).first()
        if current is None:
            raise Job.DoesNotExist(f"job {job.pk} does not exist")
        if not can_transition(current, JobState.CANCELLED):
            raise InvalidTransition(job.pk, current, JobState.CANCELLED)
        try:
            with transaction.atomic():
                job_transition(
                    job,
                    to=JobState.CANCELLED,
                    expected_from=current,
                    reason=reason,
                    message=message,
                    source=source,
                )
                Job.objects.filter(pk=job.pk).update(cleanup_pending=True)
                job.cleanup_pending = True
                audit_services.record(
                    "job.cancel",
                    actor=actor,
                    target=job,
                    changes={"state": [current, JobState.CANCELLED]},
                )
                enqueue_reconcile(job.pk)
        except StaleTransition:
            continue  # a reconcile moved it between our read and write; read again
        return job
    raise InvalidTransition(job.pk, job.state, JobState.CANCELLED)


# ---------------------------------------------------------------------------------------------
# Writes of the cluster watcher (jobs/watcher): timeline events, pod records, queue details.


def job_record_cluster_event(
    *,
    job_id: int,
    key: str,
    reason: str,
    message: str,
    occurred_at: Any,
    count: int,
    warning: bool,
    source: str = "cluster",
) -> bool:
    """Add a Kubernetes Event to a job's timeline, or fold a repeat of it into its count.

    `key` is the Event's uid: the same Event seen again (a relist, a replayed watch, a second
    watcher) only raises the count and the time, so nothing is ever written twice. Returns True
    when a new line was added."""
    with transaction.atomic():
        existing = (
            JobEvent.objects.select_for_update().filter(dedupe_key=key[:128]).only("id").first()
        )
        if existing is not None:
            JobEvent.objects.filter(pk=existing.pk, count__lt=count).update(
                count=count, occurred_at=occurred_at, message=message
            )
            return False
        try:
            with transaction.atomic():
                JobEvent.objects.create(
                    job_id=job_id,
                    from_state="",
                    to_state="",
                    reason=reason[:64],
                    message=message,
                    source=source,
                    occurred_at=occurred_at,
                    count=max(1, count),
                    warning=warning,
                    dedupe_key=key[:128],
                )
        except IntegrityError:
            return False  # another writer added it a moment ago
    publish_job_change(job_id, "")
    return True


POD_FIELDS = (
    "job",
    "name",
    "rank",
    "node",
    "phase",
    "started_at",
    "finished_at",
    "gpu_uuids",
    "gpu_indices",
    "gpu_group",
    "exit_code",
    "reason",
    "message",
    "restart_count",
    "deleted",
    "updated_at",
)


def job_record_pods(*, job_id: int, records: list[Any], present_uids: set[str]) -> None:
    """Upsert the job's JobPod rows from jobs.status.PodRecord values; pods of the job that the
    cluster no longer has are marked deleted (kept: they say where the job ran)."""
    if records:
        # One INSERT … ON CONFLICT (uid) DO UPDATE for all of them: the watcher writes pods
        # of many jobs a second, and a transaction with a locking read per pod was most of
        # its database time.
        JobPod.objects.bulk_create(
            [
                JobPod(
                    job_id=job_id,
                    uid=record.uid,
                    name=record.name,
                    rank=record.rank,
                    node=record.node,
                    phase=record.phase,
                    started_at=record.started_at,
                    finished_at=record.finished_at,
                    gpu_uuids=record.gpu_uuids,
                    gpu_indices=record.gpu_indices,
                    gpu_group=getattr(record, "gpu_group", "")[:64],
                    exit_code=record.exit_code,
                    reason=record.reason[:64],
                    message=record.message,
                    restart_count=record.restart_count,
                    deleted=False,
                )
                for record in {r.uid: r for r in records}.values()  # one row per uid
            ],
            update_conflicts=True,
            unique_fields=["uid"],
            update_fields=list(POD_FIELDS),
        )
    JobPod.objects.filter(job_id=job_id, deleted=False).exclude(uid__in=present_uids).update(
        deleted=True
    )


def job_set_queue_info(
    *, job: Job, position: int | None, length: int | None, explanation: str
) -> None:
    """Store where a waiting job stands in its queue and the sentence that explains why."""
    if (job.queue_position, job.queue_length, job.explanation) == (position, length, explanation):
        return
    Job.objects.filter(pk=job.pk).update(
        queue_position=position, queue_length=length, explanation=explanation
    )
    job.queue_position, job.queue_length, job.explanation = position, length, explanation
    publish_job_change(job.pk, job.state, project_slug=job.project.slug)


def job_mark_for_cleanup(job: Job) -> None:
    """A job the portal ended (e.g. out of memory) whose cluster objects must go."""
    Job.objects.filter(pk=job.pk).update(cleanup_pending=True)
    job.cleanup_pending = True
    enqueue_reconcile(job.pk)
