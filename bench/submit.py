"""Benchmark: submitting single-GPU jobs through the portal, end to end, against one kubesim.

Prints, for N jobs (default 1,000) over P projects (default 10):
  1. the rate from REST POST to the batch Job present in the cluster, API pacing off
     (gunicorn → PostgreSQL → Redis → Celery worker → kubesim), beside the rate of creating the
     same manifests directly with the python client, and their ratio (target ≥ 0.5);
  2. the time to drain the same backlog with the default pacing (20 requests/s, bursts of 40,
     per worker process);
  3. p50/p99 latency of the POST itself (target p99 ≤ 100 ms).

With --sweep it measures job arrays instead: the same N single POSTs (pacing off) beside ONE
POST of an N-element array (`"array": {"count": N}`), each timed from the first POST until all
N batch Jobs are in the cluster, the direct python-client rate, a bare loop of the same
server-side applies with as many in flight as the array pass keeps (PORTAL_ARRAY_APPLY_CONCURRENCY),
the ratio sweep/bare apply (target ≥ 0.9) and sweep/single; then the same sweep at the default
pacing.

Needs PostgreSQL and Redis (as `make test`); uses its own database (gpportal_bench) and Redis
db 12, and starts kubesim (API only, CRDs loaded), gunicorn and Celery workers itself.

    .venv/bin/python bench/submit.py [--jobs 1000] [--projects 10] [--workers 2] [--sweep]
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gpportal_bench")
REDIS_URL = harness.redis_url(12)
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def seed(projects: int):
    """A department, an H100 pool, P projects with generous quota, one member; fresh each run."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from jobs.models import Job, JobArray, JobEvent
    from quotas.models import GpuPool, ProjectQuota
    from tenants.models import Department, Membership, Project

    JobEvent.objects.all().delete()
    Job.objects.all().delete()
    JobArray.objects.all().delete()
    Project.objects.filter(slug__startswith="bench-").delete()
    department, _ = Department.objects.get_or_create(slug="bench", defaults={"name": "Bench"})
    pool, _ = GpuPool.objects.get_or_create(
        slug="bench-h100",
        defaults={
            "name": "Bench H100",
            "gpu_model": "NVIDIA-H100-80GB-HBM3",
            "node_labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "node_count": 1000,
            "gpus_per_node": 8,
        },
    )
    harness.ensure_priority_classes()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    slugs = []
    for i in range(projects):
        project = Project.objects.create(
            slug=f"bench-{i}", name=f"Bench {i}", department=department
        )
        ProjectQuota.objects.create(project=project, pool=pool, resource="gpu", nominal=8000)
        Membership.objects.create(user=user, project=project, role="member")
        slugs.append(project.slug)
    _, token = AuthToken.objects.create(user)
    return slugs, token


def count_jobs(namespaces: list[str]) -> int:
    from portal.kube import apply as kube

    return sum(len(kube.list_owned("batch/v1", "Job", namespace=ns)) for ns in namespaces)


def wait_for_count(namespaces: list[str], target: int, timeout: float = 1800) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if count_jobs(namespaces) >= target:
            return time.monotonic()
        time.sleep(0.25)
    raise RuntimeError(f"only {count_jobs(namespaces)} of {target} Jobs arrived")


def post_jobs(
    base_url: str, token: str, slugs: list[str], count: int, tag: str, clients: int = 1
) -> list[float]:
    """POST `count` jobs from `clients` concurrent keep-alive sessions; the latencies."""
    from concurrent.futures import ThreadPoolExecutor

    import requests

    def run(offset: int) -> list[float]:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        latencies = []
        for i in range(offset, count, clients):
            body = {
                "project": slugs[i % len(slugs)],
                "name": f"{tag}-{i}",
                "kind": "single",
                "image": IMAGE,
                "command": ["python", "train.py"],
                "gpus": 1,
            }
            t0 = time.perf_counter()
            response = session.post(f"{base_url}/api/v1/jobs/", json=body, timeout=30)
            latencies.append(time.perf_counter() - t0)
            if response.status_code != 201:
                raise RuntimeError(f"POST answered {response.status_code}: {response.text[:500]}")
        return latencies

    with ThreadPoolExecutor(clients) as pool:
        return [x for part in pool.map(run, range(clients)) for x in part]


def bare_apply_rate(count: int, slugs: list[str], threads: int) -> float:
    """The array pass's floor: the same manifests server-side applied by the portal's own client
    (portal.kube.apply, pacing off) from `threads` threads, as many as the pass keeps in flight,
    with nothing else: no database, no locks."""
    from concurrent.futures import ThreadPoolExecutor

    from portal.kube import apply as kube

    bodies = _manifests(count, slugs, "bare", 20_000_000)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(kube.apply, bodies))
    return count / (time.perf_counter() - t0)


def direct_rate(count: int, slugs: list[str]) -> float:
    """The same single-GPU manifests created straight with the python client, one thread."""
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    api = k8s.BatchV1Api(k8s_config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
    bodies = _manifests(count, slugs, "direct", 10_000_000)
    t0 = time.perf_counter()
    for job in bodies:
        api.create_namespaced_job(job["metadata"]["namespace"], job)
    return count / (time.perf_counter() - t0)


def _manifests(count: int, slugs: list[str], tag: str, first_id: int) -> list[dict]:
    from jobs.manifests import JobManifestInput, build_job_manifests

    bodies = []
    for i in range(count):
        slug = slugs[i % len(slugs)]
        spec = JobManifestInput(
            job_id=first_id + i,
            name=f"{tag}-{i}",
            project_slug=slug,
            namespace=f"gp-{slug}",
            kind="single",
            backend="kueue",
            image=IMAGE,
            command=("python", "train.py"),
            env={},
            gpus=1,
            mig_resource="",
            replicas=1,
            cpu="8",
            memory="64Gi",
            priority="normal",
            max_runtime_seconds=86400,
        )
        (job,) = build_job_manifests(spec)
        job["metadata"]["labels"]["app.kubernetes.io/managed-by"] = f"bench-{tag}"
        bodies.append(job)
    return bodies


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"jobs": 50, "projects": 2}, services=("postgres", "redis")
    )
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--projects", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--clients", type=int, default=4, help="concurrent POST clients (phase 1)")
    parser.add_argument("--web", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument(
        "--sweep", action="store_true", help="one N-element array POST vs N single POSTs"
    )
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    harness.ensure_database(DATABASE_URL)
    ks = stack.kubesim(no_cluster=True)
    harness.setup_django(
        database_url=DATABASE_URL,
        CELERY_BROKER_URL=REDIS_URL,
        KUBECONFIG=ks.kubeconfig,
        PORTAL_KUBE_QPS=0,  # the bench's own polling must not be paced
    )
    harness.flush_redis(REDIS_URL)
    from quotas.sync import sync_quota_objects

    slugs, token = seed(args.projects)
    sync_quota_objects()
    namespaces = [f"gp-{s}" for s in slugs]

    def env(qps: float) -> dict:
        return harness.portal_env(
            database_url=DATABASE_URL,
            redis_url=REDIS_URL,
            kubeconfig=ks.kubeconfig,
            kube_qps=qps,
            # Persistent database connections, as production should run.
            extra={"CONN_MAX_AGE": "60"},
        )

    web = stack.web(env(0), workers=args.web)
    base_url = web.url

    def worker(qps: float, n: int):
        return stack.worker(
            env(qps), concurrency=args.workers, name=f"bench{n}", label=f"worker-{n}"
        )

    if args.sweep:
        sweep_bench(args, stack, base_url, token, slugs, namespaces, worker)
        return
    # 1. Pacing off: POST → object in the cluster.
    celery = worker(0, 1)
    t0 = time.monotonic()
    post_jobs(base_url, token, slugs, args.jobs, "off", clients=args.clients)
    posted = time.monotonic()
    done = wait_for_count(namespaces, args.jobs)
    portal_rate = args.jobs / (done - t0)
    stack.stop(celery)

    # 1b. Where the time goes: the worker alone draining a queued backlog, pacing off.
    harness.flush_redis(REDIS_URL)
    post_jobs(base_url, token, slugs, args.jobs, "worker", clients=args.clients)
    celery = worker(0, 3)
    t2 = time.monotonic()
    worker_rate = args.jobs / (wait_for_count(namespaces, 2 * args.jobs) - t2)
    stack.stop(celery)
    post_rate = args.jobs / (posted - t0)

    # 2. The same backlog with the default pacing: queue everything, then drain.
    harness.flush_redis(REDIS_URL)
    # One client, sequential: the latency of a POST on its own.
    latencies = post_jobs(base_url, token, slugs, args.jobs, "paced")
    celery = worker(20, 2)
    t1 = time.monotonic()
    drained = wait_for_count(namespaces, 3 * args.jobs) - t1
    stack.stop(celery)
    stack.stop(web)

    direct = direct_rate(args.jobs, slugs)
    ms = sorted(x * 1000 for x in latencies)
    p50 = statistics.median(ms)
    p99 = harness.percentile(ms, 0.99)
    print(
        f"jobs: {args.jobs} single-GPU over {args.projects} projects; "
        f"{args.workers} worker processes; kubesim API only (--no-cluster)"
    )
    print(
        f"portal, pacing off: {portal_rate:8.1f} jobs/s POST→object in cluster "
        f"(POSTs done after {posted - t0:.1f} s)"
    )
    print(
        f"  where the time goes: POSTs accepted at {post_rate:.1f}/s ({args.clients} clients, "
        f"{args.web} web processes, worker alongside); the worker alone drains a queued "
        f"backlog at {worker_rate:.1f}/s"
    )
    print(f"direct python client: {direct:6.1f} objects/s (one thread, create)")
    print(f"ratio portal/direct: {portal_rate / direct:8.2f}   (target ≥ 0.50)")
    print(
        f"drain {args.jobs} queued jobs at default pacing "
        f"(20/s, burst 40 per process): {drained:.1f} s"
    )
    print(
        f"POST latency: p50 {p50:.1f} ms, p99 {p99:.1f} ms over {len(ms)} POSTs "
        f"(target p99 ≤ 100 ms)"
    )
    harness.figure("portal, pacing off", portal_rate, "jobs/s")
    harness.figure("POSTs accepted", post_rate, "/s")
    harness.figure("worker alone drains", worker_rate, "/s")
    harness.figure("direct python client", direct, "objects/s")
    harness.figure("ratio portal/direct", portal_rate / direct)
    harness.figure("drain at default pacing", drained, "s")
    harness.figure("POST latency p50", p50, "ms")
    harness.figure("POST latency p99", p99, "ms")


def post_array(base_url: str, token: str, slug: str, count: int, tag: str) -> float:
    """One POST of a `count`-element array; its latency in seconds."""
    import requests

    body = {
        "project": slug,
        "name": tag,
        "kind": "single",
        "image": IMAGE,
        "command": ["python", "train.py"],
        "gpus": 1,
        "array": {"count": count},
    }
    t0 = time.perf_counter()
    response = requests.post(
        f"{base_url}/api/v1/jobs/",
        json=body,
        headers={"Authorization": f"Token {token}"},
        timeout=120,
    )
    if response.status_code != 201:
        raise RuntimeError(f"POST answered {response.status_code}: {response.text[:500]}")
    return time.perf_counter() - t0


def sweep_bench(args, stack, base_url, token, slugs, namespaces, worker) -> None:
    from tenants.models import Project

    n = args.jobs
    Project.objects.filter(slug__in=slugs).update(max_array_elements=max(n, 1000))
    # 1. N single POSTs, pacing off: first POST → the N-th object in the cluster.
    celery = worker(0, 1)
    t0 = time.monotonic()
    post_jobs(base_url, token, slugs, n, "single", clients=args.clients)
    posted = time.monotonic() - t0
    single_rate = n / (wait_for_count(namespaces, n) - t0)
    # 2. One POST of an N-element array, same worker, pacing off.
    t1 = time.monotonic()
    sweep_post = post_array(base_url, token, slugs[0], n, "sweep-off")
    sweep_s = wait_for_count(namespaces, 2 * n) - t1
    stack.stop(celery)
    # 3. The same array at the default pacing (20 requests/s, bursts of 40, per process).
    harness.flush_redis(REDIS_URL)
    celery = worker(20, 2)
    t2 = time.monotonic()
    paced_post = post_array(base_url, token, slugs[1 % len(slugs)], n, "sweep-paced")
    paced_s = wait_for_count(namespaces, 3 * n) - t2
    stack.stop(celery)
    direct = direct_rate(n, slugs)
    from jobs.arrays.reconcile import apply_concurrency

    threads = apply_concurrency()
    bare = bare_apply_rate(n, slugs, threads)
    sweep_rate = n / sweep_s
    print(
        f"jobs: {n} single-GPU; {args.workers} worker processes, {args.web} web processes, "
        f"{args.clients} POST clients; kubesim API only (--no-cluster); pacing off unless said"
    )
    print(
        f"{n} single POSTs:          {single_rate:8.1f} jobs/s POST→object in cluster "
        f"(POSTs done after {posted:.1f} s)"
    )
    print(
        f"one {n}-element array POST: {sweep_rate:8.1f} jobs/s POST→last object in cluster "
        f"({sweep_s:.1f} s; the POST itself {sweep_post * 1000:.0f} ms)"
    )
    print(f"direct python client:      {direct:8.1f} objects/s (one thread, create)")
    print(
        f"bare apply loop:           {bare:8.1f} objects/s (the same server-side applies, "
        f"{threads} in flight, as the array pass)"
    )
    print(f"ratio sweep/bare apply:    {sweep_rate / bare:8.2f}   (target ≥ 0.90)")
    print(f"ratio sweep/single:        {sweep_rate / single_rate:8.1f}")
    print(f"ratio sweep/direct:        {sweep_rate / direct:8.2f}")
    print(
        f"the same array at the default pacing (20/s, burst 40 per process): {paced_s:.1f} s "
        f"= {n / paced_s:.1f} jobs/s (the POST {paced_post * 1000:.0f} ms)"
    )
    harness.figure("single POSTs", single_rate, "jobs/s")
    harness.figure("one array POST", sweep_rate, "jobs/s")
    harness.figure("direct python client", direct, "objects/s")
    harness.figure("bare apply loop", bare, "objects/s")
    harness.figure("ratio sweep/bare apply", sweep_rate / bare)
    harness.figure("ratio sweep/single", sweep_rate / single_rate)
    harness.figure("ratio sweep/direct", sweep_rate / direct)
    harness.figure("array at the default pacing", paced_s, "s")


if __name__ == "__main__":
    sys.exit(main())
