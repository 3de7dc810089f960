"""Benchmark: how fast the portal recovers from a PostgreSQL outage in the middle of submissions.

Starts a PostgreSQL server of its own (initdb + pg_ctl in a temporary folder, on a free port:
stopping it hurts nobody), kubesim (API only), the portal under gunicorn and a Celery worker.
C clients submit N jobs, each with its own Idempotency-Key, retrying every failed POST with the
same key after the Retry-After it was given (the portal's is 1 s here). Once a quarter of the
jobs are accepted, PostgreSQL is stopped (`pg_ctl stop -m fast`) for --outage-seconds, then
started again. Prints:
  - the answers during the outage (503s; anything else is a defect) and the jobs per key;
  - time from PostgreSQL accepting connections again to the portal's first 2xx (/healthz and a
    submission), to the last submission accepted, and to every job's batch Job in the cluster
    (the reconciles that met the outage are retried with backoff; no periodic resync runs).

Needs Redis (db 12, BENCH_REDIS_URL) and Debian's PostgreSQL server binaries
(/usr/lib/postgresql/*/bin); as root, PostgreSQL runs as the postgres user.

    .venv/bin/python bench/db_outage.py [--jobs 200] [--clients 4] [--outage-seconds 10]
"""

import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness
from tests.e2e.private_postgres import PrivatePostgres

REDIS_URL = harness.redis_url(12)
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
RETRY_AFTER = 1


def seed() -> str:
    """A project with generous quota and a member; the member's API token."""
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from quotas.models import GpuPool, ProjectQuota
    from tenants.models import Department, Membership, Project

    department = Department.objects.create(slug="bench", name="Bench")
    pool = GpuPool.objects.create(
        slug="bench-h100",
        name="Bench H100",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        node_count=1000,
        gpus_per_node=8,
    )
    harness.ensure_priority_classes()
    project = Project.objects.create(slug="bench-0", name="Bench 0", department=department)
    ProjectQuota.objects.create(project=project, pool=pool, resource="gpu", nominal=8000)
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(user=user, project=project, role="member")
    return AuthToken.objects.create(user)[1]


class Clients:
    """Keyed submissions from `count` threads, each retried until answered."""

    def __init__(self, url: str, token: str, jobs: int, count: int):
        self.url, self.token, self.count = url, token, count
        self.keys = [str(uuid.uuid4()) for _ in range(jobs)]
        self.lock = threading.Lock()
        self.next = 0
        self.accepted: dict[str, tuple[int, float]] = {}  # key -> (job id, when)
        self.answers: dict[int | str, int] = {}  # status (or error name) -> how many
        self.threads = [threading.Thread(target=self._run) for _ in range(count)]

    def start(self) -> "Clients":
        for thread in self.threads:
            thread.start()
        return self

    def join(self) -> None:
        for thread in self.threads:
            thread.join()

    def accepted_count(self) -> int:
        with self.lock:
            return len(self.accepted)

    def _take(self) -> int | None:
        with self.lock:
            if self.next >= len(self.keys):
                return None
            self.next += 1
            return self.next - 1

    def _note(self, answer: int | str) -> None:
        with self.lock:
            self.answers[answer] = self.answers.get(answer, 0) + 1

    def _run(self) -> None:
        import httpx

        headers = {"Authorization": f"Token {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as http:
            while (index := self._take()) is not None:
                self._submit(http, index)

    def _submit(self, http, index: int) -> None:
        import httpx

        body = {
            "project": "bench-0",
            "name": f"outage-{index}",
            "kind": "single",
            "image": IMAGE,
            "command": ["python", "train.py"],
            "gpus": 1,
        }
        key = self.keys[index]
        while True:
            try:
                response = http.post("/api/v1/jobs/", json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError as exc:
                self._note(type(exc).__name__)
                time.sleep(0.5)
                continue
            self._note(response.status_code)
            if response.status_code in (200, 201):
                with self.lock:
                    self.accepted[key] = (response.json()["id"], time.monotonic())
                return
            if response.status_code != 503:
                raise RuntimeError(f"POST answered {response.status_code}: {response.text[:300]}")
            time.sleep(float(response.headers.get("Retry-After", RETRY_AFTER)))


def main() -> int:
    parser = harness.make_parser(
        __doc__, short={"jobs": 40, "outage_seconds": 5}, services=("redis",)
    )
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=4, help="concurrent submitting clients")
    parser.add_argument("--outage-seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    args = harness.parse_args(parser)
    return harness.run(args, measure)


def measure(args, stack: harness.Stack) -> None:
    postgres = PrivatePostgres().init()
    try:
        postgres.start()
        database_url = postgres.create_database("portal")
        _measure(args, stack, postgres, database_url)
    finally:
        postgres.destroy()


def _measure(args, stack, postgres: PrivatePostgres, database_url: str) -> None:
    import httpx

    ks = stack.kubesim(no_cluster=True)
    harness.setup_django(
        database_url=database_url,
        CELERY_BROKER_URL=REDIS_URL,
        KUBECONFIG=ks.kubeconfig,
        PORTAL_KUBE_QPS=0,
    )
    harness.flush_redis(REDIS_URL)
    from django.db import connection

    from portal.kube import apply as kube
    from quotas.sync import sync_quota_objects

    token = seed()
    sync_quota_objects()
    connection.close()  # the bench's own connection must not outlive the server's restart
    env = harness.portal_env(
        database_url=database_url,
        redis_url=REDIS_URL,
        kubeconfig=ks.kubeconfig,
        extra={"CONN_MAX_AGE": "60", "PORTAL_OUTAGE_RETRY_AFTER_SECONDS": RETRY_AFTER},
    )
    web = stack.web(env, workers=2)
    stack.worker(env, concurrency=args.workers)

    clients = Clients(web.url, token, args.jobs, args.clients).start()
    harness.wait_until(
        lambda: clients.accepted_count() >= args.jobs // 4, timeout=300, what="first submissions"
    )
    accepted_before = clients.accepted_count()
    postgres.stop()
    down_at = time.monotonic()
    time.sleep(args.outage_seconds)
    postgres.start()
    up_at = time.monotonic()
    # The portal's first 2xx after the restart (healthz: the web process reconnected).
    harness.wait_until(
        lambda: _healthy(web.url, httpx), timeout=300, interval=0.05, what="/healthz 200"
    )
    healthy_at = time.monotonic()
    clients.join()
    after_restart = [when for _, when in clients.accepted.values() if when > up_at]
    first_accepted = min(after_restart) if after_restart else None
    last_accepted = max(when for _, when in clients.accepted.values())

    job_ids = {job for job, _ in clients.accepted.values()}
    harness.wait_until(
        lambda: _in_cluster(kube) >= job_ids, timeout=600, interval=0.25, what="every job applied"
    )
    in_cluster_at = time.monotonic()
    connection.close()
    stored = _stored(database_url)

    answers = ", ".join(f"{k}: {v}" for k, v in sorted(clients.answers.items(), key=str))
    print(
        f"jobs: {args.jobs} from {args.clients} clients, each with its own Idempotency-Key; "
        f"PostgreSQL stopped after {accepted_before} were accepted, for "
        f"{up_at - down_at:.1f} s (pg_ctl stop → start returned)"
    )
    print(f"answers seen by the clients: {answers}")
    print(
        f"stored: {stored['jobs']} jobs for {stored['keys']} keys "
        f"({args.jobs} submitted; all three must be equal)"
    )
    print(f"after PostgreSQL was back: /healthz 200 in {healthy_at - up_at:.2f} s")
    if first_accepted is not None:
        print(f"  first submission accepted in {first_accepted - up_at:.2f} s")
    print(f"  last submission accepted in {last_accepted - up_at:.2f} s")
    print(f"  every job's batch Job in the cluster in {in_cluster_at - up_at:.2f} s")
    harness.figure("outage", up_at - down_at, "s")
    harness.figure("healthz 200 after restart", healthy_at - up_at, "s")
    if first_accepted is not None:
        harness.figure("first submission accepted after restart", first_accepted - up_at, "s")
    harness.figure("last submission accepted after restart", last_accepted - up_at, "s")
    harness.figure("every job in the cluster after restart", in_cluster_at - up_at, "s")
    harness.figure("503 answers", clients.answers.get(503, 0))


def _healthy(url: str, httpx) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _in_cluster(kube) -> set[int]:
    objects = kube.list_owned("batch/v1", "Job", namespace="gp-bench-0")
    return {int(o["metadata"]["labels"]["gpu-portal.io/job-id"]) for o in objects}


def _stored(database_url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(database_url.replace("postgres://", "postgresql://")) as conn:
        jobs = conn.execute("SELECT count(*) FROM jobs_job").fetchone()[0]
        keys = conn.execute("SELECT count(DISTINCT job_id) FROM jobs_submissionkey").fetchone()[0]
    return {"jobs": jobs, "keys": keys}


if __name__ == "__main__":
    sys.exit(main())
