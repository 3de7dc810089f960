"""manage.py demo: everything `make demo` runs — migrate, seed, then serve until Ctrl-C.

The long-running parts are child processes listed by ``demo_children``; the command starts them
in order, watches them, and on Ctrl-C (or SIGTERM, or one of them exiting) stops all of them in
reverse order. Later parts of the demo (kubesim, a Celery worker) are added to that list.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

STOP_TIMEOUT_SECONDS = 10


@dataclass
class Child:
    """A process the demo supervises.

    ``ready`` (optional) answers whether the process is ready to serve; the next child starts
    only once it is (e.g. the worker after kubesim), within ``ready_timeout`` seconds.
    """

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] | None = None
    ready_timeout: float = 60.0
    process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.argv,
            cwd=settings.BASE_DIR,
            env={**os.environ, **self.env},
            # Own process group: Ctrl-C reaches only the supervisor, which stops children in order.
            start_new_session=True,
        )

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def port_open(addr: str) -> Callable[[], bool]:
    """A readiness check: something accepts TCP connections on host:port."""
    host, _, port = addr.rpartition(":")

    def check() -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((host or "127.0.0.1", int(port))) == 0

    return check


def demo_children(*, addr: str) -> list[Child]:
    """The demo's long-running processes, started in this order and stopped in reverse."""
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    return [
        Child(
            "web",
            [sys.executable, manage, "runserver", "--noreload", addr],
            ready=port_open(addr),
        ),
    ]


def _wait_ready(child: Child, stop_requested: list) -> str | None:
    """None once the child is ready; otherwise why it is not."""
    if child.ready is None:
        return None
    deadline = time.monotonic() + child.ready_timeout
    while not stop_requested:
        if child.poll() is not None:
            return f"{child.name} exited with code {child.poll()} while starting"
        if child.ready():
            return None
        if time.monotonic() > deadline:
            return f"{child.name} was not ready after {child.ready_timeout:g} s"
        time.sleep(0.2)
    return None


def supervise(children: list[Child], *, out, on_ready: Callable[[], None] | None = None) -> int:
    """Start the children in order, each once the previous is ready, and wait.

    Stops them all (in reverse order) on Ctrl-C / SIGTERM or when one exits; returns the exit
    code (0 after a requested stop). ``on_ready`` runs once every child is ready.
    """
    stop_requested = []

    def request_stop(signum, frame) -> None:
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    exit_code = 0
    try:
        for child in children:
            if stop_requested:
                break
            child.start()
            problem = _wait_ready(child, stop_requested)
            if problem:
                out.write(f"{problem}; stopping the demo.")
                return 1
        if on_ready is not None and not stop_requested:
            on_ready()
        while not stop_requested:
            exited = [(child, child.poll()) for child in children if child.poll() is not None]
            if exited:
                child, code = exited[0]
                out.write(f"{child.name} exited with code {code}; stopping the demo.")
                exit_code = code or 1
                break
            time.sleep(0.2)
    finally:
        for child in reversed(children):
            child.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exit_code


class Command(BaseCommand):
    help = "Migrate, seed the demo organisation and serve the portal until Ctrl-C."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--addr", default="127.0.0.1:8000", help="Address to serve on (host:port)."
        )
        parser.add_argument(
            "--no-serve",
            action="store_true",
            help="Only migrate and seed, then exit (no long-running processes).",
        )

    def handle(self, *args, addr: str, no_serve: bool, **options) -> None:
        Path(settings.VAR_DIR).mkdir(parents=True, exist_ok=True)
        self.stdout.write("Applying database migrations…")
        call_command("migrate", interactive=False, verbosity=0)
        call_command("seed_demo", stdout=self.stdout)
        if no_serve:
            return

        def announce() -> None:
            self.stdout.write(
                f"\nGPU Portal is ready: http://{addr}/  (admin console: http://{addr}/admin/)\n"
                "Press Ctrl-C to stop.\n"
            )
            self.stdout.flush()

        self.stdout.write("Starting the demo processes…")
        code = supervise(demo_children(addr=addr), out=self.stdout, on_ready=announce)
        if code:
            raise CommandError(f"the demo stopped because a process failed (exit code {code})")
        self.stdout.write("Demo stopped.")
