"""Celery application. Tasks take ids, not objects; the database rows are the results."""

import os
from pathlib import Path

from celery import Celery, bootsteps
from celery.signals import setup_logging, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _freeze_start_up_heap(**_kwargs) -> None:
    # As in the web processes (portal.runtime): full collections stop walking the start-up heap.
    from portal.runtime import freeze_startup_heap

    freeze_startup_heap()


class HeartbeatFile(bootsteps.StartStopStep):
    """Touches PORTAL_WORKER_HEARTBEAT_FILE every few seconds while the worker's consumer runs
    (connected to the broker, its event loop turning), and removes it when the consumer stops.
    The liveness probe (`python -m portal.probes fresh SECONDS FILE`) restarts a worker whose
    file went stale: cheaper than `celery inspect ping`, which sets Django up and asks the broker
    on every probe."""

    requires = {"celery.worker.consumer.connection:Connection"}
    INTERVAL = 5.0

    def __init__(self, parent, **kwargs):
        super().__init__(parent, **kwargs)
        self.tref = None
        self.path: Path | None = None

    def start(self, parent) -> None:
        from django.conf import settings

        name = getattr(settings, "PORTAL_WORKER_HEARTBEAT_FILE", "")
        if not name:
            return
        self.path = Path(name)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._touch()
        self.tref = parent.timer.call_repeatedly(self.INTERVAL, self._touch)

    def _touch(self) -> None:
        if self.path is not None:
            self.path.touch()

    def stop(self, parent) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    shutdown = stop


app.steps["consumer"].add(HeartbeatFile)


def _portal_logging(**_kwargs) -> None:
    # With PORTAL_LOG_FORMAT=json the workers log as the web processes do (portal/logs.py),
    # instead of Celery's own text format on the root logger.
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


if os.environ.get("PORTAL_LOG_FORMAT") == "json":
    setup_logging.connect(_portal_logging)
