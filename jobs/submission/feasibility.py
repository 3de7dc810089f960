"""The submit form's live feasibility line: will this request start now, queue, or never run?

Pure: it takes the submission's own validation result (jobs.validation, so "can never run"
comes from the very rules the API applies) and the project's quota use per pool and resource
as the cluster's queues report it (jobs.models.QueueUsage rows, read by the caller). Whether a
job really starts is Kueue's or Volcano's decision; this line says what the quota numbers say.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.validation import FULL_GPU, PoolFacts, ValidationResult

# Field errors that mean the request can never be admitted (as opposed to a typo to fix).
NEVER_FIELDS = ("project", "pool", "gpus", "mig_profile", "replicas", "cpu", "memory")

FITS, BORROWS, QUEUES, NEVER, INCOMPLETE = "fits", "borrows", "queues", "never", "incomplete"


@dataclass(frozen=True)
class Feasibility:
    level: str  # fits | borrows | queues | never | incomplete
    text: str


def _units(count: int, resource: str) -> str:
    if resource == FULL_GPU:
        return f"{count} GPU" + ("" if count == 1 else "s")
    return f"{count} {resource} MIG slice" + ("" if count == 1 else "s")


def _plain(resource: str) -> str:
    return "GPUs" if resource == FULL_GPU else f"{resource} slices"


def feasibility(
    *,
    result: ValidationResult,
    kind: str,
    mig_profile: str,
    pools: list[PoolFacts],
    in_use: dict[tuple[str, str], int],
) -> Feasibility:
    """One sentence for the request. `in_use` maps (pool slug, resource) to what the project
    uses now; a missing entry counts as nothing in use."""
    if not result.ok:
        for name in NEVER_FIELDS:
            if name in result.errors:
                return Feasibility(NEVER, f"Can never run: {result.errors[name][0]}")
        return Feasibility(INCOMPLETE, "Fill in the highlighted fields to see whether it fits.")
    r = result.resolved
    resource = mig_profile if kind == "mig" else FULL_GPU
    needed = (1 if kind == "mig" else r.gpus) * r.replicas
    if r.gpu_fraction is not None:
        needed = float(r.gpu_fraction)  # a KAI fraction counts as that part of a GPU
    facts = {p.slug: p for p in pools}
    eligible = [facts[slug] for slug in r.eligible_pools if slug in facts]
    if not eligible:
        return Feasibility(NEVER, "Can never run: the project has no quota that fits this job.")
    # Best first: a pool where it fits within the guarantee, then by borrowing.
    best_borrow: tuple[PoolFacts, int, int, int] | None = None
    queue_notes = []
    for pool in eligible:
        used = in_use.get((pool.slug, resource), 0)
        guaranteed = pool.guaranteed.get(resource, 0)
        maximum = pool.maximum.get(resource, 0)
        if used + needed <= guaranteed:
            return Feasibility(
                FITS,
                f"Fits now in pool {pool.slug}: the project uses {used} of its {guaranteed} "
                f"guaranteed {_plain(resource)}.",
            )
        if used + needed <= maximum and best_borrow is None:
            best_borrow = (pool, used, guaranteed, maximum)
        free_guarantee = max(0, guaranteed - used)
        borrowable = max(0, maximum - max(used, guaranteed))
        if free_guarantee == 0:
            head = f"the project's {guaranteed} guaranteed {_plain(resource)}"
            head += " are in use" if guaranteed != 1 else " is in use"
        else:
            head = f"{free_guarantee} of the project's {guaranteed} guaranteed are free"
        queue_notes.append(f"in pool {pool.slug} {head} and {borrowable} can be borrowed")
    if best_borrow is not None:
        pool, used, guaranteed, maximum = best_borrow
        borrow = used + needed - max(used, guaranteed)
        return Feasibility(
            BORROWS,
            f"Fits now in pool {pool.slug} by borrowing {_units(borrow, resource)} that the "
            f"department's other projects leave idle (the project uses {used} of its "
            f"{guaranteed} guaranteed); they may take them back, preempting the job.",
        )
    return Feasibility(
        QUEUES,
        f"Will queue: it needs {_units(needed, resource)}; " + "; ".join(queue_notes) + ".",
    )
