"""manage.py demo: everything `make demo` runs — migrate, seed, then serve until Ctrl-C.

The long-running parts are child processes listed by ``demo_children``; the command starts them
in order, watches them, and on Ctrl-C (or SIGTERM, or one of them exiting) stops all of them in
reverse order. Later parts of the demo (kubesim, a Celery worker) are added to that list.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

STOP_TIMEOUT_SECONDS = 10


@dataclass
class Child:
    """A process the demo supervises."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
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


def demo_children(*, addr: str) -> list[Child]:
    """The demo's long-running processes, started in this order and stopped in reverse."""
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    return [
        Child("web", [sys.executable, manage, "runserver", "--noreload", addr]),
    ]


def supervise(children: list[Child], *, out) -> int:
    """Start the children and wait; stop them all on a signal or when one exits. Exit code."""
    stop_requested = []

    def request_stop(signum, frame) -> None:
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    exit_code = 0
    try:
        for child in children:
            child.start()
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
        self.stdout.write(
            f"\nGPU Portal: http://{addr}/  (admin console: http://{addr}/admin/)\n"
            "Press Ctrl-C to stop.\n"
        )
        self.stdout.flush()
        code = supervise(demo_children(addr=addr), out=self.stdout)
        if code:
            raise CommandError(f"the demo stopped because a process failed (exit code {code})")
        self.stdout.write("Demo stopped.")
