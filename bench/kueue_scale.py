"""Benchmark: Kueue at scale through the portal, against the same workload created directly.

30 projects in 5 departments (8 GPUs nominal each, 16 borrowable; the quota objects synced by the
portal), a kubesim cluster at --speed 100 whose 30 nodes hold 240 H100 GPUs (Kueue's baseline
shape), and --jobs single-GPU jobs (`sleep 600`: 6 s of wall time at speed 100) spread over
the projects:

  direct: the portal's own manifests created straight in kubesim with the python client
          (4 threads), wall time until every Workload has finished;
  portal: the same jobs POSTed to the REST API (gunicorn 2 workers, 4 client threads), applied
          by a Celery worker (2 processes, client pacing off), followed by the cluster watcher;
          wall time until every Workload has finished, and until the portal shows every job
          Succeeded.

Prints both, the portal's overhead ((portal − direct) / direct, target ≤ 10 %), the
cluster-bound floor and, beside ours, Kueue's own performance test: 15,000 workloads in under
425 s on a real cluster. `--only direct|portal` runs one half.

    .venv/bin/python bench/kueue_scale.py [--jobs 15000] [--speed 100] [--seconds 600]

Own database gp_bench_kueue (dropped afterwards) and BENCH_REDIS_URL (default
redis://127.0.0.1:6379/12); starts kubesim twice, gunicorn, Celery and the watcher itself.
"""

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

DATABASE_URL = harness.database_url("gp_bench_kueue")
REDIS_URL = harness.redis_url(12)
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
H100 = "NVIDIA-H100-80GB-HBM3"
DEPARTMENTS, PROJECTS = 5, 30
CLUSTER = f"""apiVersion: kubesim.dev/v1
kind: Cluster
pools:
  - name: h100
    count: 30
    cpu: "192"
    memory: 2Ti
    gpu: {{model: {H100}, count: 8}}
"""


def use_cluster(kubeconfig: Path) -> None:
    from django.conf import settings

    from portal.kube.client import reset_api_client
    from quotas.sync import sync_quota_objects

    settings.KUBECONFIG = str(kubeconfig)
    os.environ["KUBECONFIG"] = str(kubeconfig)
    reset_api_client()
    report = sync_quota_objects()
    if report.errors:
        raise RuntimeError(f"quota sync: {report.errors}")


def seed():
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from quotas.models import GpuPool, ProjectQuota
    from tenants.models import Department, Membership, Project

    harness.ensure_priority_classes()
    pool = GpuPool.objects.create(
        slug="h100",
        name="H100",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=30,
        gpus_per_node=8,
    )
    user = get_user_model().objects.create(username="kueue-bench")
    departments = [
        Department.objects.create(slug=f"dept-{i}", name=f"Department {i}")
        for i in range(DEPARTMENTS)
    ]
    projects = []
    for i in range(PROJECTS):
        project = Project.objects.create(
            slug=f"kq-{i}", name=f"KQ {i}", department=departments[i % DEPARTMENTS]
        )
        ProjectQuota.objects.create(
            project=project, pool=pool, resource="gpu", nominal=8, borrowing_limit=16
        )
        Membership.objects.create(user=user, project=project, role="member")
        projects.append(project)
    _, token = AuthToken.objects.create(user)
    return projects, user, token


def body(i: int, projects, seconds: int) -> dict:
    return {
        "project": projects[i % len(projects)].slug,
        "name": f"kq-{i}",
        "kind": "single",
        "image": IMAGE,
        "command": ["sleep", str(seconds)],
        "gpus": 1,
    }


def direct_manifests(count: int, projects, user, seconds: int) -> list[dict]:
    """What the portal applies for the same requests: each request validated as a dry run by
    jobs.services.job_submit and rendered by jobs.selectors.job_manifests (so the pods carry the
    project's restricted-PodSecurity uid, as the portal's do)."""
    from jobs.selectors import job_manifests
    from jobs.services import job_submit

    unsaved = {}
    for i, project in enumerate(projects):
        outcome = job_submit(
            actor=user, project=project, data=body(i, projects, seconds), dry_run=True
        )
        if outcome.unsaved is None:
            raise RuntimeError(f"dry run refused job {i}: {outcome.validation.errors}")
        unsaved[project.pk] = outcome.unsaved
    manifests = []
    for i in range(count):
        job = unsaved[projects[i % len(projects)].pk]
        job.name = body(i, projects, seconds)["name"]
        manifests.extend(job_manifests(job, job_id=1_000_000 + i))
    return manifests


class Finished(threading.Thread):
    """Counts Workloads that have finished, from a watch (as bench/kubesim_cluster.py)."""

    def __init__(self, api):
        super().__init__(daemon=True)
        self.api = api
        self.done: set[str] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        import urllib3
        from kubernetes import client, watch

        custom = client.CustomObjectsApi(self.api)
        version = None
        while not self.stop.is_set():
            try:
                for event in watch.Watch().stream(
                    custom.list_cluster_custom_object,
                    "kueue.x-k8s.io",
                    "v1beta2",
                    "workloads",
                    resource_version=version,
                    timeout_seconds=30,
                    allow_watch_bookmarks=True,
                ):
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    conditions = (obj.get("status") or {}).get("conditions") or []
                    if any(c["type"] == "Finished" and c["status"] == "True" for c in conditions):
                        self.done.add(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
                    if self.stop.is_set():
                        return
            except client.ApiException as exc:
                if exc.status != 410:
                    raise
                version = None
            except urllib3.exceptions.HTTPError:
                # The server closed the stream (a slow reader's watch is dropped): watch again
                # from the last version seen, or relist when that is gone (410 above).
                time.sleep(0.5)


def wait(predicate, timeout: float, what: str, progress=None) -> float:
    start = time.monotonic()
    deadline, report = start + timeout, start + 30
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        if progress is not None and time.monotonic() >= report:
            report += 30
            print(f"  … {time.monotonic() - start:.0f} s: {progress()}", flush=True)
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}")


def _drain(response) -> None:
    """Read a raw response to its end and give its connection back to the pool."""
    response.read()
    response.release_conn()


def run_direct(ks, args, projects, user) -> float:
    from kubernetes import client

    use_cluster(ks.kubeconfig)
    api = ks.api_client()
    finished = Finished(api)
    finished.start()
    manifests = direct_manifests(args.jobs, projects, user, args.seconds)
    batch = client.BatchV1Api(api)
    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as threads:
        list(
            threads.map(
                # The response is not needed: no model objects built (client CPU, not kubesim's).
                lambda m: _drain(
                    batch.create_namespaced_job(
                        m["metadata"]["namespace"], m, _preload_content=False
                    )
                ),
                manifests,
            )
        )
    created = time.monotonic() - t0
    done = wait(
        lambda: len(finished.done) >= args.jobs,
        args.timeout,
        "direct workloads",
        lambda: f"{len(finished.done)} finished",
    )
    finished.stop.set()
    print(
        f"direct: {args.jobs} Jobs created in {created:.1f} s, all finished after {done - t0:.1f} s"
    )
    harness.figure("direct in kubesim", done - t0, "s")
    return done - t0


def run_portal(ks, args, projects, token, stack: harness.Stack) -> tuple[float, float]:
    import requests
    from django.db.models import Count

    from jobs.models import Job

    harness.flush_redis(REDIS_URL)
    use_cluster(ks.kubeconfig)
    env = harness.portal_env(
        database_url=DATABASE_URL, redis_url=REDIS_URL, kubeconfig=ks.kubeconfig
    )
    web = stack.web(env)
    worker = stack.worker(env, concurrency=args.celery_concurrency, name="kq")
    watcher = stack.watcher(env, identity="kq-bench")
    processes = [web, worker, watcher]
    api = ks.api_client()
    finished = Finished(api)
    finished.start()
    watcher.wait_leader()
    base = web.url
    try:

        def post(offset: int) -> None:
            session = requests.Session()
            session.headers["Authorization"] = f"Token {token}"
            for i in range(offset, args.jobs, 4):
                response = session.post(
                    f"{base}/api/v1/jobs/", json=body(i, projects, args.seconds), timeout=60
                )
                if response.status_code != 201:
                    raise RuntimeError(f"POST {response.status_code}: {response.text[:300]}")

        t0 = time.monotonic()
        with ThreadPoolExecutor(4) as threads:
            list(threads.map(post, range(4)))
        posted = time.monotonic() - t0
        cluster_done = wait(
            lambda: len(finished.done) >= args.jobs,
            args.timeout,
            "portal workloads",
            lambda: f"{len(finished.done)} finished",
        )
        portal_done = wait(
            lambda: Job.objects.filter(state="succeeded").count() >= args.jobs,
            args.timeout,
            "portal states",
        )
        states = dict(Job.objects.values_list("state").annotate(n=Count("id")).order_by())
    finally:
        finished.stop.set()
        for process in processes:
            stack.stop(process)
    print(
        f"portal: {args.jobs} jobs POSTed in {posted:.1f} s, all Workloads finished after "
        f"{cluster_done - t0:.1f} s, all shown Succeeded after {portal_done - t0:.1f} s; "
        f"states {states}"
    )
    harness.figure("through the portal (cluster done)", cluster_done - t0, "s")
    harness.figure("shown Succeeded in portal", portal_done - t0, "s")
    return cluster_done - t0, portal_done - t0


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"jobs": 300, "seconds": 60}, services=("postgres", "redis")
    )
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--speed", type=float, default=100.0)
    parser.add_argument("--seconds", type=int, default=600, help="simulated run time per job")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument(
        "--celery-concurrency",
        type=int,
        default=2,
        help="Celery worker processes for the portal half (each reconcile mostly waits on "
        "PostgreSQL and kubesim round trips)",
    )
    parser.add_argument(
        "--only", choices=("direct", "portal"), help="run one half only (no overhead printed)"
    )
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    with harness.scratch_database(DATABASE_URL):
        direct = cluster_wall = portal_wall = None
        ks = stack.kubesim(name="ks1", cluster=CLUSTER, speed=args.speed)
        harness.setup_django(
            database_url=DATABASE_URL,
            CELERY_BROKER_URL=REDIS_URL,
            KUBECONFIG=ks.kubeconfig,
            PORTAL_KUBE_QPS=0,
        )
        projects, user, token = seed()
        if args.only != "portal":
            direct = run_direct(ks, args, projects, user)
        stack.stop(ks)
        if args.only != "direct":
            ks = stack.kubesim(name="ks2", cluster=CLUSTER, speed=args.speed)
            cluster_wall, portal_wall = run_portal(ks, args, projects, token, stack)
            stack.stop(ks)
        if direct is None or portal_wall is None:
            return
        # The portal's extra wall time relative to the same workload created directly.
        overhead = (portal_wall - direct) / direct
        floor = args.jobs * args.seconds / args.speed / 240
        print(
            f"\n{args.jobs} single-GPU jobs ({args.seconds} simulated s each) over {PROJECTS} "
            f"projects in {DEPARTMENTS} departments, kubesim --speed {args.speed:g}, 240 GPUs"
        )
        print(f"  direct in kubesim:          {direct:7.1f} s")
        print(f"  through the portal:         {cluster_wall:7.1f} s (cluster done)")
        print(f"  shown Succeeded in portal:  {portal_wall:7.1f} s")
        print(f"  portal overhead: {100 * overhead:.1f} % of the direct wall time (target ≤ 10 %)")
        print(f"  cluster-bound floor (jobs × run time / 240 GPUs): {floor:.1f} s")
        print(
            f"  Kueue's own test: 15,000 workloads < 425 s on a real cluster; "
            f"ours: {args.jobs:,} in {direct:.1f} s direct, {portal_wall:.1f} s through the portal"
        )
        harness.figure("portal overhead", 100 * overhead, "%")


if __name__ == "__main__":
    sys.exit(main())
