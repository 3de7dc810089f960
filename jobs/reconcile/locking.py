"""One reconcile of a job at a time: a lock held across read → apply → record.

PostgreSQL: a session-level advisory lock keyed by the job id. It is released when the holder's
connection ends, so a SIGKILLed worker holds nothing; a waiter gives up after `wait` seconds
(lock_timeout) and the task retries, so a stuck holder delays work but never blocks a worker.

Other databases (SQLite in the demo): an exclusive flock on a file under PORTAL_VAR_DIR/locks,
striped by job id. It excludes the threads and processes of one machine, which is all a SQLite
portal has; two jobs sharing a stripe only wait for each other.
"""

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from django.conf import settings
from django.db import OperationalError, connection, transaction

log = logging.getLogger(__name__)

# High 32 bits of the advisory key: "GPJB", so other advisory locks in the database never clash.
_PG_KEY_PREFIX = 0x47504A42 << 32
FILE_STRIPES = 64
_POLL_SECONDS = 0.02


class JobBusy(Exception):
    """Another worker holds the job's lock; try again shortly."""


def lock_wait_seconds() -> float:
    return float(getattr(settings, "PORTAL_JOB_LOCK_WAIT_SECONDS", 15.0))


def advisory_key(job_id: int) -> int:
    return _PG_KEY_PREFIX | (int(job_id) & 0xFFFFFFFF)


@contextmanager
def job_lock(job_id: int, *, wait: float | None = None) -> Iterator[None]:
    """Hold the job's lock for the block. wait=0 tries once; JobBusy when not granted in time."""
    wait = lock_wait_seconds() if wait is None else max(0.0, wait)
    if connection.vendor == "postgresql":
        with _pg_lock(advisory_key(job_id), wait):
            yield
    else:
        path = Path(settings.VAR_DIR) / "locks" / f"job-{int(job_id) % FILE_STRIPES}.lock"
        with file_lock(path, wait, what=f"job {job_id}"):
            yield


@contextmanager
def _pg_lock(key: int, wait: float) -> Iterator[None]:
    with connection.cursor() as cursor:
        # Uncontended (the common case): one round trip.
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        granted = cursor.fetchone()[0]
        if not granted and wait <= 0:
            raise JobBusy(f"advisory lock {key} is held")
        if not granted:
            try:
                # A savepoint, so a timeout never poisons a surrounding transaction.
                with transaction.atomic():
                    cursor.execute(
                        "SELECT set_config('lock_timeout', %s, true)", [f"{int(wait * 1000)}ms"]
                    )
                    cursor.execute("SELECT pg_advisory_lock(%s)", [key])
            except OperationalError as exc:
                raise JobBusy(f"advisory lock {key} still held after {wait:g}s") from exc
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        except Exception:  # a broken connection released the lock with the session anyway
            log.warning("could not release advisory lock %s", key, exc_info=True)


@contextmanager
def file_lock(path: Path, wait: float, *, what: str = "") -> Iterator[None]:
    """An exclusive flock on `path` (created if needed), polled until `wait` seconds pass."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise JobBusy(f"{what or path} is locked") from None
                time.sleep(_POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# High 32 bits of an array's advisory key: "GPAR" (one dispatcher per array at a time).
_PG_ARRAY_PREFIX = 0x47504152 << 32


@contextmanager
def array_lock(array_id: int, *, wait: float | None = None) -> Iterator[None]:
    """Hold a job array's lock (its dispatcher: slots counted and filled by one worker)."""
    wait = lock_wait_seconds() if wait is None else max(0.0, wait)
    if connection.vendor == "postgresql":
        with _pg_lock(_PG_ARRAY_PREFIX | (int(array_id) & 0xFFFFFFFF), wait):
            yield
    else:
        path = Path(settings.VAR_DIR) / "locks" / f"array-{int(array_id) % FILE_STRIPES}.lock"
        with file_lock(path, wait, what=f"array {array_id}"):
            yield


@contextmanager
def job_locks(job_ids: list[int]) -> Iterator[set[int]]:
    """Try the locks of many jobs at once, without waiting; yields the ids granted (the others
    are busy with another worker). PostgreSQL: one round trip to take them, one to release."""
    if not job_ids:
        yield set()
        return
    if connection.vendor == "postgresql":
        keys = {advisory_key(job_id): int(job_id) for job_id in job_ids}
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT k FROM unnest(%s::bigint[]) AS k WHERE pg_try_advisory_lock(k)",
                [list(keys)],
            )
            granted = [row[0] for row in cursor.fetchall()]
        try:
            yield {keys[key] for key in granted}
        finally:
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_advisory_unlock(k) FROM unnest(%s::bigint[]) AS k", [granted]
                    )
            except Exception:  # a broken connection released them with the session anyway
                log.warning("could not release %d advisory locks", len(granted), exc_info=True)
        return
    with ExitStack() as stack:
        held: set[int] = set()
        for job_id in job_ids:
            try:
                stack.enter_context(job_lock(job_id, wait=0))
            except JobBusy:
                continue  # busy, or its file stripe is already ours: next round
            held.add(int(job_id))
        yield held
