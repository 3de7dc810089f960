"""Fixtures for notification tests: a real SMTP server (aiosmtpd), local HTTP receivers for
webhooks, and a job factory. The tasks run the way a worker receives them (run_enqueued_tasks)."""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

NOTIFICATION_TASKS = (
    "notifications.tasks.job_ended",
    "notifications.tasks.dispatch",
    "notifications.tasks.flush_digest",
    "notifications.tasks.deliver",
)


@dataclass
class SmtpInbox:
    host: str
    port: int
    messages: list = field(default_factory=list)


@pytest.fixture
def smtp_server(settings):
    """aiosmtpd on a free local port; Django's SMTP backend pointed at it."""
    from email import message_from_bytes

    from aiosmtpd.controller import Controller

    with socket.socket() as probe:  # aiosmtpd checks it is up by connecting: a real port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = SmtpInbox("127.0.0.1", port)

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            message = message_from_bytes(envelope.original_content)
            inbox.messages.append((envelope.rcpt_tos, message))
            return "250 Message accepted for delivery"

    # Its INFO lines about closed connections can come after the test, into a closed capture.
    logging.getLogger("mail.log").setLevel(logging.WARNING)
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST = inbox.host
        settings.EMAIL_PORT = inbox.port
        settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
        settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
        yield inbox
    finally:
        controller.stop()


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes


class Receiver:
    """A local HTTP server recording every POST; `hold` makes it accept and answer nothing until
    `release()` (an endpoint that times out)."""

    def __init__(self, status: int = 200, hold: bool = False):
        self.requests: list[Received] = []
        self.status = status
        self.released = threading.Event()
        if not hold:
            self.released.set()
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.requests.append(Received(self.path, dict(self.headers), body))
                receiver.arrived.set()
                receiver.released.wait(30)
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def release(self) -> None:
        self.released.set()

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers():
    made: list[Receiver] = []

    def make(**kwargs) -> Receiver:
        receiver = Receiver(**kwargs)
        made.append(receiver)
        return receiver

    yield make
    for receiver in made:
        receiver.stop()


@pytest.fixture
def make_job(personas):
    from jobs.models import Job

    counter = {"n": 0}

    def make(**overrides):
        counter["n"] += 1
        fields = {
            "project": personas.project_a,
            "submitter": personas.member,
            "name": f"job-{counter['n']}",
            "kind": "single",
            "image": "pytorch/pytorch:2.4.0",
            "command": ["python", "train.py"],
            "env": {},
            "gpus": 1,
            "replicas": 1,
            "cpu": "4",
            "memory": "16Gi",
            "priority": "normal",
            "max_runtime_minutes": 60,
            "backend": "kueue",
        }
        fields.update(overrides)
        return Job.objects.create(**fields)

    return make


@pytest.fixture
def run_notification_tasks(run_enqueued_tasks, django_capture_on_commit_callbacks):
    """Run enqueued notification tasks (and those they enqueue in turn) until none is left;
    returns the names run, in order."""

    def run() -> list[str]:
        names: list[str] = []
        while True:
            with django_capture_on_commit_callbacks(execute=True):
                ran = run_enqueued_tasks(*NOTIFICATION_TASKS)
            if not ran:
                return names
            names += [name for name, _ in ran]

    return run


@pytest.fixture
def internal_webhook(personas):
    """A webhook endpoint of the member's to a local receiver (allowed by staff: loopback)."""
    from notifications.models import WebhookEndpoint

    def make(url: str, *, user=None, format: str = "generic", name: str = "hook"):
        return WebhookEndpoint.objects.create(
            user=user or personas.member,
            name=name,
            url=url,
            format=format,
            secret="s3cret-for-tests",
            allow_internal=True,
        )

    return make
