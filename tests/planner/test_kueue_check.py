"""The what-if's replay checked against kubesim's Kueue.

kubesim's admission engine (kubesim/controllers/kueue/engine.py, Kueue v0.19's classical
scheduler over plain data) replays the same generated month as the planner's simulation: the
same jobs arrive at the same times and run as long; the engine admits them cycle by cycle. With
one priority (nobody is evicted) every job must start at the same moment, and the what-if's
figures must be the same: with each project alone in its department, and with two projects
borrowing each other's idle quota, where the order of Kueue's rounds (one job per ClusterQueue,
those within their guarantee first) decides who gets the room.
"""

from __future__ import annotations

import heapq
import random

import pytest

from planner import simulation as sim
from planner import whatif
from quotas.arithmetic import QuotaEntry

ke = pytest.importorskip("kubesim.controllers.kueue.engine")

POOL, GPU, NORMAL = "h100", "gpu", 100
DAY = 24 * 3600.0


def month(seed: int, projects: list[tuple[str, str, int]]) -> list[sim.SimJob]:
    """A month of jobs: bursts on working days, 1 to 4 GPUs, 20 min to 10 h."""
    rng = random.Random(seed)
    jobs = []
    for day in range(28):
        if day % 7 >= 5:
            continue
        for _burst in range(rng.randint(1, 3)):
            at = day * DAY + rng.uniform(8, 18) * 3600
            for _ in range(rng.randint(2, 8)):
                project, department, nominal = rng.choice(projects)
                run = rng.choice([20, 60, 120, 240, 600]) * 60.0 * rng.uniform(0.7, 1.3)
                jobs.append(
                    sim.SimJob(
                        key=f"j{len(jobs)}",
                        project=project,
                        department=department,
                        pools=(POOL,),
                        resource=GPU,
                        amount=min(nominal, rng.choice([1, 1, 2, 4])),
                        priority=NORMAL,
                        submitted_at=round(at + rng.uniform(0, 600)),
                        duration_high=round(run),
                    )
                )
    return jobs


def simulation_starts(jobs, quotas, capacity) -> dict[str, float]:
    snapshot = sim.Snapshot(
        now=0.0,
        pools=(sim.Pool(POOL, {GPU: capacity}),),
        quotas=tuple(quotas),
        jobs=tuple(jobs),
    )
    result = sim.simulate(snapshot, horizon_seconds=40 * DAY)
    return {key: outcome.start for key, outcome in result.outcomes.items()}


def kueue_starts(jobs, quotas) -> dict[str, float]:
    """The same jobs through kubesim's Kueue engine: ClusterQueues as the portal writes them
    (one per project, cohort = department, BestEffortFIFO), a cycle after every change."""
    engine = ke.KueueEngine()
    engine.set_config(
        [
            ke.ClusterQueue(
                name=q.project,
                cohort=q.department,
                groups=[ke.ResourceGroup(covered=[GPU], flavors=[POOL])],
                quotas={(POOL, GPU): ke.ResourceQuota(q.nominal, q.borrowing_limit)},
                within_cluster_queue="LowerPriority",
                reclaim_within_cohort="LowerPriority",
                borrow_within_cohort="LowerPriority",
                borrow_max_priority=NORMAL,
            )
            for q in quotas
        ],
        [ke.Flavor(POOL)],
    )
    arrivals = sorted(jobs, key=lambda j: (j.submitted_at, j.key))
    by_key = {job.key: job for job in jobs}
    ends: list[tuple[float, str]] = []
    starts: dict[str, float] = {}
    index = 0
    while index < len(arrivals) or ends:
        now = min(
            arrivals[index].submitted_at if index < len(arrivals) else float("inf"),
            ends[0][0] if ends else float("inf"),
        )
        while ends and ends[0][0] <= now:
            _, key = heapq.heappop(ends)
            engine.remove(("ns", key))
        while index < len(arrivals) and arrivals[index].submitted_at <= now:
            job = arrivals[index]
            engine.upsert(
                ke.Workload(
                    namespace="ns",
                    name=job.key,
                    uid=job.key,
                    cluster_queue=job.project,
                    local_queue=job.project,
                    priority=job.priority,
                    timestamp=job.submitted_at,
                    podsets=[ke.PodSet("main", 1, {GPU: job.amount})],
                    sequence=index,
                )
            )
            index += 1
        while True:
            admitted = [d for d in engine.schedule(now) if d.kind == "admit"]
            if not admitted:
                break
            for decision in admitted:
                key = decision.workload.name
                starts[key] = now
                heapq.heappush(ends, (now + by_key[key].duration_high, key))
    return starts


def p90_waits(jobs, starts) -> dict[str, float | None]:
    rows = [(job, starts.get(job.key), None, 0, 0) for job in jobs]
    figures = whatif.figures(rows, (0.0, 28 * DAY))
    return {project: f.wait_p90 for project, f in figures.items()}


ALONE = [("vision", "lab", 4), ("speech", "voice", 8), ("bio", "life", 4)]


def quotas_of(projects, **nominal) -> list[QuotaEntry]:
    return [
        QuotaEntry(project, department, POOL, GPU, nominal.get(project, n), None)
        for project, department, n in projects
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_without_borrowing_every_job_starts_when_kueue_starts_it(seed):
    jobs = month(seed, ALONE)
    quotas = quotas_of(ALONE)
    ours = simulation_starts(jobs, quotas, capacity=16)
    kueue = kueue_starts(jobs, quotas)
    assert len(kueue) == len(jobs)
    assert ours == kueue
    # and so the what-if's figures: a quota rise for vision shortens its p90 wait in both
    raised = quotas_of(ALONE, vision=8)
    before = p90_waits(jobs, kueue)["vision"]
    after_ours = p90_waits(jobs, simulation_starts(jobs, raised, capacity=20))["vision"]
    after_kueue = p90_waits(jobs, kueue_starts(jobs, raised))["vision"]
    assert after_ours == after_kueue
    assert after_kueue < before


SHARED = [("vision", "lab", 4), ("speech", "lab", 8), ("bio", "life", 4)]


@pytest.mark.parametrize("seed", [3, 4])
def test_with_borrowing_every_job_starts_when_kueue_starts_it(seed):
    # vision and speech share a department: they borrow each other's idle quota.
    jobs = month(seed, SHARED)
    for quotas, capacity in ((quotas_of(SHARED), 16), (quotas_of(SHARED, vision=8), 20)):
        kueue = kueue_starts(jobs, quotas)
        assert len(kueue) == len(jobs)
        assert simulation_starts(jobs, quotas, capacity=capacity) == kueue


def test_with_borrowing_the_direction_agrees():
    shared = SHARED
    jobs = month(3, shared)
    for quotas in (quotas_of(shared), quotas_of(shared, vision=8)):
        assert len(kueue_starts(jobs, quotas)) == len(jobs)
    before = {
        "ours": p90_waits(jobs, simulation_starts(jobs, quotas_of(shared), capacity=16)),
        "kueue": p90_waits(jobs, kueue_starts(jobs, quotas_of(shared))),
    }
    raised = quotas_of(shared, vision=8)
    after = {
        "ours": p90_waits(jobs, simulation_starts(jobs, raised, capacity=20)),
        "kueue": p90_waits(jobs, kueue_starts(jobs, raised)),
    }
    for side in ("ours", "kueue"):
        assert after[side]["vision"] < before[side]["vision"]
    # bio is alone in its department: the same there, borrowing or not around it
    assert before["ours"]["bio"] == before["kueue"]["bio"]
