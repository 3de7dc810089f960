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

Several applies are in flight at once (PORTAL_ARRAY_APPLY_CONCURRENCY, one thread pool per
pass), and on PostgreSQL the next batch is locked, re-read, built and queued while the current
one is still being applied: the API server always has work from this pass, and the database
round trips and manifest builds of a batch overlap with the applies of the one before. Each
batch keeps its own locks until it is recorded. When a member GPU limit applies (the gate holds
the member's lock and counts what is applied), batches go one at a time, as before.
"""

import dataclasses
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from django.conf import settings
from django.db import connection
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
# A pass stops after this long and queues the next one (the task's soft limit is 120 s).
PASS_SECONDS = 60.0


def apply_concurrency() -> int:
    """Applies in flight per array pass: they overlap the API server's latency. The client's
    pool (PORTAL_KUBE_POOL_SIZE, default 8) keeps their connections alive; the token bucket
    (PORTAL_KUBE_QPS) still paces them."""
    return max(1, int(getattr(settings, "PORTAL_ARRAY_APPLY_CONCURRENCY", 8)))


def _apply_one(manifests: list[dict[str, Any]]) -> Exception | None:
    try:
        reconcile._apply_all(manifests)
    except (PermanentKubeError, RetryableKubeError) as exc:
        return exc
    return None


@dataclasses.dataclass
class _Batch:
    """A batch whose applies are queued: its elements (locked, re-read fresh), their applies'
    futures, and its locks, held until it is recorded."""

    jobs: list[Job]
    futures: list[Future]
    locks: ExitStack


def _start_batch(jobs: list[Job], counts: dict[str, int], pool: ThreadPoolExecutor) -> _Batch:
    """Lock a batch of held elements, keep those still held, build and queue their applies."""
    # Elements differ only in id, name and env: the pool lookups are done once per batch.
    base = manifest_input_for_job(jobs[0])
    locks = ExitStack()
    try:
        granted = locks.enter_context(job_locks([j.pk for j in jobs]))
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
        futures = [
            pool.submit(
                _apply_one,
                build_job_manifests(
                    dataclasses.replace(base, job_id=j.pk, name=j.name, env=dict(j.env or {}))
                ),
            )
            for j in todo
        ]
    except BaseException:
        locks.close()
        raise
    return _Batch(todo, futures, locks)


def _finish_batch(batch: _Batch, counts: dict[str, int]) -> RetryableKubeError | None:
    """Wait for a batch's applies and record them under its locks, then release them. Returns
    the first retryable error (the elements it hit stay held for the next pass)."""
    with batch.locks:
        outcomes = [future.result() for future in batch.futures]
        applied = [j for j, err in zip(batch.jobs, outcomes, strict=True) if err is None]
        retry: RetryableKubeError | None = None
        now = timezone.now()
        Job.objects.filter(pk__in=[j.pk for j in applied], applied_at__isnull=True).update(
            applied_at=now, last_reconciled_at=now
        )
        counts["applied"] += len(applied)
        for job, err in zip(batch.jobs, outcomes, strict=True):
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


def _apply_batch(
    jobs: list[Job], counts: dict[str, int], pool: ThreadPoolExecutor
) -> RetryableKubeError | None:
    """Apply a batch of held elements under their locks, start to finish."""
    return _finish_batch(_start_batch(jobs, counts, pool), counts)


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
    pipelined = connection.vendor == "postgresql"  # file locks (SQLite) stripe: one at a time
    with ThreadPoolExecutor(apply_concurrency(), thread_name_prefix="array-apply") as pool:
        flight: list[_Batch] = []  # the batch being applied while the next one is prepared
        try:
            _fill(array, counts, deadline, pool, flight, pipelined)
        finally:
            # On an error: what was queued is still waited for, recorded and unlocked.
            for batch in flight:
                try:
                    if retry := _finish_batch(batch, counts):
                        log.warning("array %s: %s", array.pk, retry)
                except Exception:
                    batch.locks.close()
                    log.exception("array %s: recording a batch failed", array.pk)


def _fill(
    array: JobArray,
    counts: dict[str, int],
    deadline: float,
    pool: ThreadPoolExecutor,
    flight: list[_Batch],
    pipelined: bool,
) -> None:
    elements = Job.objects.filter(array=array, superseded=False)
    checked_backend = False

    def finish_flight() -> None:
        while flight:
            retry = _finish_batch(flight.pop(0), counts)
            if retry is not None:
                raise retry

    while True:
        if time.monotonic() >= deadline:
            finish_flight()
            enqueue_array_reconcile(array.pk)  # time is up: the next pass goes on
            counts["continued"] = 1
            return
        queued = [j.pk for b in flight for j in b.jobs]  # applied, not yet recorded
        in_cluster = elements.filter(applied_at__isnull=False, state__in=sorted(ACTIVE)).count()
        free = array.parallelism - in_cluster - len(queued)
        if free <= 0:
            finish_flight()
            return
        batch = list(
            elements.filter(
                applied_at__isnull=True, state=JobState.SUBMITTED, cleanup_pending=False
            )
            .exclude(pk__in=queued)
            .select_related("project", "pool")
            .order_by("array_index")[: min(free, BATCH)]
        )
        if not batch:
            finish_flight()
            return
        if not checked_backend:
            reconcile._check_backend(batch[0])  # ResourceNotServed: the task retries
            checked_backend = True
        # The submitter's GPU limit in the project (governance) may let fewer go.
        with member_limit_gate(batch[0]) as gate:
            if gate.limits and flight:
                empty = None  # a limit appeared mid-pass: record what is in flight, then count
            else:
                empty = _gated_batch(batch, gate, counts, pool, flight, pipelined)
        if empty is None:
            finish_flight()
            continue
        if empty:
            raise JobBusy(f"array {array.pk}: every element of the batch is busy")
        if counts.get("limited"):
            finish_flight()
            return


def _gated_batch(
    batch: list[Job],
    gate: Any,
    counts: dict[str, int],
    pool: ThreadPoolExecutor,
    flight: list[_Batch],
    pipelined: bool,
) -> bool:
    """Apply (or queue) as much of a batch as the member's gate allows; True when none of it
    could be taken (every element busy)."""
    allowed = gate.copies(len(batch))
    if allowed == 0:
        job_note_status_many([(j, MEMBER_LIMIT_REASON, gate.message) for j in batch])
        counts["limited"] = len(batch)
        return False
    if gate.limits or not pipelined:
        # The gate counts what is recorded as applied: nothing may be in flight (the caller
        # saw to that), and this batch is recorded before the gate is let go.
        started = _start_batch(batch[:allowed], counts, pool)
        if retry := _finish_batch(started, counts):
            raise retry
        return not started.jobs
    started = _start_batch(batch[:allowed], counts, pool)
    flight.append(started)
    # Record the batch before while this one's applies run.
    while len(flight) > 1:
        if retry := _finish_batch(flight.pop(0), counts):
            raise retry
    return not started.jobs


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
