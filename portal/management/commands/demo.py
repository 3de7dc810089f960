"""manage.py demo: everything `make demo` runs — migrate, seed, then serve until Ctrl-C.

The long-running parts are child processes listed by ``demo_children``: kubesim (the simulated
GPU cluster, its objects kept in var/kubesim/ across restarts), a Celery worker with beat embedded
on the filesystem broker (no broker server needed) and the web server. The command starts them in
order, watches them, and on Ctrl-C (or SIGTERM, or one of them exiting) stops all of them in
reverse order. Each child's output lines are prefixed with its name (``[web] ...``), so the web
access log and the worker's log stay apart. Once they run, it applies the demo quotas to the
cluster and submits a few sample jobs (the first time only), so a newcomer sees jobs queue and run
within a minute.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

STOP_TIMEOUT_SECONDS = 10
LABEL_WIDTH = len("[kubesim] ")


class LabelledOutput:
    """Writes whole lines from several threads to one stream, each prefixed with a label."""

    def __init__(self, out) -> None:
        self.out = out
        self.lock = threading.Lock()

    def pump(self, stream, label: str) -> None:
        """Copy a child's output, line by line, until it closes (the child exited)."""
        prefix = f"[{label}] ".ljust(LABEL_WIDTH)
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            with self.lock:
                self.out.write(prefix + line + "\n")
                self.out.flush()
        stream.close()


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
    # Where the child's output goes, labelled; None = straight to this process's stdout/stderr.
    output: LabelledOutput | None = None
    _pump: threading.Thread | None = None

    def start(self) -> None:
        piped = self.output is not None
        # The demo's own fixed commands (sys.executable with manage.py/celery/kubesim argv).
        self.process = subprocess.Popen(  # noqa: S603
            self.argv,
            cwd=settings.BASE_DIR,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            # Own process group: Ctrl-C reaches only the supervisor, which stops children in order.
            start_new_session=True,
            stdout=subprocess.PIPE if piped else None,
            stderr=subprocess.STDOUT if piped else None,
        )
        if piped:
            self._pump = threading.Thread(
                target=self.output.pump, args=(self.process.stdout, self.name), daemon=True
            )
            self._pump.start()

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """SIGTERM to the child alone, so it shuts down its own helpers in order (signalling the
        whole group made Celery's pool processes die first, and the worker log each one as an
        ERROR); SIGKILL to the whole group if it has not exited after STOP_TIMEOUT_SECONDS."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self._pump is not None:
            self._pump.join(timeout=2)  # its last lines before "Demo stopped."


def port_open(addr: str) -> Callable[[], bool]:
    """A readiness check: something accepts TCP connections on host:port."""
    host, _, port = addr.rpartition(":")

    def check() -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((host or "127.0.0.1", int(port))) == 0

    return check


def kubeconfig_ready(path: Path) -> Callable[[], bool]:
    """A readiness check: kubesim wrote its kubeconfig and accepts connections on its port."""

    def check() -> bool:
        if not path.exists():
            return False
        config = yaml.safe_load(path.read_text()) or {}
        server = config["clusters"][0]["cluster"]["server"]
        return port_open(server.removeprefix("https://"))()

    return check


DEMO_CLUSTER = Path(__file__).resolve().parents[1] / "demo_cluster.yaml"


def demo_children(*, addr: str) -> list[Child]:
    """The demo's long-running processes, started in this order and stopped in reverse."""
    manage = str(Path(settings.BASE_DIR) / "manage.py")
    var = Path(settings.VAR_DIR)
    kubeconfig = Path(settings.KUBECONFIG)
    kubesim_argv = [
        sys.executable,
        "-m",
        "kubesim",
        "--port",
        "0",
        "--kubeconfig-out",
        str(kubeconfig),
        "--state",
        str(var / "kubesim" / "state.json"),
        # kubesim's default cluster plus a KAI node pool for the demo's GPU fractions
        "--cluster",
        str(DEMO_CLUSTER),
    ]
    celery = str(Path(sys.executable).parent / "celery")
    return [
        Child("kubesim", kubesim_argv, ready=kubeconfig_ready(kubeconfig)),
        Child(
            "worker",
            [
                celery,
                "-A",
                "portal",
                "worker",
                "--beat",
                "--schedule",
                str(var / "celerybeat-schedule"),
                "--concurrency",
                "2",
                "--loglevel",
                "WARNING",
            ],
            # A demo cluster is small: resync often so states move while a newcomer watches.
            env={"PORTAL_RESYNC_SECONDS": os.environ.get("PORTAL_RESYNC_SECONDS", "10")},
        ),
        # The live cluster watcher: job states, timelines and quota use within a second.
        Child("watcher", [sys.executable, manage, "watch_cluster"]),
        Child(
            "web",
            [sys.executable, manage, "runserver", "--noreload", addr],
            ready=port_open(addr),
        ),
    ]


def prepare_demo_dirs() -> None:
    """The filesystem broker and kubesim need their folders; a stale kubeconfig must not be
    mistaken for a running kubesim."""
    var = Path(settings.VAR_DIR)
    for folder in (var / "broker" / "processed", var / "broker" / "control", var / "kubesim"):
        folder.mkdir(parents=True, exist_ok=True)
    Path(settings.KUBECONFIG).unlink(missing_ok=True)


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
    output = LabelledOutput(out)
    for child in children:
        child.output = output
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
            from jobs.demo import submit_demo_jobs
            from quotas.sync import sync_quota_objects

            try:
                sync_quota_objects()
            except Exception as exc:  # the worker's periodic resync retries it
                self.stderr.write(f"Quota objects not applied yet ({exc}); the resync retries.")
            submitted = submit_demo_jobs()
            if submitted:
                self.stdout.write(f"Submitted {submitted} sample jobs.")
            self.stdout.write(
                f"\nGPU Portal is ready: http://{addr}/  (admin console: http://{addr}/admin/)\n"
                f"The simulated cluster's kubeconfig: {settings.KUBECONFIG}\n"
                "Press Ctrl-C to stop.\n"
            )
            self.stdout.flush()

        self.stdout.write("Starting the demo processes (kubesim, worker, web)…")
        prepare_demo_dirs()
        code = supervise(demo_children(addr=addr), out=self.stdout, on_ready=announce)
        if code:
            raise CommandError(f"the demo stopped because a process failed (exit code {code})")
        self.stdout.write("Demo stopped.")
