"""Celery application. Tasks take ids, not objects; the database rows are the results."""

import os

from celery import Celery
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


def _portal_logging(**_kwargs) -> None:
    # With PORTAL_LOG_FORMAT=json the workers log as the web processes do (portal/logs.py),
    # instead of Celery's own text format on the root logger.
    import logging.config

    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)


if os.environ.get("PORTAL_LOG_FORMAT") == "json":
    setup_logging.connect(_portal_logging)
