"""Writes for job arrays and sweeps: submit (all elements in one transaction), cancel the rest,
resubmit failed elements. The shape and the per-element env are in jobs/arrays.py; applying the
elements to the cluster (in batches, at most `parallelism` at once) in jobs/array_reconcile.py."""

import copy
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import created, record
from jobs import mounts as job_mounts
from jobs.arrays import shape as arrays
from jobs.idempotency import IdempotencyKey, raise_if_already_submitted, record_submission
from jobs.models import Job, JobArray, JobEvent
from jobs.services import (
    _generated_name,
    _writable_project,
    enqueue_array_reconcile,
    job_submit,
    publish_job_change,
)
from jobs.states import ACTIVE, JobState
from jobs.validation import NAME_RE
from tenants.models import Project
from tenants.permissions import can_write

BULK_BATCH = 500


class NothingToDo(Exception):
    """Cancel with no active element, or resubmit with no failed one (the API answers 409)."""


ARRAY_KEYS = ("array", "sweep", "parallelism")


def _element_rows(
    template: Job, array: JobArray, spec: arrays.ArraySpec, user_env: dict[str, str]
) -> list[Job]:
    rows = []
    for index, params in enumerate(arrays.element_params(spec)):
        job = copy.copy(template)
        job.name = arrays.element_name(array.name, index)
        job.env = {**user_env, **arrays.element_env(index, spec.count, params)}
        job.array = array
        job.array_index = index
        job.params = params
        if template.checkpoint_dir and template.resume_from_id is None:
            # Each element checkpoints into its own directory (named after the element).
            job.checkpoint_dir = job_mounts.checkpoint_dir(array.project.slug, job.name)
        rows.append(job)
    return rows


def array_submit(
    *,
    actor: Any,
    project: Project | str,
    data: dict[str, Any],
    source: str = "api",
    idempotency: IdempotencyKey | None = None,
) -> JobArray:
    """Validate an array or sweep request and store the array and all its elements (Submitted)
    in one transaction; one task then applies them. ValidationError ({field: [messages]}) for
    bad input, PermissionDenied for a viewer. With `idempotency` the key is stored with the
    array (AlreadySubmitted when a concurrent request with the same key won)."""
    project = _writable_project(actor, project)
    data = dict(data)
    array_req, sweep, parallelism = (data.pop(key, None) for key in ARRAY_KEYS)
    spec, errors = arrays.parse_array_request(
        array=array_req, sweep=sweep, parallelism=parallelism, limit=project.max_array_elements
    )
    user_env = data.get("env") if isinstance(data.get("env"), dict) else {}
    clashes = arrays.reserved_env_clashes(user_env)
    if clashes:
        errors.setdefault("env", []).append(
            f"{', '.join(clashes)}: set by the portal for each array element "
            f"({arrays.INDEX_ENV}, {arrays.COUNT_ENV}, {arrays.SWEEP_ENV_PREFIX}<NAME>)."
        )
    if spec is None or errors:
        raise ValidationError(errors)
    name = data.get("name") or _generated_name(data.get("kind") or "array")
    longest = arrays.longest_array_name(spec.count)
    if not NAME_RE.match(name) or len(name) > longest:
        raise ValidationError(
            {
                "name": [
                    f"{name!r} is not a valid array name: lower-case letters, digits and '-', "
                    f"at most {longest} characters so that '{name}-{spec.count - 1}' names "
                    "the last element."
                ]
            }
        )
    # The job rules (image, quota, MIG, env...) once, on the last element (its name and env are
    # the longest); every element is a copy of that validated job.
    last = spec.count - 1
    params = arrays.grid_params(spec.grid)[-1] if spec.grid else {}
    probe = {
        **data,
        "name": arrays.element_name(name, last),
        "env": {**user_env, **arrays.element_env(last, spec.count, params)},
    }
    outcome = job_submit(actor=actor, project=project, data=probe, dry_run=True, source=source)
    if not outcome.validation.ok:
        raise ValidationError(outcome.validation.errors)
    template = outcome.unsaved
    try:
        with transaction.atomic():
            array = JobArray.objects.create(
                project=project,
                submitter=actor,
                name=name,
                count=spec.count,
                parallelism=spec.parallelism,
                sweep=spec.grid,
            )
            jobs = Job.objects.bulk_create(
                _element_rows(template, array, spec, user_env), batch_size=BULK_BATCH
            )
            message = f"submitted by {getattr(actor, 'username', actor)} as element of {name}"
            JobEvent.objects.bulk_create(
                [
                    JobEvent(
                        job_id=job.pk,
                        from_state="",
                        to_state=JobState.SUBMITTED,
                        reason="Submitted",
                        message=message,
                        source=source,
                    )
                    for job in jobs
                ],
                batch_size=BULK_BATCH,
            )
            if idempotency is not None:
                record_submission(user=actor, key=idempotency, array=array)
            record(
                "array.submit",
                actor=actor,
                target=array,
                changes=created(
                    {
                        "count": spec.count,
                        "parallelism": spec.parallelism,
                        "sweep": sorted(spec.grid) if spec.grid else [],
                        "image": template.image,
                        "gpus": template.gpus,
                    }
                ),
                detail=f"{spec.count} elements",
            )
            enqueue_array_reconcile(array.pk)
            publish_job_change(jobs[0].pk, JobState.SUBMITTED, project_slug=project.slug)
    except IntegrityError as exc:
        raise_if_already_submitted(user=actor, key=idempotency)
        raise ValidationError(
            {
                "name": [
                    f"A job named like {name}-<index> is already active in project "
                    f"{project.slug}; choose another array name."
                ]
            }
        ) from exc
    return array


def _check_write(actor: Any, array: JobArray, what: str) -> None:
    if not can_write(actor, array.project):
        raise PermissionDenied(f"Your role in project '{array.project.slug}' cannot {what}.")


def array_cancel(*, actor: Any, array: JobArray, source: str = "api") -> int:
    """Cancel every element still active, in one transaction; returns how many.

    The elements' rows are locked (SELECT ... FOR UPDATE) while their state is compared and
    written, so a concurrent job_transition either finished before (we see its state) or finds
    the job Cancelled and writes nothing. Elements never applied need no cluster cleanup; the
    others are cleaned up by one array task. Raises NothingToDo when nothing is active.
    """
    _check_write(actor, array, "cancel jobs")
    now = timezone.now()
    message = f"cancelled by {getattr(actor, 'username', actor)} (the whole array)"
    with transaction.atomic():
        rows = list(
            Job.objects.select_for_update()
            .filter(array=array, superseded=False, state__in=sorted(ACTIVE))
            .order_by("pk")
            .values_list("pk", "state", "applied_at")
        )
        if not rows:
            raise NothingToDo(f"Array {array.name} has no active element left to cancel.")
        common = {
            "state": JobState.CANCELLED,
            "state_reason": "Cancelled",
            "state_message": message,
            "state_changed_at": now,
            "updated_at": now,
        }
        applied = [pk for pk, _, applied_at in rows if applied_at is not None]
        held = [pk for pk, _, applied_at in rows if applied_at is None]
        # A held element the dispatcher is applying right now is cleaned up by it: it reads
        # the state again after every apply (jobs/array_reconcile.py).
        Job.objects.filter(pk__in=applied).update(cleanup_pending=True, **common)
        Job.objects.filter(pk__in=held).update(**common)
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job_id=pk,
                    from_state=state,
                    to_state=JobState.CANCELLED,
                    reason="Cancelled",
                    message=message,
                    source=source,
                )
                for pk, state, _ in rows
            ],
            batch_size=BULK_BATCH,
        )
        record(
            "array.cancel",
            actor=actor,
            target=array,
            detail=f"{len(rows)} active elements cancelled",
        )
        if applied:
            enqueue_array_reconcile(array.pk)
        publish_job_change(rows[0][0], JobState.CANCELLED, project_slug=array.project.slug)
    return len(rows)


def array_resubmit_failed(
    *, actor: Any, array: JobArray, index: int | None = None, source: str = "api"
) -> list[Job]:
    """Submit each failed element again (or only the one at `index`) as a new Job with the same
    name, index, params and env; the failed row is kept (superseded) for its history. Raises
    NothingToDo when there is no failed element to resubmit."""
    _check_write(actor, array, "submit jobs")
    with transaction.atomic():
        failed = Job.objects.select_for_update().filter(
            array=array, superseded=False, state=JobState.FAILED
        )
        if index is not None:
            failed = failed.filter(array_index=index)
        old = list(failed.order_by("array_index"))
        if not old:
            what = "no element" if index is None else f"element {index} is not one that"
            raise NothingToDo(f"Array {array.name}: {what} failed; there is nothing to resubmit.")
        Job.objects.filter(pk__in=[j.pk for j in old]).update(superseded=True)
        fresh = []
        for job in old:
            new = copy.copy(job)
            new.pk = new.id = None
            new._state.adding = True
            new.state = JobState.SUBMITTED
            new.state_reason = new.state_message = new.logs_tail = new.explanation = ""
            new.applied_at = new.last_reconciled_at = None
            new.queue_position = new.queue_length = None
            new.cleanup_pending = new.superseded = False
            new.submitter = actor
            fresh.append(new)
        jobs = Job.objects.bulk_create(fresh, batch_size=BULK_BATCH)
        by = getattr(actor, "username", actor)
        JobEvent.objects.bulk_create(
            [
                JobEvent(
                    job_id=new.pk,
                    from_state="",
                    to_state=JobState.SUBMITTED,
                    reason="Resubmitted",
                    message=f"resubmitted by {by}: element {new.array_index} of {array.name} "
                    f"failed as job {was.pk}",
                    source=source,
                )
                for new, was in zip(jobs, old, strict=True)
            ]
        )
        record(
            "array.resubmit_failed",
            actor=actor,
            target=array,
            changes={"jobs": [[was.pk for was in old], [new.pk for new in jobs]]},
            detail=f"{len(jobs)} failed elements resubmitted"
            + (f" (element {index})" if index is not None else ""),
        )
        enqueue_array_reconcile(array.pk)
        publish_job_change(jobs[0].pk, JobState.SUBMITTED, project_slug=array.project.slug)
    return jobs
