"""What a member holds in a pool, against their GPU limit there. Pure functions.

A member holds the GPUs of their jobs the portal has sent to the cluster and that have not ended
(queued in the cluster, admitted or running). They are counted as quotas.arithmetic counts a
pool's quotas: whole GPUs one each, MIG slices as the GPUs that must be partitioned to hold them
(per profile, slices ÷ slices per GPU, rounded up: 3 × 1g.10gb on an H100 hold one GPU).
A job not pinned to one pool counts in every pool it may run in (the safe side).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from quotas.arithmetic import mig_gpus_needed

MEMBER_LIMIT_REASON = "MemberGpuLimit"


@dataclass(frozen=True)
class GpuRequest:
    """One job's request in a pool: whole GPUs (over all its pods), or MIG slices."""

    gpus: int = 0
    mig_profile: str = ""
    slices: int = 0


def request_of(*, gpus: int, pods: int, mig_profile: str) -> GpuRequest:
    if mig_profile:
        return GpuRequest(mig_profile=mig_profile, slices=max(1, pods))
    return GpuRequest(gpus=gpus * max(1, pods))


def gpus_held(gpu_model: str, requests: Iterable[GpuRequest]) -> int:
    """GPUs these requests hold together in a pool of `gpu_model`.

    >>> gpus_held("NVIDIA-H100-80GB-HBM3", [GpuRequest(gpus=2), GpuRequest(
    ...     mig_profile="1g.10gb", slices=3)])
    3
    """
    full = 0
    slices: dict[str, int] = defaultdict(int)
    for request in requests:
        if request.mig_profile:
            slices[request.mig_profile] += request.slices
        else:
            full += request.gpus
    return full + mig_gpus_needed(gpu_model, slices)


@dataclass(frozen=True)
class LimitCheck:
    """A member's standing against one limit, for one more job."""

    pool: str
    limit: int
    held: int  # GPUs held now
    with_job: int  # GPUs held if the job were sent too

    @property
    def fits(self) -> bool:
        return self.with_job <= self.limit

    @property
    def message(self) -> str:
        """Why the job waits (empty when it fits)."""
        if self.fits:
            return ""
        needs = self.with_job - self.held
        text = (
            f"you hold {self.held} of your {self.limit}-GPU limit in this project "
            f"(pool {self.pool}); this job needs {needs} more"
        )
        if needs > self.limit:
            return text + ", more than the limit itself: ask a project admin to raise it"
        return text + ", and is sent to the cluster when enough of your jobs end"


def check_limit(
    *, pool: str, gpu_model: str, limit: int, held: Iterable[GpuRequest], job: GpuRequest
) -> LimitCheck:
    held = list(held)
    return LimitCheck(
        pool=pool,
        limit=limit,
        held=gpus_held(gpu_model, held),
        with_job=gpus_held(gpu_model, [*held, job]),
    )


def copies_that_fit(
    *, gpu_model: str, limit: int, held: Iterable[GpuRequest], job: GpuRequest, wanted: int
) -> int:
    """How many copies of `job` (elements of an array) can be sent without passing the limit."""
    current = list(held)
    count = 0
    while count < wanted and gpus_held(gpu_model, [*current, job]) <= limit:
        current.append(job)
        count += 1
    return count
