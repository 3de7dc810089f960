"""manage.py watch_cluster: the live cluster watcher (see jobs/watcher and the README).

Run two replicas for high availability: one holds the Lease and writes, the other stands by.
`--check` exits 0 when the heartbeat file is fresh (the container healthcheck).
"""

import json
import signal
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

HEARTBEAT_MAX_AGE = 30.0


def default_health_file() -> Path:
    return Path(settings.VAR_DIR) / "watcher-health.json"


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
            try:
                state = json.loads(health.read_text())
            except (OSError, ValueError):
                sys.exit(1)
            sys.exit(0 if time.time() - float(state.get("time", 0)) < HEARTBEAT_MAX_AGE else 1)
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
