"""One pass over a job array: clean up cancelled elements, then apply held elements up to the
array's parallelism, in batches, with the process's one API client (keep-alive connections).

The only path that applies an array element for the first time (a reconcile of a held element
hands it here, see
jobs.reconcile.services). Safe twice concurrently: the array's lock makes one worker
count and fill its slots; each batch takes its elements' job locks in one round
trip (jobs.reconcile.locking.job_locks) and re-reads their state under them, so an element
cancelled or taken by another worker meanwhile is skipped; after applying, the batch is read
once more and what was cancelled during the apply is deleted at once (as
jobs.reconcile.services does for a single job).
"""

import dataclasses
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db.models import Q
from django.utils import timezone

from governance.dispatch import member_limit_gate
from governance.member_limits import MEMBER_LIMIT_REASON
from jobs.manifests import build_job_manifests
from jobs.models import Job, JobArray
from jobs.reconcile import services as reconcile
from jobs.reconcile.locking import JobBusy, array_lock, job_locks
from jobs.selectors import manifest_input_for_job
from jobs.services import enqueue_array_reconcile, job_note_status_many
from jobs.states import ACTIVE, JobState
from portal.kube.apply import PermanentKubeError, RetryableKubeError

log = logging.getLogger(__name__)

BATCH = 100
# Concurrent applies within a batch: overlaps the API server's latency; the client's pool
# (PORTAL_KUBE_POOL_SIZE, default 8) keeps their connections alive, the token bucket paces them.
APPLY_THREADS = 4
# A pass stops after this long and queues the next one (the task's soft limit is 120 s).
PASS_SECONDS = 60.0


def _apply_one(manifests: list[dict[str, Any]]) -> Exception | None:
    try:
        reconcile._apply_all(manifests)
    except (PermanentKubeError, RetryableKubeError) as exc:
        return exc
    return None


def _apply_batch(jobs: list[Job], counts: dict[str, int]) -> RetryableKubeError | None:
    """Apply a batch of held elements under their locks. Returns the first retryable error (the
    elements it hit stay held for the next pass)."""
    # Elements differ only in id, name and env: the pool lookups are done once per batch.
    base = manifest_input_for_job(jobs[0])
    with job_locks([j.pk for j in jobs]) as granted:
        counts["busy"] += len(jobs) - len(granted)
        fresh = set(
            Job.objects.filter(
                pk__in=granted,
                state=JobState.SUBMITTED,
                applied_at__isnull=True,
                cleanup_pending=False,
            ).values_list("pk", flat=True)
        )
        todo = [j for j in jobs if j.pk in fresh]
        bodies = [
            build_job_manifests(
                dataclasses.replace(base, job_id=j.pk, name=j.name, env=dict(j.env or {}))
            )
            for j in todo
        ]
        with ThreadPoolExecutor(APPLY_THREADS) as pool:
            outcomes = list(pool.map(_apply_one, bodies))
        applied = [j for j, err in zip(todo, outcomes, strict=True) if err is None]
        retry: RetryableKubeError | None = None
        now = timezone.now()
        Job.objects.filter(pk__in=[j.pk for j in applied], applied_at__isnull=True).update(
            applied_at=now, last_reconciled_at=now
        )
        counts["applied"] += len(applied)
        for job, err in zip(todo, outcomes, strict=True):
            if isinstance(err, RetryableKubeError):
                retry = retry or err
            elif isinstance(err, PermanentKubeError):
                reconcile._fail(job, "Rejected", f"the cluster rejected the job: {err.message}")
                counts["rejected"] += 1
        # Cancelled while we applied: delete what was just applied.
        for job in (
            Job.objects.select_related("project")
            .filter(pk__in=[j.pk for j in applied])
            .filter(Q(cleanup_pending=True) | Q(state=JobState.CANCELLED))
        ):
            reconcile._clean_up(job)
            counts["cleaned"] += 1
    return retry


def _clean_cancelled(array: JobArray, counts: dict[str, int]) -> None:
    ids = list(
        Job.objects.filter(array=array, cleanup_pending=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for start in range(0, len(ids), BATCH):
        with job_locks(ids[start : start + BATCH]) as granted:
            counts["busy"] += min(BATCH, len(ids) - start) - len(granted)
            for job in Job.objects.select_related("project").filter(
                pk__in=granted, cleanup_pending=True
            ):
                reconcile._clean_up(job)
                counts["cleaned"] += 1


def _fill_slots(array: JobArray, counts: dict[str, int], deadline: float) -> None:
    elements = Job.objects.filter(array=array, superseded=False)
    checked_backend = False
    while time.monotonic() < deadline:
        in_cluster = elements.filter(applied_at__isnull=False, state__in=sorted(ACTIVE)).count()
        free = array.parallelism - in_cluster
        if free <= 0:
            return
        batch = list(
            elements.filter(
                applied_at__isnull=True, state=JobState.SUBMITTED, cleanup_pending=False
            )
            .select_related("project", "pool")
            .order_by("array_index")[: min(free, BATCH)]
        )
        if not batch:
            return
        if not checked_backend:
            reconcile._check_backend(batch[0])  # ResourceNotServed: the task retries
            checked_backend = True
        before = counts["applied"] + counts["rejected"]
        # The submitter's GPU limit in the project (governance) may let fewer go.
        with member_limit_gate(batch[0]) as gate:
            allowed = gate.copies(len(batch))
            if allowed == 0:
                notes = [(j, MEMBER_LIMIT_REASON, gate.message) for j in batch]
                job_note_status_many(notes)
                counts["limited"] = len(batch)
                return
            retry = _apply_batch(batch[:allowed], counts)
        if retry is not None:
            raise retry
        if counts["applied"] + counts["rejected"] == before:
            raise JobBusy(f"array {array.pk}: every element of the batch is busy")
    enqueue_array_reconcile(array.pk)  # time is up: the next pass goes on
    counts["continued"] = 1


def array_reconcile(*, array_id: int) -> dict[str, int]:
    """One pass over the array, holding its lock. Returns counts of what was done.

    Raises RetryableKubeError (cluster unreachable, backend missing) and JobBusy (the array or
    every element of a batch is held by another worker); the task retries both, and the
    periodic resync queues a pass for every array with held elements anyway."""
    counts = {"applied": 0, "rejected": 0, "cleaned": 0, "busy": 0}
    started = time.monotonic()
    with array_lock(array_id):
        array = JobArray.objects.select_related("project").filter(pk=array_id).first()
        if array is None:
            return counts
        _clean_cancelled(array, counts)
        _fill_slots(array, counts, started + PASS_SECONDS)
    if counts["applied"] or counts["cleaned"]:
        log.info("array %s: %s", array_id, counts)
    return counts
