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

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gp_bench_kueue"
)
DB_NAME = DATABASE_URL.rsplit("/", 1)[1]
ADMIN_URL = DATABASE_URL.rsplit("/", 1)[0] + "/postgres"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
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


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def setup_django(kubeconfig: Path) -> None:
    os.environ.update(
        DATABASE_URL=DATABASE_URL,
        CELERY_BROKER_URL=REDIS_URL,
        KUBECONFIG=str(kubeconfig),
        DJANGO_SETTINGS_MODULE="portal.settings",
        PORTAL_KUBE_QPS="0",
    )
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


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

    from quotas.models import GpuPool, PriorityClass, ProjectQuota
    from quotas.priority_defaults import PRIORITY_CLASSES
    from tenants.models import Department, Membership, Project

    for default in PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(
            name=default.name,
            defaults={"value": default.value, "preemptible": default.preemptible},
        )
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


def child_env(kubeconfig: Path) -> dict:
    return {
        **os.environ,
        "DATABASE_URL": DATABASE_URL,
        "CELERY_BROKER_URL": REDIS_URL,
        "KUBECONFIG": str(kubeconfig),
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PORTAL_KUBE_QPS": "0",
        "PYTHONPATH": str(REPO),
        "DEBUG": "false",
        "SECRET_KEY": "bench-only-secret-key-not-for-production-use-0123456789",
        "SECURE_SSL_REDIRECT": "false",
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
    }


def start(argv: list[str], env: dict, log: Path, ready: bytes | None = None) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - the child keeps it
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while ready and ready not in log.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{argv[0]} did not start:\n{log.read_text()[-2000:]}")
        time.sleep(0.2)
    return process


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    return done - t0


def run_portal(ks, args, projects, token, workdir: Path) -> tuple[float, float]:
    import redis
    import requests
    from django.db.models import Count

    from jobs.models import Job

    redis.Redis.from_url(REDIS_URL).flushdb()
    use_cluster(ks.kubeconfig)
    env = child_env(ks.kubeconfig)
    bin_dir = Path(sys.executable).parent
    port = free_port()
    processes = [
        start(
            [
                str(bin_dir / "gunicorn"),
                "portal.wsgi:application",
                "-b",
                f"127.0.0.1:{port}",
                "-w",
                "2",
                "--log-level",
                "warning",
            ],
            env,
            workdir / "web.log",
        ),
        start(
            [
                str(bin_dir / "celery"),
                "-A",
                "portal",
                "worker",
                "-l",
                "INFO",
                "-c",
                str(args.celery_concurrency),
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                "kq@%h",
            ],
            env,
            workdir / "worker.log",
            ready=b" ready.",
        ),
        start(
            [
                sys.executable,
                "manage.py",
                "watch_cluster",
                "--identity",
                "kq-bench",
                "--health-file",
                str(workdir / "watcher.json"),
            ],
            env,
            workdir / "watcher.log",
        ),
    ]
    api = ks.api_client()
    finished = Finished(api)
    finished.start()
    time.sleep(3)
    base = f"http://127.0.0.1:{port}"
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
            stop(process)
    print(
        f"portal: {args.jobs} jobs POSTed in {posted:.1f} s, all Workloads finished after "
        f"{cluster_done - t0:.1f} s, all shown Succeeded after {portal_done - t0:.1f} s; "
        f"states {states}"
    )
    return cluster_done - t0, portal_done - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    args = parser.parse_args()

    from kubesim.testing import KubesimProcess

    admin(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{DB_NAME}"')
    workdir = Path(tempfile.mkdtemp(prefix="bench-kueue-"))
    cluster = workdir / "cluster.yaml"
    cluster.write_text(CLUSTER)
    try:
        direct = cluster_wall = portal_wall = None
        with KubesimProcess(cluster=cluster, speed=args.speed, workdir=workdir / "ks1") as ks:
            setup_django(ks.kubeconfig)
            projects, user, token = seed()
            if args.only != "portal":
                direct = run_direct(ks, args, projects, user)
        if args.only != "direct":
            with KubesimProcess(cluster=cluster, speed=args.speed, workdir=workdir / "ks2") as ks:
                cluster_wall, portal_wall = run_portal(ks, args, projects, token, workdir)
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
        from django.db import connections

        connections.close_all()
    finally:
        admin(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')


if __name__ == "__main__":
    main()
