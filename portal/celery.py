"""Celery application. Tasks take ids, not objects; the database rows are the results."""

import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _freeze_start_up_heap(**_kwargs) -> None:
    # As in the web processes (portal.runtime): full collections stop walking the start-up heap.
    from portal.runtime import freeze_startup_heap

    freeze_startup_heap()
