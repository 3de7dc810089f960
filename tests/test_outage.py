"""While PostgreSQL (or Redis) cannot be reached: 503 with Retry-After and a sentence (JSON for
the API, a small page for the browser), one warning line and no traceback per request, and tasks
that retry with bounded backoff. The database is made unreachable for real: the test's
connection is pointed at a port nobody listens on (tests/e2e/test_database_outage.py stops a
whole PostgreSQL server instead)."""

from __future__ import annotations

import json
import logging
import socket

import psycopg
import pytest
import redis

from portal import outage


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def database_down(transactional_db):
    """Call it to start the outage: from then on every new connection of this process is
    refused. Set up what the test needs (users, logins, tokens) before."""
    from django.db import connection

    saved = dict(connection.settings_dict)

    def start() -> None:
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=closed_port())

    yield start
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


def outage_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "portal.outage"]


def assert_no_traceback_logged(caplog) -> None:
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_the_api_answers_503_with_retry_after_and_a_sentence(
    personas, api_client_for, database_down, caplog, settings
):
    settings.PORTAL_OUTAGE_RETRY_AFTER_SECONDS = 7
    client = api_client_for(personas.member)
    database_down()
    caplog.set_level(logging.INFO)
    for method, path in [("get", "/api/v1/jobs/"), ("post", "/api/v1/jobs/")]:
        response = getattr(client, method)(path, {"project": "alpha"}, format="json")
        assert response.status_code == 503, response.content
        assert response["Retry-After"] == "7"
        body = response.json()
        assert body["errors"] == {}
        assert body["detail"].startswith("The database is unavailable right now")
        assert "try again in 7 seconds" in body["detail"]
    warnings = outage_warnings(caplog)
    assert [r.levelno for r in warnings] == [logging.WARNING, logging.WARNING]
    assert "503 POST /api/v1/jobs/: The database is unavailable" in warnings[1].getMessage()
    assert "OperationalError" in warnings[1].getMessage()
    assert_no_traceback_logged(caplog)


def test_token_clients_get_the_same_503(personas, database_down, caplog):
    from rest_framework.test import APIClient

    from tenants.services import token_create

    _, secret = token_create(actor=personas.member)
    database_down()
    response = APIClient().get("/api/v1/jobs/", headers={"Authorization": f"Token {secret}"})
    assert response.status_code == 503
    assert "Retry-After" in response
    assert_no_traceback_logged(caplog)


def test_pages_answer_a_small_503_page(personas, web_client_for, database_down, caplog):
    client = web_client_for(personas.member)
    database_down()
    response = client.get("/jobs/")
    assert response.status_code == 503
    assert response["Content-Type"].startswith("text/html")
    assert int(response["Retry-After"]) >= 1
    text = response.content.decode()
    assert "Temporarily unavailable" in text
    assert "The database is unavailable right now" in text
    assert len(outage_warnings(caplog)) == 1
    assert_no_traceback_logged(caplog)


def test_an_outage_met_outside_a_view_is_a_503_too(database_down, rf):
    """handler500 (errors raised by middleware, e.g. saving a session) says 503 for an outage."""
    from django.db import connection

    from portal.api_errors import handler500

    request = rf.get("/api/v1/jobs/")
    database_down()
    with pytest.raises(Exception) as raised:
        connection.ensure_connection()
    try:
        raise raised.value
    except Exception:
        response = handler500(request)
    assert response.status_code == 503
    assert json.loads(response.content)["detail"].startswith("The database is unavailable")


def test_other_server_errors_stay_500(rf):
    from portal.api_errors import handler500

    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        response = handler500(rf.get("/api/v1/jobs/"))
    assert response.status_code == 500


def test_request_ids_are_echoed_or_made(client, db):
    given = client.get("/healthz", headers={"X-Request-ID": "lb-1234"})
    assert given["X-Request-ID"] == "lb-1234"
    made = client.get("/healthz")
    assert len(made["X-Request-ID"]) == 32
    # An id that would garble log lines is replaced.
    replaced = client.get("/healthz", headers={"X-Request-ID": "x" * 300})
    assert replaced["X-Request-ID"] != "x" * 300


# --- which errors count as an outage --------------------------------------------------------


def test_a_refused_database_connection_is_an_outage():
    with pytest.raises(psycopg.OperationalError) as raised:
        psycopg.connect(host="127.0.0.1", port=closed_port(), user="postgres", connect_timeout=2)
    assert outage.unavailable_service(raised.value) == outage.DATABASE


def test_a_refused_redis_connection_is_an_outage():
    client = redis.Redis(host="127.0.0.1", port=closed_port(), socket_connect_timeout=2)
    with pytest.raises(redis.exceptions.ConnectionError) as raised:
        client.ping()
    assert outage.unavailable_service(raised.value) == outage.REDIS


def test_query_errors_and_lock_timeouts_are_not_outages(db):
    """A lock timeout is an OperationalError too, but the server is there: not a 503."""
    from django.db import DatabaseError, connection, transaction

    with pytest.raises(DatabaseError) as division, transaction.atomic():
        connection.cursor().execute("SELECT 1 / 0")
    assert outage.unavailable_service(division.value) is None

    def sleep_past_the_timeout() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '1ms'")
            cursor.execute("SELECT pg_sleep(1)")

    with pytest.raises(DatabaseError) as timeout:
        sleep_past_the_timeout()
    assert outage.unavailable_service(timeout.value) is None
    assert outage.unavailable_service(RuntimeError("bug")) is None


# --- tasks ----------------------------------------------------------------------------------


def test_reconcile_retries_a_database_outage_a_bounded_number_of_times(database_down, caplog):
    """Celery's eager mode runs the retries at once (no countdown): 1 try + max_retries."""
    from jobs.tasks import reconcile_job

    database_down()
    caplog.set_level(logging.WARNING)
    result = reconcile_job.apply(args=(1,))
    assert result.state == "FAILURE"
    assert isinstance(result.result, outage.ServiceUnavailable)
    tries = [r for r in outage_warnings(caplog) if "retrying" in r.getMessage()]
    assert len(tries) == 1 + reconcile_job.max_retries
    assert reconcile_job.retry_backoff
    assert reconcile_job.retry_backoff_max <= 60


@pytest.mark.parametrize(
    "task_path",
    [
        "jobs.tasks.reconcile_array",
        "jobs.tasks.resync_jobs",
        "quotas.tasks.sync_quotas",
        "gpumetrics.tasks.collect",
        "gpumetrics.tasks.maintain",
    ],
)
def test_sync_tasks_retry_a_database_outage(database_down, caplog, task_path, request, settings):
    from django.utils.module_loading import import_string

    if task_path.endswith("collect"):
        # The sweep lists the exporter pods before it reads the database: a cluster to ask.
        from portal.kube.client import reset_api_client

        settings.KUBECONFIG = str(request.getfixturevalue("kubesim_api").kubeconfig)
        settings.PORTAL_KUBE_QPS = 0
        reset_api_client()
    task = import_string(task_path)
    database_down()
    args = (1,) if task_path.endswith("reconcile_array") else ()
    result = task.apply(args=args)
    assert result.state == "FAILURE"
    assert isinstance(result.result, outage.ServiceUnavailable)
    tries = [r for r in outage_warnings(caplog) if "retrying" in r.getMessage()]
    assert len(tries) == 1 + task.max_retries
