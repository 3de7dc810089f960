"""The CLI's retries against a real HTTP server on this machine that fails, then answers.

A submission carries an Idempotency-Key and is retried with the same key on any 5xx, a broken
connection or a refused one, waiting what Retry-After asks (capped), for a bounded time; calls
without a key (cancel) are not repeated once they may have reached the portal. The clock and
sleep are the client's own, injected, so the waits are recorded instead of slept.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner
from gpuportal.cli import cli
from gpuportal.client import MAX_WAIT_SECONDS, Client
from gpuportal.errors import EXIT_SERVER, CliError

JOB = {"id": 7, "name": "single-1", "project": "vision", "state": "submitted", "warnings": []}


class ScriptedPortal:
    """Answers each request with the next step of a script: (status, headers, body) or "drop"
    (read the request, then close the connection without a word); the last step repeats."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.requests: list[dict] = []
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                portal.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                step = portal.steps[min(len(portal.requests), len(portal.steps)) - 1]
                if step == "drop":
                    self.close_connection = True
                    return
                status, headers, payload = step
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def keys(self) -> list[str | None]:
        return [r["headers"].get("Idempotency-Key") for r in self.requests]


UNAVAILABLE = {"detail": "The database is unavailable right now.", "errors": {}}


class FakeClock:
    """The client's clock and sleep: sleeping moves the clock and records the wait."""

    def __init__(self):
        self.now = 0.0
        self.waits: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def client_for(portal, clock: FakeClock, **kwargs) -> Client:
    return Client(portal.url, "token", sleep=clock.sleep, clock=clock, timeout=5, **kwargs)


def test_a_keyed_submission_is_retried_with_the_same_key_until_it_is_answered():
    clock = FakeClock()
    steps = [
        (503, {"Retry-After": "3"}, UNAVAILABLE),
        (500, {}, {"detail": "Server error; it has been logged.", "errors": {}}),
        "drop",
        (201, {}, JOB),
    ]
    with ScriptedPortal(steps) as portal:
        job = client_for(portal, clock).post("/api/v1/jobs/", {"x": 1}, idempotency_key="k-1")
    assert job["id"] == 7
    assert portal.keys() == ["k-1"] * 4
    assert {r["body"] for r in portal.requests} == {b'{"x":1}'}
    # Retry-After as asked, then exponential backoff.
    assert clock.waits == [3.0, 1.0, 2.0]


def test_retry_after_is_capped():
    clock = FakeClock()
    steps = [(503, {"Retry-After": "3600"}, UNAVAILABLE), (200, {}, JOB)]
    with ScriptedPortal(steps) as portal:
        client_for(portal, clock).post("/api/v1/jobs/", {}, idempotency_key="k")
    assert clock.waits == [MAX_WAIT_SECONDS]


def test_the_retries_are_bounded_and_the_error_says_how_to_repeat_safely():
    clock = FakeClock()
    with ScriptedPortal([(503, {"Retry-After": "3"}, UNAVAILABLE)]) as portal:
        client = client_for(portal, clock, submit_retry_seconds=10)
        with pytest.raises(CliError) as raised:
            client.post("/api/v1/jobs/", {}, idempotency_key="abc-123")
    assert len(portal.requests) == 4  # at 0, 3, 6 and 9 s; the next would be past 10 s
    assert raised.value.exit_code == EXIT_SERVER
    assert "The database is unavailable right now." in raised.value.message
    assert "--idempotency-key abc-123" in raised.value.message


def test_a_portal_that_is_not_listening_is_retried_too():
    clock = FakeClock()
    with ScriptedPortal([(201, {}, JOB)]) as portal:
        url = portal.url
    # The server is gone: every connection is refused.
    client = Client(url, "token", sleep=clock.sleep, clock=clock, submit_retry_seconds=5)
    with pytest.raises(CliError) as raised:
        client.post("/api/v1/jobs/", {}, idempotency_key="k")
    assert "Cannot reach" in raised.value.message
    assert clock.waits == [0.5, 1.0, 2.0]


def test_client_errors_are_not_retried():
    clock = FakeClock()
    refused = {"detail": "gpus: too many", "errors": {"gpus": ["too many"]}}
    portal = ScriptedPortal([(400, {}, refused), (201, {}, JOB)])
    with portal, pytest.raises(CliError, match="too many"):
        client_for(portal, clock).post("/api/v1/jobs/", {}, idempotency_key="k")
    assert len(portal.requests) == 1


def test_a_call_without_a_key_is_never_repeated_once_sent():
    clock = FakeClock()
    portal = ScriptedPortal(["drop", (200, {}, JOB)])
    with portal, pytest.raises(CliError, match="may or may not have been carried out"):
        client_for(portal, clock).post("/api/v1/jobs/7/cancel/")
    assert len(portal.requests) == 1
    portal = ScriptedPortal([(503, {"Retry-After": "1"}, UNAVAILABLE), (200, {}, JOB)])
    with portal, pytest.raises(CliError, match="unavailable"):
        client_for(portal, clock).post("/api/v1/jobs/7/cancel/")
    assert len(portal.requests) == 1


def test_gpuportal_submit_sends_one_key_and_survives_an_outage(monkeypatch):
    """The command itself, with real waits (Retry-After: 0, then a short backoff)."""
    steps = [(503, {"Retry-After": "0"}, UNAVAILABLE), "drop", (200, {}, JOB)]
    with ScriptedPortal(steps) as portal:
        monkeypatch.setenv("GPUPORTAL_URL", portal.url)
        monkeypatch.setenv("GPUPORTAL_TOKEN", "token")
        result = CliRunner().invoke(
            cli, ["submit", "-p", "vision", "--image", "busybox", "--", "true"]
        )
    assert result.exit_code == 0, result.output
    assert "Submitted job 7 (single-1)" in result.stdout
    assert result.stderr.count("retrying") == 2
    keys = portal.keys()
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert len(keys[0]) == 36  # a UUID


def test_each_submit_gets_its_own_key_unless_one_is_given(monkeypatch):
    with ScriptedPortal([(201, {}, JOB)]) as portal:
        monkeypatch.setenv("GPUPORTAL_URL", portal.url)
        monkeypatch.setenv("GPUPORTAL_TOKEN", "token")
        args = ["submit", "-p", "vision", "--image", "busybox", "--", "true"]
        for _ in range(2):
            assert CliRunner().invoke(cli, args).exit_code == 0
        given = ["submit", "--idempotency-key", "nightly-2026-12-02", *args[1:]]
        assert CliRunner().invoke(cli, given).exit_code == 0
    keys = portal.keys()
    assert keys[0] != keys[1]
    assert keys[2] == "nightly-2026-12-02"
