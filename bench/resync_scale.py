"""Benchmark: one resync pass over 10,000 active jobs in 100 project namespaces.

Seeds its own database (gp_bench_resync, dropped afterwards) with P projects and N applied,
queued jobs, creates each job's batch Job in kubesim (API only, CRDs loaded) over HTTP and sets
its status to one running pod, then runs `jobs.reconcile.services.resync_jobs`
(the periodic task's body,
the sweep included) in this process, twice:

- all-move: every job is Queued in the portal and Running in the cluster, so each of the N jobs
  moves (a compare-and-set write and a timeline event each): the worst case;
- steady: the next pass, nothing changed.

For each it prints the duration, the API calls made (LIST pages per namespace), what it decided,
and its peak Python memory (tracemalloc, measured in a repeat of the same pass), with lists paged
(500 a page); --compare-unpaged adds the same passes with one unpaged LIST per call.
Set PORTAL_PUBSUB_URL to include the live notices (Redis pub/sub) of the moves.

    .venv/bin/python bench/resync_scale.py [--jobs 10000] [--projects 100] [--page-size 500]
        [--compare-unpaged]
"""

import collections
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gp_bench_resync")
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def seed(projects: int, jobs: int):
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from jobs.models import Job
    from quotas.models import GpuPool, ProjectQuota
    from tenants.models import Department, Project

    department = Department.objects.create(slug="bench", name="Bench")
    pool = GpuPool.objects.create(
        slug="bench-h100",
        name="H100",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        node_count=2000,
        gpus_per_node=8,
    )
    user = get_user_model().objects.create(username="bench")
    rows = []
    for i in range(projects):
        project = Project.objects.create(slug=f"rs-{i}", name=f"RS {i}", department=department)
        ProjectQuota.objects.create(project=project, pool=pool, resource="gpu", nominal=10_000)
        rows.append(project)
    now = timezone.now()
    Job.objects.bulk_create(
        [
            Job(
                project=rows[i % projects],
                submitter=user,
                name=f"job-{i}",
                kind="single",
                image=IMAGE,
                command=["python", "train.py"],
                gpus=1,
                pool=pool,
                cpu="8",
                memory="64Gi",
                max_runtime_minutes=1440,
                backend="kueue",
                state="queued",
                applied_at=now,
            )
            for i in range(jobs)
        ],
        batch_size=2000,
    )


def create_cluster_objects(ks) -> float:
    """Each job's batch Job, unsuspended and reporting one ready pod: Running to the resync."""
    from bench.kubesim_api import bulk_create
    from jobs.models import Job
    from jobs.selectors import job_manifests

    by_namespace = collections.defaultdict(list)
    for job in Job.objects.select_related("project", "pool").iterator(chunk_size=2000):
        (manifest,) = job_manifests(job)
        manifest["spec"]["suspend"] = False
        by_namespace[job.project.namespace].append(manifest)
    took = 0.0
    for namespace, bodies in by_namespace.items():
        path = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        took += bulk_create(ks, path, bodies)
        names = [b["metadata"]["name"] for b in bodies]
        took += bulk_patch(ks, [f"{path}/{name}/status" for name in names], RUNNING_STATUS)
    return took


RUNNING_STATUS = {"status": {"active": 1, "ready": 1}}


def bulk_patch(ks, paths: list[str], patch: dict, concurrency: int = 16) -> float:
    """Merge-patch many objects (here: their status subresource) over raw HTTPS; seconds."""
    import asyncio
    import ssl

    import aiohttp
    import orjson

    async def run() -> None:
        context = ssl.create_default_context(cafile=str(ks.ca_file))
        headers = {
            "Authorization": f"Bearer {ks.token}",
            "Content-Type": "application/merge-patch+json",
        }
        iterator = iter(paths)
        body = orjson.dumps(patch)
        connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def worker() -> None:
                for path in iterator:
                    async with session.patch(ks.url + path, data=body, headers=headers) as r:
                        if r.status != 200:
                            raise RuntimeError(f"patch answered {r.status}: {await r.text()}")
                        await r.read()

            await asyncio.gather(*(worker() for _ in range(concurrency)))

    started = time.perf_counter()
    asyncio.run(run())
    return time.perf_counter() - started


def reset_to_queued() -> None:
    """Put every job back to Queued (as seeded), so the next pass moves them all again."""
    from jobs.models import Job

    Job.objects.update(state="queued", state_reason="", state_message="")


class CallCounter:
    """Counts the API calls the portal's kube layer makes, by verb and collection."""

    def __init__(self):
        from portal.kube import apply as kube

        self.kube = kube
        self.original = kube._call_raw
        self.calls: collections.Counter = collections.Counter()
        self.seconds = 0.0

    def __enter__(self):
        def counted(method, path, **kwargs):
            self.calls[(method, path.rsplit("/", 1)[-1])] += 1
            t0 = time.perf_counter()
            try:
                return self.original(method, path, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0

        self.kube._call_raw = counted
        return self

    def __exit__(self, *exc):
        self.kube._call_raw = self.original


def one_pass(page_size: int, *, trace: bool):
    from django.conf import settings

    from jobs.reconcile.services import resync_jobs

    settings.PORTAL_KUBE_LIST_PAGE_SIZE = page_size
    enqueued = []
    if trace:
        tracemalloc.start()
    with CallCounter() as counter:
        t0 = time.perf_counter()
        counts = resync_jobs(enqueue=enqueued.append)
        took = time.perf_counter() - t0
    peak = 0
    if trace:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return took, counter, counts, peak


def measure_pass(label: str, size: int, projects: int, *, before, memory: bool = True) -> dict:
    """Time a pass (calls counted), then repeat it under tracemalloc for the peak memory."""
    before()
    took, counter, counts, _ = one_pass(size, trace=False)
    peak = 0
    if memory:
        before()
        _, _, _, peak = one_pass(size, trace=True)
    calls = counter.calls
    lists = sum(n for (verb, _), n in calls.items() if verb == "GET")
    by_kind = ", ".join(f"{k} {n}" for (_, k), n in sorted(calls.items()))
    print(
        f"{label:>18} (limit {size:>7}): {took:5.2f} s ({counter.seconds:.2f} s waiting for "
        f"the API server), {sum(calls.values())} API calls ({lists} LIST pages = "
        f"{lists / projects:.2f} per namespace: {by_kind}), peak Python memory "
        f"{f'{peak / 2**20:.1f} MiB' if memory else 'not measured'}; {counts}",
        flush=True,
    )
    harness.figure(f"{label} pass", took, "s")
    if memory:
        harness.figure(f"{label} peak Python memory", peak / 2**20, "MiB")
    return counts


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"jobs": 500, "projects": 10}, services=("postgres",)
    )
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument(
        "--skip-memory", action="store_true", help="no tracemalloc repeat (profiling runs)"
    )
    parser.add_argument(
        "--compare-unpaged", action="store_true", help="also run with one unpaged LIST per call"
    )
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    with harness.scratch_database(DATABASE_URL):
        ks = stack.kubesim(no_cluster=True)
        harness.setup_django(database_url=DATABASE_URL, KUBECONFIG=ks.kubeconfig, PORTAL_KUBE_QPS=0)
        from django.conf import settings

        from jobs.models import Job, JobEvent
        from quotas.sync import sync_quota_objects

        seed(args.projects, args.jobs)
        sync_quota_objects()
        created = create_cluster_objects(ks)
        print(
            f"{args.jobs:,} queued jobs in {args.projects} namespaces; their batch Jobs "
            f"created in kubesim, each reporting a running pod, in {created:.1f} s; live "
            f"notices {'on' if settings.PORTAL_PUBSUB_URL else 'off'}",
            flush=True,
        )
        variants = [("paged", args.page_size)]
        if args.compare_unpaged:
            variants.append(("unpaged", 1_000_000))
        for label, size in variants:
            events = JobEvent.objects.count()
            counts = measure_pass(
                f"all-move {label}",
                size,
                args.projects,
                before=reset_to_queued,
                memory=not args.skip_memory,
            )
            moved = Job.objects.filter(state="running").count()
            assert counts["moved"] == args.jobs == moved, (counts, moved)
            # one event per job that moved, in each pass (timed, traced)
            passes = 1 if args.skip_memory else 2
            assert JobEvent.objects.count() - events == passes * args.jobs
            counts = measure_pass(
                f"steady {label}",
                size,
                args.projects,
                before=lambda: None,
                memory=not args.skip_memory,
            )
            assert (counts["moved"], counts["unchanged"]) == (0, args.jobs), counts
        stack.stop(ks)  # before the database goes


if __name__ == "__main__":
    sys.exit(main())
