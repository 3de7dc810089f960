"""Shared fixtures: the tenancy personas and API clients.

Kept free of module-level Django imports so that pure tests (quota arithmetic, kubesim) collect
and run without touching the database: every Django import happens inside a fixture.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.redis_server import RedisServer, redis_server_binary

# kubesim fixtures (kubesim_api, kubesim, kubesim_factory, kubesim_fresh, kube_client) for every
# test package.
pytest_plugins = ["kubesim.pytest_plugin"]


@dataclass
class Personas:
    """Project A has an admin, a member and a viewer; the outsider is admin of project B."""

    project_a: Any
    project_b: Any
    pool: Any
    admin: Any
    member: Any
    viewer: Any
    outsider: Any
    staff: Any

    def by_name(self, name: str) -> Any:
        return getattr(self, name)


PERSONA_NAMES = ("outsider", "viewer", "member", "admin", "staff")


@dataclass
class GivenRedis:
    """A Redis the run was pointed at (PORTAL_TEST_REDIS_URL): its databases from `first_db` on.

    Under pytest-xdist each worker takes two databases of its own, but pub/sub channels are
    shared by the whole server: prefer letting each worker start its own (the default)."""

    base: str
    first_db: int

    def url(self, db: int = 0) -> str:
        return f"{self.base}/{self.first_db + db}"


def _worker_index() -> int:
    """0 for a plain run, N for pytest-xdist's worker gwN."""
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """The tests' Redis, with `url(db)`: database 0 for the unit tests' pub/sub and metrics,
    database 1 for the end-to-end tests' broker (tests/e2e).

    By default a `redis-server` of this test process's own (one per xdist worker), so that one
    worker's FLUSHDB or published events never reach another; PORTAL_TEST_REDIS_URL points the
    run at an existing Redis instead (also the fallback, with 6379, when redis-server is not
    installed)."""
    given = os.environ.get("PORTAL_TEST_REDIS_URL")
    binary = redis_server_binary()
    if given or binary is None:
        match = re.fullmatch(r"(redis://[^/]+)(?:/(\d+))?", given or "redis://127.0.0.1:6379/0")
        if match is None:
            pytest.fail(f"PORTAL_TEST_REDIS_URL={given!r}: expected redis://HOST:PORT/DB")
        yield GivenRedis(match[1], int(match[2] or 0) + 2 * _worker_index())
        return
    server = RedisServer(tmp_path_factory.mktemp("redis")).start(binary)
    try:
        yield server
    finally:
        server.stop()


def _template_database_name() -> str:
    from django.conf import settings

    return f"test_{settings.DATABASES['default']['NAME']}_template"


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix, request, tmp_path_factory, django_db_blocker
):
    """Under pytest-xdist, the first worker that needs the database migrates a template once
    (under a lock shared by the run's workers); each worker's test database (test_NAME_gwN) is
    then made as a copy of it (PostgreSQL's CREATE DATABASE ... TEMPLATE), and its migrate finds
    nothing left to do, instead of every worker running every migration. A plain run keeps
    pytest-django's way. The controller drops the template at the end (pytest_sessionfinish)."""
    from django.conf import settings
    from django.db import connections

    database = settings.DATABASES["default"]
    if not hasattr(request.config, "workerinput") or "postgresql" not in database["ENGINE"]:
        return
    template = _template_database_name()
    shared = tmp_path_factory.getbasetemp().parent  # one folder per run, shared by its workers
    with open(shared / "db-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = shared / "db-template.done"
        if not done.exists():
            connection = connections["default"]
            test_settings = database["TEST"]
            saved = database["NAME"], test_settings.get("NAME")
            test_settings["NAME"] = template
            try:
                with django_db_blocker.unblock():
                    connection.creation.create_test_db(
                        verbosity=0, autoclobber=True, serialize=False
                    )
                    connection.close()  # a template must have no connection when copied
            finally:
                database["NAME"], test_settings["NAME"] = saved
            done.write_text(template)
    database["TEST"]["TEMPLATE"] = template


# The two slowest modules (a fresh venv for kubesim alone; the production image, built once per
# module) are collected last and made the suite's tail: one worker busy for minutes after the
# others had finished. Started first, the other workers take the rest meanwhile (worksteal).
FIRST_MODULES = ("tests/test_packaging.py", "tests/test_image.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in FIRST_MODULES)


def pytest_sessionfinish(session):
    """The xdist controller drops the template database its workers copied theirs from."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from django.conf import settings

    database = settings.DATABASES["default"]
    if "postgresql" not in database["ENGINE"]:
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(
        dbname="postgres",
        user=database["USER"] or None,
        password=database["PASSWORD"] or None,
        host=database["HOST"] or None,
        port=database["PORT"] or None,
        autocommit=True,
    ) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(_template_database_name()))
        )


@pytest.fixture(autouse=True)
def _static_files_from_finders(request):
    """Serve static/ through whitenoise's finders in tests, as `runserver` does in the demo.

    pytest-django runs with DEBUG off, where whitenoise would serve only a collected
    STATIC_ROOT (absent in a checkout) and warn about it; warnings are errors here. Does
    nothing when Django is not configured, so Django-free tests are unaffected.
    """
    from django.conf import settings as django_settings

    if not django_settings.configured:
        return
    settings = request.getfixturevalue("settings")
    settings.WHITENOISE_USE_FINDERS = True
    settings.WHITENOISE_AUTOREFRESH = True
    # The suite makes many API calls from one address and a few users: no rate limits, except
    # in the tests of the limits themselves (tests/api/test_rate_limits.py sets them).
    settings.PORTAL_API_RATE_TOKEN = settings.PORTAL_API_RATE_USER = "off"
    settings.PORTAL_API_RATE_ANON = "off"


@pytest.fixture
def personas(db) -> Personas:
    from tenants.models import Role
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        MembershipFactory,
        ProjectFactory,
        ProjectQuotaFactory,
        UserFactory,
    )

    research = DepartmentFactory(slug="research", name="Research")
    platform = DepartmentFactory(slug="platform", name="Platform")
    project_a = ProjectFactory(slug="alpha", name="Alpha", department=research)
    project_b = ProjectFactory(slug="beta", name="Beta", department=platform)
    pool = GpuPoolFactory(
        slug="h100",
        name="H100 80GB",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        mig_profiles=["1g.10gb", "3g.40gb"],
    )
    ProjectQuotaFactory(project=project_a, pool=pool, resource="gpu", nominal=8, borrowing_limit=4)
    ProjectQuotaFactory(project=project_b, pool=pool, resource="gpu", nominal=2)

    admin = UserFactory(username="alice")
    member = UserFactory(username="bob")
    viewer = UserFactory(username="victor")
    outsider = UserFactory(username="oscar")
    staff = UserFactory(username="sam", is_staff=True)
    MembershipFactory(user=admin, project=project_a, role=Role.ADMIN)
    MembershipFactory(user=member, project=project_a, role=Role.MEMBER)
    MembershipFactory(user=viewer, project=project_a, role=Role.VIEWER)
    MembershipFactory(user=outsider, project=project_b, role=Role.ADMIN)
    return Personas(
        project_a=project_a,
        project_b=project_b,
        pool=pool,
        admin=admin,
        member=member,
        viewer=viewer,
        outsider=outsider,
        staff=staff,
    )


@pytest.fixture
def api_client():
    """An unauthenticated DRF test client."""
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def api_client_for(db):
    """Build a DRF client logged in (session) as the given user."""
    from rest_framework.test import APIClient

    def make(user) -> APIClient:
        client = APIClient()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def web_client_for(db):
    """Build a Django test client logged in as the given user."""
    from django.test import Client

    def make(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture(autouse=True)
def _in_memory_broker():
    """Tasks enqueued on commit by any test go to an in-process broker, never to the demo's
    filesystem broker directory (tests/e2e points the app at Redis instead)."""
    from portal.celery import app

    saved = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = "memory://"
    app.conf.broker_transport_options = {}
    app._pool = None
    app.amqp._producer_pool = None
    yield
    app.conf.broker_url, app.conf.broker_transport_options = saved
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def run_enqueued_tasks(_in_memory_broker):
    """Run the tasks of the given names that were enqueued (to the in-memory broker) by code
    under test, the way a worker would receive them: name and arguments from the message.
    Other messages are dropped. Returns [(task name, args), ...] in the order received."""
    import importlib

    from portal.celery import app

    def run(*names: str) -> list[tuple[str, tuple]]:
        received = []
        with app.connection_for_write() as connection:
            queue = connection.SimpleQueue(app.conf.task_default_queue)
            try:
                while True:
                    try:
                        message = queue.get(block=False)
                    except queue.Empty:
                        break
                    name = message.headers["task"]
                    args, kwargs, _embed = message.decode()
                    message.ack()
                    if name not in names:
                        continue
                    module, attr = name.rsplit(".", 1)
                    getattr(importlib.import_module(module), attr).apply(args=args, kwargs=kwargs)
                    received.append((name, tuple(args)))
            finally:
                queue.close()
        return received

    return run
