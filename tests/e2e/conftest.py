"""End-to-end fixtures: kubesim, a real Celery worker subprocess on Redis, PostgreSQL.

The worker is a separate process, so tests using it are transactional
(`django_db(transaction=True)`) and hand it the test database's name.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubesim.testing import KubesimProcess

from tests.asgi_server import session_cookie, start_asgi_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def e2e_redis_url(redis_server) -> str:
    """The end-to-end tests' broker and pub/sub: a database of its own on this worker's Redis,
    so the unit tests' keys never mix with these queues."""
    return redis_server.url(1)


@pytest.fixture(scope="module")
def e2e_kubesim(tmp_path_factory):
    with KubesimProcess(speed=100, workdir=tmp_path_factory.mktemp("ks-e2e")) as server:
        yield server


def _redis_flush(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


class Worker:
    """`celery -A portal worker` as a subprocess with its own process group."""

    def __init__(self, env: dict[str, str], log: Path, extra_args: tuple[str, ...] = ()):
        self.env = env
        self.log = log
        self.extra_args = list(extra_args)
        self.process: subprocess.Popen | None = None

    def start(self) -> "Worker":
        celery = str(Path(sys.executable).parent / "celery")
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [
                    celery,
                    "-A",
                    "portal",
                    "worker",
                    "-l",
                    "INFO",
                    "-c",
                    "2",
                    "--without-heartbeat",
                    "--without-gossip",
                    "--without-mingle",
                    "-n",
                    f"e2e-{os.getpid()}@%h",
                    *self.extra_args,
                ],
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b" ready." in self.log.read_bytes():
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError("celery worker did not start:\n" + self.log.read_text()[-3000:])

    def kill(self) -> None:
        """SIGKILL the whole worker (parent and pool children), as a crash would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout: float = 20) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def celery_to_redis(e2e_redis_url):
    """Point this process's Celery app (the producer side) at the e2e Redis database."""
    from portal.celery import app

    _redis_flush(e2e_redis_url)
    saved = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = e2e_redis_url
    app.conf.broker_transport_options = {"visibility_timeout": 3600}
    app._pool = None
    app.amqp._producer_pool = None
    yield app
    app.conf.broker_url, app.conf.broker_transport_options = saved
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def worker_factory(e2e_kubesim, celery_to_redis, e2e_redis_url, tmp_path, settings):
    """Start (and restart) workers that share this test's database, Redis and kubesim."""
    from django.db import connection

    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(e2e_kubesim.kubeconfig)
    reset_api_client()
    db = connection.settings_dict
    user, host, port = db["USER"] or "postgres", db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    database_url = f"postgres://{user}@{host}:{port}/{db['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": e2e_redis_url,
        "KUBECONFIG": str(e2e_kubesim.kubeconfig),
        "PYTHONPATH": str(REPO),
    }
    workers: list[Worker] = []

    def start(*, beat_seconds: float | None = None) -> Worker:
        """A worker; with beat_seconds, it also runs beat (-B) with that resync period."""
        extra: tuple[str, ...] = ()
        worker_env = env
        if beat_seconds is not None:
            extra = ("-B", "-s", str(tmp_path / f"beat-{len(workers)}"))
            worker_env = {**env, "PORTAL_RESYNC_SECONDS": str(beat_seconds)}
        worker = Worker(worker_env, tmp_path / f"worker-{len(workers)}.log", extra).start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        # Cleanup, not a test of the warm shutdown: a worker still busy with the test's last
        # tasks after a few seconds is killed (the next test flushes Redis and the database).
        worker.stop(timeout=3)
        # Shown by pytest when the test failed (with kubesim's, below).
        print(f"--- {worker.log.name} ---\n{worker.log.read_text(errors='replace')[-4000:]}")
    kubesim_log = e2e_kubesim.log_file.read_text(errors="replace")
    print(f"--- kubesim.log (the module's) ---\n{kubesim_log[-4000:]}")


def wait_for(predicate, timeout=60.0, interval=0.3, what="condition"):
    from portal.kube.apply import RetryableKubeError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except RetryableKubeError:  # the test's own reads during a simulated outage
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


H100 = "NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def e2e_org(worker_factory):
    """Two departments, projects alpha (member bob) and beta (outsider oscar), an H100 pool with
    MIG, priorities; the quota objects are synced into kubesim by the worker."""
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        MembershipFactory,
        ProjectFactory,
        ProjectQuotaFactory,
        UserFactory,
        ensure_priority_classes,
    )

    research = DepartmentFactory(slug="research", name="Research")
    platform = DepartmentFactory(slug="platform", name="Platform")
    alpha = ProjectFactory(slug="alpha", name="Alpha", department=research)
    beta = ProjectFactory(slug="beta", name="Beta", department=platform)
    pool = GpuPoolFactory(
        slug="h100",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=3,
        mig_profiles=["1g.10gb"],
    )
    ProjectQuotaFactory(project=alpha, pool=pool, resource="gpu", nominal=16)
    ProjectQuotaFactory(project=alpha, pool=pool, resource="1g.10gb", nominal=4)
    ProjectQuotaFactory(project=beta, pool=pool, resource="gpu", nominal=4)
    ensure_priority_classes()
    bob = UserFactory(username="bob")
    oscar = UserFactory(username="oscar")
    MembershipFactory(user=bob, project=alpha, role="member")
    MembershipFactory(user=oscar, project=beta, role="admin")
    return {"alpha": alpha, "beta": beta, "pool": pool, "bob": bob, "oscar": oscar}


# --- browser tests: Playwright driving Debian's chromium (headless) against the portal under a
# real ASGI server, publishing and streaming through the e2e Redis ---------------------------

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM = os.environ.get("PORTAL_CHROMIUM", "/usr/bin/chromium")


def chromium_path() -> str:
    found = shutil.which(CHROMIUM) or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if not found:
        pytest.fail(
            f"No chromium at {CHROMIUM}: `make test` installs Debian's chromium package "
            "(scripts/ensure-services.sh); set PORTAL_CHROMIUM to use another one."
        )
    return found


# Module scope: Playwright's sync API keeps an event loop running in this thread while the browser
# is open, which would break later tests that run their own loop (asyncio.run).
@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; Django would then refuse every
    # database call of the test. The loop never runs Django code, so that refusal is moot here.
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            # Root in a container has no user namespace for chromium's sandbox.
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        yield browser
        browser.close()
    if saved is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


@pytest.fixture
def portal_server(tmp_path, worker_factory, e2e_redis_url):
    """The ASGI server publishing and streaming through the e2e Redis, plus a worker with beat."""
    worker_factory(beat_seconds=1)
    server = start_asgi_server(
        tmp_path, PORTAL_PUBSUB_URL=e2e_redis_url, CELERY_BROKER_URL=e2e_redis_url
    )
    yield server
    server.stop()


@pytest.fixture
def page_for(browser, portal_server):
    """A signed-in browser page for a user; screenshots go to tests/artifacts/."""
    contexts = []

    def open_as(user):
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        name, value = next(iter(session_cookie(user).items()))
        context.add_cookies([{"name": name, "value": value, "url": portal_server.url}])
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        return page

    yield open_as
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
