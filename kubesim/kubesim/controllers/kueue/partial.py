"""Kueue's PartialAdmission (beta, on by default in v0.19): a workload whose pod set has a
`minCount` (a Job's `kueue.x-k8s.io/job-min-parallelism` annotation) and that does not fit with its
full count is admitted with the largest count between minCount and count that fits, found by a
binary search as upstream's scheduler does. The Job then runs with `parallelism` reduced to the
admitted count, and gets its original parallelism back when it is suspended again.

Kept apart from the scheduling engine: `retry_partial()` takes a cycle's decisions and turns the
pending ones that a smaller count would fit into admissions.
"""

from __future__ import annotations

from kubesim.controllers.kueue.engine import FIT, Decision

GROUP = "kueue.x-k8s.io"
ORIGINAL_PARALLELISM_ANNOTATION = f"{GROUP}/job-original-parallelism"


def _min_counts(obj: dict) -> list[int | None]:
    return [
        (int(ps["minCount"]) if ps.get("minCount") is not None else None)
        for ps in (obj.get("spec") or {}).get("podSets") or []
    ]


def _largest_fit(engine, wl, cq, index: int, low: int, high: int):
    """Binary search for the largest count in [low, high) of pod set `index` that fits:
    (count, assignment) or None."""
    best = None
    original = wl.podsets[index].count
    lo, hi = low, high - 1
    try:
        while lo <= hi:
            middle = (lo + hi) // 2
            wl.podsets[index].count = middle
            assignment = engine.assign(wl, cq)
            if assignment.mode == FIT:
                best = (middle, assignment)
                lo = middle + 1
            else:
                hi = middle - 1
    finally:
        wl.podsets[index].count = original
    return best


def retry_partial(controller, decisions: list[Decision], now: float) -> list[Decision]:
    """The cycle's decisions with pending partial-admission candidates admitted where they fit."""
    engine = controller.engine
    out: list[Decision] = []
    for decision in decisions:
        if decision.kind != "pending":
            out.append(decision)
            continue
        wl = decision.workload
        obj = controller.workloads.get(wl.key)
        cq = engine.cluster_queues.get(wl.cluster_queue)
        minimums = _min_counts(obj) if obj is not None else []
        if cq is None or not any(m is not None for m in minimums):
            out.append(decision)
            continue
        admitted = None
        for index, minimum in enumerate(minimums):
            if minimum is None or index >= len(wl.podsets):
                continue
            found = _largest_fit(engine, wl, cq, index, minimum, wl.podsets[index].count)
            if found is not None:
                admitted = (index, *found)
                break
        if admitted is None:
            out.append(decision)
            continue
        index, count, assignment = admitted
        wl.podsets[index].count = count
        engine.reserve(wl, assignment, now)
        out.append(Decision(wl, "admit", assignment=assignment))
    return out


def start_patch(job: dict, workload: dict, patch: dict) -> None:
    """Add to Kueue's start patch of a Job: parallelism = the admitted count when reduced."""
    spec = job.get("spec") or {}
    admission = (workload.get("status") or {}).get("admission") or {}
    assignments = admission.get("podSetAssignments") or []
    if not assignments or assignments[0].get("count") is None:
        return
    count = int(assignments[0]["count"])
    parallelism = spec.get("parallelism")
    if parallelism is None or count >= int(parallelism):
        return
    patch.setdefault("spec", {})["parallelism"] = count
    patch.setdefault("metadata", {}).setdefault("annotations", {})[
        ORIGINAL_PARALLELISM_ANNOTATION
    ] = str(parallelism)


def stop_patch(job: dict, patch: dict) -> None:
    """Add to Kueue's stop patch: the parallelism the Job had before a partial admission."""
    annotations = (job.get("metadata") or {}).get("annotations") or {}
    original = annotations.get(ORIGINAL_PARALLELISM_ANNOTATION)
    if original is None:
        return
    patch.setdefault("spec", {})["parallelism"] = int(original)
    patch.setdefault("metadata", {}).setdefault("annotations", {})[
        ORIGINAL_PARALLELISM_ANNOTATION
    ] = None
