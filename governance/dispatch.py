"""The gate a job passes before the portal sends it to the cluster: its submitter's GPU limit in
the project. Called by the job reconcile (jobs.reconcile.services) and the array dispatcher
(jobs.arrays.reconcile) around their first apply.

Level-triggered: a job over the limit stays Submitted in the portal, saying why, and every
reconcile of it (the periodic resync queues one for each job never applied) checks again, so it
goes as soon as the member's other jobs free enough GPUs. While a limit applies, the check and the
apply hold a lock per (project, member), so two of their jobs reconciled at once cannot both take
the last GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import connection

from governance import member_limits
from governance.selectors import (
    effective_limits,
    member_held_requests,
    pools_of,
    request_of_row,
)
from jobs.models import Job
from jobs.reconcile.locking import FILE_STRIPES, _pg_lock, file_lock, lock_wait_seconds

# High 32 bits of the advisory key: "GPML" (member limit); the low bits mix project and user.
_PG_MEMBER_PREFIX = 0x47504D4C << 32


@dataclass
class Gate:
    """The member's standing in every limited pool the job may use."""

    job: member_limits.GpuRequest
    limits: list[tuple[str, str, int]] = field(default_factory=list)  # (pool, model, limit)
    held: dict[str, list[member_limits.GpuRequest]] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """Why the job must wait in the portal; empty when it may go."""
        for pool, model, limit in self.limits:
            check = member_limits.check_limit(
                pool=pool, gpu_model=model, limit=limit, held=self.held.get(pool, []), job=self.job
            )
            if not check.fits:
                return check.message[0].upper() + check.message[1:] + "."
        return ""

    def copies(self, wanted: int) -> int:
        """How many copies of the job (array elements) may go now."""
        allowed = wanted
        for pool, model, limit in self.limits:
            allowed = min(
                allowed,
                member_limits.copies_that_fit(
                    gpu_model=model,
                    limit=limit,
                    held=self.held.get(pool, []),
                    job=self.job,
                    wanted=wanted,
                ),
            )
        return allowed


@contextmanager
def _member_lock(project_id: int, user_id: int) -> Iterator[None]:
    mixed = (int(project_id) * 1_000_003 + int(user_id)) & 0xFFFFFFFF
    wait = lock_wait_seconds()
    if connection.vendor == "postgresql":
        with _pg_lock(_PG_MEMBER_PREFIX | mixed, wait):
            yield
    else:
        path = Path(settings.VAR_DIR) / "locks" / f"member-{mixed % FILE_STRIPES}.lock"
        with file_lock(path, wait, what=f"member {user_id} of project {project_id}"):
            yield


@contextmanager
def member_limit_gate(job: Job) -> Iterator[Gate]:
    """The job's gate, held (locked) for the block when a limit applies to it. Raises JobBusy
    when another worker keeps the member's lock too long (the caller's task retries)."""
    row = {
        "pool__slug": job.pool.slug if job.pool_id else None,
        "eligible_pools": job.eligible_pools,
        "gpus": job.gpus,
        "replicas": job.replicas,
        "kind": job.kind,
        "mig_profile": job.mig_profile,
    }
    request = request_of_row(row)
    pools = pools_of(row["pool__slug"], row["eligible_pools"])
    limits = effective_limits(project_id=job.project_id, user_id=job.submitter_id, pools=pools)
    if not limits:
        yield Gate(job=request)
        return
    with _member_lock(job.project_id, job.submitter_id):
        held = member_held_requests(
            project_id=job.project_id,
            user_id=job.submitter_id,
            pools=[limit.pool for limit in limits],
            exclude_job_id=job.pk,
        )
        yield Gate(
            job=request,
            limits=[(limit.pool, limit.gpu_model, limit.max_gpus) for limit in limits],
            held=dict(held),
        )
