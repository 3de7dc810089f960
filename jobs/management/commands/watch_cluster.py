"""manage.py watch_cluster: the live cluster watcher (see jobs/watcher and the README).

Run two replicas for high availability: one holds the Lease and writes, the other stands by.
`--check` exits 0 when the watcher that writes the heartbeat file is alive and the file is fresh
(the container healthcheck and the Kubernetes liveness probe), 1 otherwise with a line why.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

HEARTBEAT_MAX_AGE = 30.0


def default_health_file() -> Path:
    return Path(settings.VAR_DIR) / "watcher-health.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def heartbeat_problem(health: Path, *, now: float | None = None) -> str:
    """Why the watcher behind `health` is not healthy; "" when it is."""
    try:
        state = json.loads(health.read_text())
        beat = float(state.get("time", 0))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return f"no readable heartbeat in {health} ({exc})"
    pid = state.get("pid")
    # Heartbeats written before the pid was recorded carry none: judged on age alone.
    if isinstance(pid, int) and not _alive(pid):
        return f"the watcher that wrote {health} (pid {pid}) is not running"
    age = (time.time() if now is None else now) - beat
    if age >= HEARTBEAT_MAX_AGE:
        return f"heartbeat {age:.0f} s old (limit {HEARTBEAT_MAX_AGE:g} s)"
    return ""


class Command(BaseCommand):
    help = "Watch the cluster and keep job states, timelines, pods and quota usage current."

    def add_arguments(self, parser):
        parser.add_argument("--identity", default="", help="Lease holder name")
        parser.add_argument("--health-file", default="", help="Heartbeat file path")
        parser.add_argument(
            "--check", action="store_true", help="Exit 0 if the heartbeat is fresh, else 1"
        )

    def handle(self, *args, **options):
        health = Path(options["health_file"]) if options["health_file"] else default_health_file()
        if options["check"]:
            problem = heartbeat_problem(health)
            if problem:
                self.stderr.write(f"watch_cluster --check: {problem}")
                sys.exit(1)
            sys.exit(0)
        # The watcher paces itself on its own budget and holds one stream per collection.
        settings.PORTAL_KUBE_QPS = settings.PORTAL_WATCHER_KUBE_QPS
        settings.PORTAL_KUBE_BURST = max(int(settings.PORTAL_WATCHER_KUBE_QPS * 2), 1)
        settings.PORTAL_KUBE_POOL_SIZE = 32
        from jobs.watcher.runner import Watcher

        health.parent.mkdir(parents=True, exist_ok=True)
        watcher = Watcher(identity=options["identity"], health_file=health)

        def stop(signum, frame):
            watcher.shutdown.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write(f"watch_cluster: {watcher.identity} campaigning for the lease")
        self.stdout.flush()
        watcher.run()
