"""Benchmark: the portal's CPU per job, from the POST to the job recorded Running, by process.

The honest figure for the submission path: the CPU seconds every process of the portal spent
(gunicorn, the Celery worker, the cluster watcher, and the run's own PostgreSQL and Redis, all
pinned to the portal's half of the CPUs) from the first POST until the portal's database shows
every job Running, divided by the jobs. Measured twice on the same stack:

  single: N single-GPU jobs POSTed one by one (--clients concurrent clients);
  array:  ONE POST of an N-element array (parallelism N).

Each process's share is printed too; it stands for a stage of the path: gunicorn = the request,
its validation and the row writes as the client side of them; Redis = the task hand-off; the
worker = manifest build and server-side apply; the watcher = the state writes after the cluster
moved the job; PostgreSQL = the database's own work for all of them. Targets: ≤ 15 ms per
single-POST job, ≤ 3 ms per array element.

kubesim (CRDs, --nodes × 8 H100 at speed 1; the jobs `sleep` for an hour and keep their GPUs)
runs on the other half of the CPUs; its CPU seconds are printed beside.

    .venv/bin/python bench/job_cpu.py [--jobs 200] [--clients 4] [--nodes 51]
"""

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gp_bench_jobcpu")
REDIS_URL = harness.redis_url(12)
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
H100 = "NVIDIA-H100-80GB-HBM3"
CLUSTER = f"""apiVersion: kubesim.dev/v1
kind: Cluster
pools:
  - name: gpu-h100
    count: {{nodes}}
    instanceType: hgx-h100-8g
    cpu: "192"
    memory: 2Ti
    gpu:
      model: {H100}
      count: 8
"""
# Processes of the portal, in the order printed, and the stage each stands for.
STAGES = {
    "web": "request, validation, row writes",
    "Redis": "task hand-off",
    "worker": "manifest build, apply",
    "watcher": "watcher writes",
    "PostgreSQL": "database",
}


def seed(nodes: int, elements: int):
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from quotas.models import GpuPool, ProjectQuota
    from quotas.sync import sync_quota_objects
    from tenants.models import Department, Membership, Project

    harness.ensure_priority_classes()
    department = Department.objects.create(slug="cpu", name="CPU")
    pool = GpuPool.objects.create(
        slug="h100",
        name="H100",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=nodes,
        gpus_per_node=8,
    )
    project = Project.objects.create(
        slug="cpu", name="CPU", department=department, max_array_elements=max(elements, 1000)
    )
    ProjectQuota.objects.create(project=project, pool=pool, resource="gpu", nominal=nodes * 8)
    user = get_user_model().objects.create(username="cpu-bench")
    Membership.objects.create(user=user, project=project, role="member")
    report = sync_quota_objects()
    assert not report.errors, report.errors
    return project.slug, AuthToken.objects.create(user)[1]


def body(slug: str, name: str) -> dict:
    return {
        "project": slug,
        "name": name,
        "kind": "single",
        "image": IMAGE,
        "command": ["sleep", "3600"],
        "gpus": 1,
    }


def post(base: str, token: str, payload: dict, session=None) -> None:
    import requests

    response = (session or requests).post(
        f"{base}/api/v1/jobs/",
        json=payload,
        headers={"Authorization": f"Token {token}"},
        timeout=300,
    )
    if response.status_code != 201:
        raise RuntimeError(f"POST answered {response.status_code}: {response.text[:500]}")


def wait_running(prefix: str, count: int, timeout: float) -> float:
    from jobs.models import Job

    def done() -> bool:
        return Job.objects.filter(name__startswith=prefix, state="running").count() >= count

    harness.wait_until(done, timeout=timeout, what=f"{count} jobs {prefix}* Running", interval=0.1)
    return time.monotonic()


def idle_rates(stack: harness.Stack, seconds: float) -> dict[str, float]:
    """CPU seconds per second each portal process spends with nothing to do (heartbeats,
    watch bookmarks, the worker's polling): what a phase's wall time costs without any job."""
    before = stack.cpu_by_process()
    time.sleep(seconds)
    after = stack.cpu_by_process()
    return {name: max(0.0, (after[name] - before.get(name, 0.0)) / seconds) for name in after}


def measured(stack: harness.Stack, label: str, count: int, action, idle: dict[str, float]) -> None:
    """Run `action`, then report the portal's CPU per job by process and kubesim's beside;
    `idle` (CPU per second with nothing to do) is also taken off, in a second figure."""
    before, kubesim_before = stack.cpu_by_process(), stack.cpu_by_side().get("kubesim", 0.0)
    t0 = time.monotonic()
    action()
    wall = time.monotonic() - t0
    after, kubesim_after = stack.cpu_by_process(), stack.cpu_by_side().get("kubesim", 0.0)
    shares = {
        name: after.get(name, 0.0) - before.get(name, 0.0)
        for name in after
        if name in STAGES or name in before
    }
    shares = {name: shares[name] for name in STAGES if name in shares}
    total = sum(shares.values())
    per_job_ms = 1000 * total / count
    idle_s = sum(idle.get(name, 0.0) for name in shares) * wall
    busy_ms = 1000 * max(0.0, total - idle_s) / count
    print(
        f"{label}: {count} jobs Running after {wall:.1f} s; portal CPU {total:.2f} s = "
        f"{per_job_ms:.2f} ms per job, {busy_ms:.2f} ms without the processes' idle CPU "
        f"({idle_s:.2f} s over the {wall:.1f} s); kubesim {kubesim_after - kubesim_before:.2f} s"
    )
    for name, seconds in shares.items():
        print(f"  {name:<11} {1000 * seconds / count:7.2f} ms per job  ({STAGES[name]})")
        harness.figure(f"{label}: {name} CPU per job", 1000 * seconds / count, "ms")
    harness.figure(f"{label}: portal CPU per job", per_job_ms, "ms")
    harness.figure(f"{label}: portal CPU per job, idle CPU taken off", busy_ms, "ms")
    harness.figure(
        f"{label}: kubesim CPU per job", 1000 * (kubesim_after - kubesim_before) / count, "ms"
    )


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"jobs": 40, "nodes": 11}, services=("postgres", "redis")
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4, help="concurrent POST clients")
    parser.add_argument("--nodes", type=int, default=51, help="8-GPU nodes (≥ (2 × jobs + 4) / 8)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--idle-seconds", type=float, default=5.0, help="how long the idle CPU is measured"
    )
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    import requests
    from kubesim.testing import shared_crds_dir

    if args.nodes * 8 < 2 * args.jobs + 4:
        raise SystemExit(f"--nodes {args.nodes} hold {args.nodes * 8} GPUs: not 2 × --jobs + 4")
    with harness.scratch_database(DATABASE_URL):
        ks = stack.kubesim(crds=[shared_crds_dir()], cluster=CLUSTER.format(nodes=args.nodes))
        harness.setup_django(
            database_url=DATABASE_URL,
            CELERY_BROKER_URL=REDIS_URL,
            KUBECONFIG=ks.kubeconfig,
            PORTAL_KUBE_QPS=0,
            PORTAL_PUBSUB_URL="",
        )
        harness.flush_redis(REDIS_URL)
        slug, token = seed(args.nodes, args.jobs)
        env = harness.portal_env(
            database_url=DATABASE_URL,
            redis_url=REDIS_URL,
            kubeconfig=ks.kubeconfig,
            kube_qps=0,
            extra={"CONN_MAX_AGE": "60"},
        )
        web = stack.web(env)
        stack.worker(env)
        watcher = stack.watcher(env)
        watcher.wait_leader()
        n = args.jobs

        def singles() -> None:
            def client(offset: int) -> None:
                session = requests.Session()
                for i in range(offset, n, args.clients):
                    post(web.url, token, body(slug, f"single-{i}"), session)

            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(client, range(args.clients)))
            wait_running("single-", n, args.timeout)

        def array() -> None:
            post(web.url, token, {**body(slug, "arr"), "array": {"count": n, "parallelism": n}})
            wait_running("arr-", n, args.timeout)

        # Warm up: the web and worker processes' first requests import and connect once.
        for i in range(4):
            post(web.url, token, body(slug, f"warm-{i}"))
        wait_running("warm-", 4, args.timeout)
        idle = idle_rates(stack, args.idle_seconds)
        print(
            "idle CPU of the portal's processes: "
            + ", ".join(f"{n} {1000 * r:.1f} ms/s" for n, r in idle.items() if n in STAGES)
        )
        measured(stack, "single POSTs", n, singles, idle)
        measured(stack, "array elements", n, array, idle)  # the single jobs keep their GPUs


if __name__ == "__main__":
    sys.exit(main())
