"""A database outage in the middle of a burst of submissions, for real.

A PostgreSQL server of the test's own (initdb + pg_ctl on a free port), the portal under uvicorn,
a Celery worker on Redis and kubesim. Four clients submit 40 jobs, each with its own
Idempotency-Key, retrying every failed POST with the same key (as the CLI does); after the first
ten are accepted the test stops PostgreSQL for several seconds, then starts it again. kubesim
slows down writes of Jobs, so reconciles are queued and in flight when the database goes away.

What must hold: every failed request was a 503 with Retry-After (never a 500), the server logged
one line per refused request and no traceback, each key stored exactly one job and the client got
that job, and every job reached the cluster, by the reconcile task's retries alone (no periodic
resync runs in this test).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.asgi_server import AsgiServer
from tests.e2e.conftest import E2E_REDIS_URL, REPO, Worker, _redis_flush, wait_for
from tests.e2e.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

JOBS = 40
CLIENTS = 4
STOP_AFTER_ACCEPTED = 10
NAMESPACE = "gp-alpha"

SETUP = """
import django
django.setup()
from quotas.sync import sync_quota_objects
from tenants.services import token_create
from tests.factories import (
    DepartmentFactory, GpuPoolFactory, MembershipFactory, ProjectFactory, ProjectQuotaFactory,
    UserFactory, ensure_priority_classes,
)
H100 = "NVIDIA-H100-80GB-HBM3"
alpha = ProjectFactory(slug="alpha", name="Alpha", department=DepartmentFactory(slug="research"))
pool = GpuPoolFactory(
    slug="h100", gpu_model=H100, node_labels={"nvidia.com/gpu.product": H100}, node_count=3
)
ProjectQuotaFactory(project=alpha, pool=pool, resource="gpu", nominal=16)
ensure_priority_classes()
bob = UserFactory(username="bob")
MembershipFactory(user=bob, project=alpha, role="member")
sync_quota_objects()
print("TOKEN=" + token_create(actor=bob)[1])
"""


def run_portal_python(code: str, env: dict[str, str]) -> str:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def manage(env: dict[str, str], *args: str) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def private_postgres():
    server = PrivatePostgres().init()
    server.start()
    yield server
    server.destroy()


class Burst:
    """CLIENTS threads submitting JOBS keyed jobs; every failed POST is sent again with the
    same key and body until it is answered (or the deadline passes)."""

    def __init__(self, url: str, token: str, deadline: float):
        self.url, self.token, self.deadline = url, token, deadline
        self.keys = [str(uuid.uuid4()) for _ in range(JOBS)]
        self.accepted: dict[str, tuple[int, int]] = {}  # key -> (status, job id)
        self.failures: list[tuple[str, int | str, str | None]] = []  # (key, status, Retry-After)
        self.unexpected: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()
        self.next = 0

    def body(self, index: int) -> dict:
        return {
            "project": "alpha",
            "name": f"burst-{index}",
            "kind": "single",
            "gpus": 1,
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "command": ["python", "train.py"],
        }

    def take(self) -> int | None:
        with self.lock:
            if self.next >= JOBS:
                return None
            self.next += 1
            return self.next - 1

    def client(self) -> None:
        http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Token {self.token}"}, timeout=30
        )
        with http:
            while (index := self.take()) is not None:
                self.submit(http, index)

    def submit(self, http: httpx.Client, index: int) -> None:
        key = self.keys[index]
        while time.monotonic() < self.deadline:
            try:
                response = http.post(
                    "/api/v1/jobs/", json=self.body(index), headers={"Idempotency-Key": key}
                )
            except httpx.TransportError as exc:
                with self.lock:
                    self.failures.append((key, type(exc).__name__, None))
                time.sleep(0.5)
                continue
            if response.status_code in (200, 201):
                with self.lock:
                    self.accepted[key] = (response.status_code, response.json()["id"])
                return
            if response.status_code != 503:
                with self.lock:
                    self.unexpected.append((key, response.status_code, response.text[:500]))
                return
            with self.lock:
                self.failures.append((key, 503, response.headers.get("Retry-After")))
            time.sleep(min(float(response.headers.get("Retry-After", "1")), 1.0))

    def count(self, what: str) -> int:
        with self.lock:
            if what == "accepted":
                return len(self.accepted)
            return sum(1 for _, status, _ in self.failures if status == 503)


def stored_submissions(database_url: str) -> tuple[list[tuple[str, int]], list[int]]:
    import psycopg

    with psycopg.connect(database_url.replace("postgres://", "postgresql://")) as conn:
        keys = conn.execute("SELECT key, job_id FROM jobs_submissionkey ORDER BY key").fetchall()
        jobs = [row[0] for row in conn.execute("SELECT id FROM jobs_job ORDER BY id")]
    return keys, jobs


def applied_job_ids(database_url: str) -> set[int]:
    import psycopg

    with psycopg.connect(database_url.replace("postgres://", "postgresql://")) as conn:
        rows = conn.execute("SELECT id FROM jobs_job WHERE applied_at IS NOT NULL").fetchall()
    return {row[0] for row in rows}


def cluster_job_ids() -> set[int]:
    from portal.kube import apply as kube

    objects = kube.list_owned("batch/v1", "Job", namespace=NAMESPACE)
    return {int(o["metadata"]["labels"]["gpu-portal.io/job-id"]) for o in objects}


def test_a_database_outage_mid_burst_gives_503s_and_loses_or_doubles_nothing(
    private_postgres, e2e_kubesim, tmp_path: Path, settings
):
    from portal.kube.client import reset_api_client
    from tests.e2e.test_jobs_e2e import kubesim_fault

    database_url = private_postgres.create_database("portal")
    _redis_flush(E2E_REDIS_URL)
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": E2E_REDIS_URL,
        "PORTAL_PUBSUB_URL": E2E_REDIS_URL,
        "KUBECONFIG": str(e2e_kubesim.kubeconfig),
        "PYTHONPATH": str(REPO),
        # Production-like: no debug pages.
        "DEBUG": "false",
        "SECRET_KEY": "outage-test-" + uuid.uuid4().hex,
        "SECURE_SSL_REDIRECT": "false",
        "STATIC_ROOT": str(tmp_path / "static"),
        "PORTAL_OUTAGE_RETRY_AFTER_SECONDS": "1",
        "PORTAL_KUBE_QPS": "0",
    }
    manage(env, "migrate", "--noinput")
    token = run_portal_python(SETUP, env).split("TOKEN=", 1)[1].strip()

    settings.KUBECONFIG = str(e2e_kubesim.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    # Slow Job writes: reconciles queue up, so some are in flight or waiting at the outage.
    kubesim_fault(e2e_kubesim, {"write_delay_seconds": 0.5, "write_delay_path": "/jobs"})

    worker = Worker(env, tmp_path / "worker.log").start()
    server = AsgiServer(env, tmp_path / "server.log").start()
    try:
        burst = Burst(server.url, token, deadline=time.monotonic() + 400)
        clients = [threading.Thread(target=burst.client) for _ in range(CLIENTS)]
        for thread in clients:
            thread.start()
        wait_for(
            lambda: burst.count("accepted") >= STOP_AFTER_ACCEPTED,
            timeout=180,
            what=f"{STOP_AFTER_ACCEPTED} accepted submissions",
        )
        private_postgres.stop()
        wait_for(lambda: burst.count("503") >= 2 * CLIENTS, timeout=120, what="refusals")
        time.sleep(5)  # keep it down a while: queued reconciles run into the outage
        private_postgres.start()
        for thread in clients:
            thread.join(timeout=450)
        assert not any(thread.is_alive() for thread in clients)

        # Every failed request was a 503 with Retry-After (connection errors are not the
        # portal's answers); nothing else went wrong.
        assert burst.unexpected == []
        answered = [(status, retry) for _, status, retry in burst.failures if status == 503]
        assert answered, "no request met the outage"
        assert all(retry == "1" for _, retry in answered), answered
        assert len(burst.accepted) == JOBS
        statuses = Counter(status for status, _ in burst.accepted.values())
        assert set(statuses) <= {200, 201}  # 200: a retry found the job its key had stored

        # Exactly one job per key, and it is the job the client was given.
        keys, jobs = stored_submissions(database_url)
        assert len(keys) == JOBS
        assert len(jobs) == JOBS
        assert sorted(job for _, job in keys) == jobs
        assert dict(keys) == {key: job for key, (_, job) in burst.accepted.items()}

        # Every job reaches the cluster: the reconciles that met the outage were retried.
        everything = set(jobs)
        wait_for(
            lambda: applied_job_ids(database_url) == everything,
            timeout=300,
            interval=1.0,
            what="every job applied",
        )
        assert cluster_job_ids() >= everything
        worker_log = (tmp_path / "worker.log").read_text()
        assert "_reconcile_job: The database is unavailable" in worker_log
        assert "retrying" in worker_log
    finally:
        server.stop()
        worker.stop()
        kubesim_fault(e2e_kubesim, {"write_delay_seconds": 0})

    server_log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in server_log, server_log[-5000:]
    refusals = [line for line in server_log.splitlines() if line.startswith("503 POST")]
    assert len(refusals) == len(answered)
    assert all("The database is unavailable" in line for line in refusals)
