"""The audit trail's periodic retention (the only path that deletes audit rows)."""

from celery import shared_task
from django.conf import settings

from audit.services import purge_expired


@shared_task(name="audit.tasks.purge_expired_events")
def purge_expired_events() -> int:
    return purge_expired(settings.PORTAL_AUDIT_RETENTION_DAYS)
