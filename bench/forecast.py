"""Benchmark: the start-time forecast for a pool with 500 running and 1,000 queued jobs.

Two figures, each the median of --repeat calls in this process:
  1. the simulation alone (planner.simulation.forecast on a snapshot in memory), in wall time
     and in its thread's CPU time (the one to read on a busy machine), and
  2. the whole forecast the submit form asks for (planner.selectors.forecast_for_unsaved): the
     snapshot read from PostgreSQL (active jobs, quotas, pools, priority classes, the
     submitters' run history) and the simulation.
The load: one pool of 125 nodes × 8 H100 (1,000 GPUs), 3 departments with 12 projects whose
quotas add up to the pool, 500 running jobs (1, 2, 4 or 8 GPUs, a few 2 × 8 gangs, various
priorities, ends spread over the next 12 h) and 1,000 queued ones, 20 users with 10 finished
runs each of every job shape (the history the estimates use).

    .venv/bin/python bench/forecast.py [--running 500] [--queued 1000] [--repeat 30] [--keep]

Uses its own database (gp_bench_forecast, dropped afterwards unless --keep).
"""

import os
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gp_bench_forecast")
SIZES = [1, 1, 2, 2, 4, 8]
PRIORITIES = ["normal", "normal", "normal", "low", "high"]
IMAGES = ["nvcr.io/nvidia/pytorch:24.08-py3", "ghcr.io/lab/train:3"]


def seed(running: int, queued: int):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from jobs.models import Job, JobEvent
    from jobs.states import JobState
    from quotas.models import GpuPool, ProjectQuota
    from tenants.models import Department, Membership, Project

    rng = random.Random(7)
    harness.ensure_priority_classes()
    pool = GpuPool.objects.create(
        slug="fc-h100",
        name="H100",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_count=125,
        gpus_per_node=8,
    )
    users = [get_user_model().objects.create(username=f"fc-{i}") for i in range(20)]
    projects = []
    for d in range(3):
        department = Department.objects.create(slug=f"fc-d{d}", name=f"D{d}")
        for p in range(4):
            project = Project.objects.create(
                slug=f"fc-d{d}-p{p}", name=f"P{d}{p}", department=department
            )
            ProjectQuota.objects.create(
                project=project, pool=pool, resource="gpu", nominal=83, borrowing_limit=None
            )
            projects.append(project)
    for user in users:
        for project in projects:
            Membership.objects.create(user=user, project=project, role="member")
    now = timezone.now()

    def make(state, index, created, changed):
        gpus = rng.choice(SIZES)
        gang = rng.random() < 0.03
        job = Job(
            project=rng.choice(projects),
            submitter=rng.choice(users),
            name=f"fc-{state}-{index}",
            kind="gang" if gang else "single",
            image=rng.choice(IMAGES),
            gpus=8 if gang else gpus,
            replicas=2 if gang else 1,
            pool=pool,
            eligible_pools=[pool.slug],
            cpu="8",
            memory="64Gi",
            priority=rng.choice(PRIORITIES),
            max_runtime_minutes=rng.choice([60, 240, 720]),
            backend="kueue",
            state=state,
        )
        job._times = (created, changed)
        return job

    rows = []
    for i in range(running):
        started = now - timedelta(minutes=rng.randint(1, 600))
        rows.append(make(JobState.RUNNING, i, started - timedelta(minutes=5), started))
    for i in range(queued):
        created = now - timedelta(minutes=rng.randint(1, 120))
        rows.append(make(JobState.QUEUED, i, created, created))
    # History: finished runs of every shape for every user (what the estimates read).
    finished = []
    for user in users:
        for image in IMAGES:
            for gpus in sorted(set(SIZES)):
                for _k in range(10):
                    end = now - timedelta(hours=rng.randint(1, 500))
                    job = make(JobState.SUCCEEDED, len(finished), end, end)
                    job._times = (end - timedelta(hours=4), end)
                    job.submitter, job.image, job.gpus, job.kind, job.replicas = (
                        user,
                        image,
                        gpus,
                        "single",
                        1,
                    )
                    job.name = f"fc-done-{len(finished)}"
                    job._run_minutes = rng.randint(10, 200)
                    finished.append(job)
    Job.objects.bulk_create(rows + finished, batch_size=2000)
    # The insert stamps the auto_now_add fields with "now": put the intended times back.
    for job in rows + finished:
        job.created_at, job.state_changed_at = job._times
    Job.objects.bulk_update(rows + finished, ["created_at", "state_changed_at"], batch_size=2000)
    events = [
        JobEvent(
            job=job,
            from_state=JobState.QUEUED,
            to_state=JobState.RUNNING,
            reason="Running",
            source="bench",
        )
        for job in finished
    ]
    JobEvent.objects.bulk_create(events, batch_size=2000)
    for event, job in zip(events, finished, strict=True):
        event.created_at = job._times[1] - timedelta(minutes=job._run_minutes)
    JobEvent.objects.bulk_update(events, ["created_at"], batch_size=2000)
    return projects[0], users[0], pool


def median_ms(call, repeat: int, clock=time.perf_counter) -> float:
    """Median milliseconds of ``call`` by ``clock``: wall time (perf_counter) or the CPU time of
    this thread (thread_time), which other work on a busy machine inflates far less."""
    call()  # warm-up
    times = []
    for _ in range(repeat):
        started = clock()
        call()
        times.append((clock() - started) * 1000)
    return statistics.median(times)


def measure(args, stack) -> int:
    with harness.scratch_database(DATABASE_URL, keep=args.keep):
        harness.setup_django(database_url=DATABASE_URL)
        from jobs.models import Job
        from planner import selectors
        from planner import simulation as sim

        project, user, pool = seed(args.running, args.queued)
        probe = Job(
            project=project,
            submitter=user,
            name="probe",
            kind="single",
            image="nvcr.io/nvidia/pytorch:24.08-py3",
            gpus=4,
            replicas=1,
            pool=pool,
            eligible_pools=[pool.slug],
            priority="normal",
            max_runtime_minutes=240,
        )
        snapshot, history, inputs = selectors.cluster_snapshot(extra_submitters=[user.pk])
        running = sum(1 for j in snapshot.jobs if j.started_at is not None)
        print(
            f"load: {running} running and {len(snapshot.jobs) - running} queued jobs, "
            f"{sum(p.capacity['gpu'] for p in snapshot.pools)} GPUs, "
            f"{len(snapshot.quotas)} project quotas",
            flush=True,
        )
        sim_job = selectors.probe_job(probe, inputs=inputs, history=history)
        result = sim.forecast(snapshot, sim_job)
        print(f"forecast: {result.text}", flush=True)
        expected = len(sim.expected_arrivals(snapshot, sim_job, 24 * 3600))
        print(
            f"expected submissions ahead of the probe (the late end): {expected} "
            f"({len(snapshot.recent)} jobs submitted in the last window)",
            flush=True,
        )
        pure = median_ms(lambda: sim.forecast(snapshot, sim_job), args.repeat)
        harness.figure("simulation (forecast of one job)", pure, "ms")
        cpu = median_ms(lambda: sim.forecast(snapshot, sim_job), args.repeat, time.thread_time)
        harness.figure("simulation, CPU time", cpu, "ms")
        # The same snapshot expecting no later submissions (the range before they were modelled).
        plain = replace(snapshot, arrival_window=0.0)
        print(f"forecast expecting no later submissions: {sim.forecast(plain, sim_job).text}")
        bare = median_ms(lambda: sim.forecast(plain, sim_job), args.repeat, time.thread_time)
        harness.figure("simulation expecting no submissions, CPU time", bare, "ms")
        whole = median_ms(lambda: selectors.forecast_for_unsaved(probe), args.repeat)
        harness.figure("forecast with the snapshot read from the database", whole, "ms")
        load = os.getloadavg()[0]
        print(f"simulation alone: {pure:.1f} ms wall (median of {args.repeat}, load {load:.1f})")
        print(f"simulation alone: {cpu:.1f} ms CPU (median of {args.repeat})")
        print(f"forecast with the database reads: {whole:.1f} ms (median of {args.repeat})")
    return 0


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"running": 100, "queued": 200, "repeat": 5}, services=("postgres",)
    )
    parser.add_argument("--running", type=int, default=500)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--keep", action="store_true")
    args = harness.parse_args(parser)
    return harness.run(args, measure)


if __name__ == "__main__":
    sys.exit(main())
