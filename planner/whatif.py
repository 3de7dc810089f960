"""Quota what-if: replay a period's real jobs through the simulation under other quotas (pure).

Each job of the period is replayed as it was submitted (time, project, size, priority, pools)
and runs as long as it really ran; the simulation decides when it starts under the quotas
given. The comparison per project: median and 90th-percentile wait, GPU-hours served within
the period, GPU-hours on borrowed quota, and preemptions. "Actual" is what the database
recorded for the same jobs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planner import simulation as sim
from planner.estimates import quantile
from quotas.arithmetic import DepartmentCap, QuotaEntry

TAIL_SECONDS = 7 * 24 * 3600  # jobs still waiting at the period's end may start this much later


@dataclass(frozen=True)
class ReplayJob:
    """One real job of the period: the simulation's job plus what really happened."""

    job: sim.SimJob  # submitted_at = real submission, duration_high = real run time
    actual_start: float | None
    actual_end: float | None
    actual_preemptions: int = 0


@dataclass(frozen=True)
class ProjectFigures:
    project: str
    jobs: int
    wait_median: float | None  # seconds
    wait_p90: float | None
    gpu_hours: float
    borrowed_gpu_hours: float
    preemptions: int
    not_started: int  # jobs that did not start within the replay

    def as_dict(self) -> dict:
        return {
            "project": self.project,
            "jobs": self.jobs,
            "wait_median_seconds": _round(self.wait_median),
            "wait_p90_seconds": _round(self.wait_p90),
            "gpu_hours": round(self.gpu_hours, 2),
            "borrowed_gpu_hours": round(self.borrowed_gpu_hours, 2),
            "preemptions": self.preemptions,
            "not_started": self.not_started,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _overlap_hours(start: float, end: float, period: tuple[float, float]) -> float:
    return max(0.0, min(end, period[1]) - max(start, period[0])) / 3600


def figures(
    rows: Iterable[tuple[sim.SimJob, float | None, float | None, int, int]],
    period: tuple[float, float],
) -> dict[str, ProjectFigures]:
    """Per project from (job, start, end, borrowed units, preemptions) rows."""
    waits: dict[str, list[float]] = defaultdict(list)
    hours: dict[str, float] = defaultdict(float)
    borrowed: dict[str, float] = defaultdict(float)
    preempted: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    missing: dict[str, int] = defaultdict(int)
    for job, start, end, borrowed_units, preemptions in rows:
        project = job.project
        preempted[project] += preemptions
        if job.submitted_at >= period[0]:
            counts[project] += 1
            if start is None:
                missing[project] += 1
            else:
                waits[project].append(max(0.0, start - job.submitted_at))
        if start is not None and end is not None:
            overlap = _overlap_hours(start, end, period)
            hours[project] += job.amount * overlap
            borrowed[project] += borrowed_units * overlap
    projects = set(counts) | set(hours)
    return {
        p: ProjectFigures(
            project=p,
            jobs=counts[p],
            wait_median=quantile(waits[p], 0.5) if waits[p] else None,
            wait_p90=quantile(waits[p], 0.9) if waits[p] else None,
            gpu_hours=hours[p],
            borrowed_gpu_hours=borrowed[p],
            preemptions=preempted[p],
            not_started=missing[p],
        )
        for p in sorted(projects)
    }


def replay(
    *,
    jobs: Sequence[ReplayJob],
    pools: tuple[sim.Pool, ...],
    quotas: Sequence[QuotaEntry],
    caps: Sequence[DepartmentCap] = (),
    preemption: sim.Preemption,
    period: tuple[float, float],
) -> dict[str, ProjectFigures]:
    """The period replayed under ``quotas``: figures per project."""
    snapshot = sim.Snapshot(
        now=period[0],
        pools=pools,
        quotas=tuple(quotas),
        caps=tuple(caps),
        jobs=tuple(r.job for r in jobs),
        preemption=preemption,
    )
    horizon = period[1] - period[0] + TAIL_SECONDS
    result = sim.simulate(snapshot, horizon_seconds=horizon)
    rows = []
    for r in jobs:
        outcome = result.outcomes[r.job.key]
        rows.append((r.job, outcome.start, outcome.end, outcome.borrowed, outcome.preemptions))
    return figures(rows, period)


def actual(jobs: Sequence[ReplayJob], period: tuple[float, float]) -> dict[str, ProjectFigures]:
    """What really happened to the same jobs (no borrowing figure: not recorded per job)."""
    return figures(
        ((r.job, r.actual_start, r.actual_end, 0, r.actual_preemptions) for r in jobs), period
    )


def apply_proposal(
    quotas: Sequence[QuotaEntry], proposal: Iterable[QuotaEntry]
) -> list[QuotaEntry]:
    """The quotas with the proposal's rows replacing (or adding) the same project, pool and
    resource; a proposed nominal of 0 with a borrowing limit of 0 removes the quota."""
    by_key = {q.key: q for q in quotas}
    for row in proposal:
        by_key[row.key] = row
    return [q for q in by_key.values() if q.nominal > 0 or q.borrowing_limit != 0]


def compare(
    *,
    jobs: Sequence[ReplayJob],
    pools: tuple[sim.Pool, ...],
    current: Sequence[QuotaEntry],
    proposal: Sequence[QuotaEntry],
    caps: Sequence[DepartmentCap] = (),
    preemption: sim.Preemption,
    period: tuple[float, float],
) -> list[dict]:
    """Per project: actual, the replay under today's quotas, and the replay under the proposal."""
    kwargs = {
        "jobs": jobs,
        "pools": pools,
        "caps": caps,
        "preemption": preemption,
        "period": period,
    }
    today = replay(quotas=current, **kwargs)
    proposed = replay(quotas=apply_proposal(current, proposal), **kwargs)
    real = actual(jobs, period)
    projects = sorted(set(today) | set(proposed) | set(real))
    empty = ProjectFigures("", 0, None, None, 0.0, 0.0, 0, 0)
    return [
        {
            "project": p,
            "actual": real.get(p, empty).as_dict() | {"project": p},
            "current_quotas": today.get(p, empty).as_dict() | {"project": p},
            "proposed_quotas": proposed.get(p, empty).as_dict() | {"project": p},
        }
        for p in projects
    ]
