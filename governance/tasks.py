"""Celery tasks of governance: the periodic end of temporary quota requests."""

from celery import shared_task

from governance.services import quota_requests_end
from portal.outage import RETRY_ON_OUTAGE, ServiceUnavailable, retry_when_unavailable


@shared_task(acks_late=True, autoretry_for=(ServiceUnavailable,), **RETRY_ON_OUTAGE)
@retry_when_unavailable
def end_quota_requests() -> dict[str, int]:
    """Periodic, idempotent: quota requests past their end date give their GPUs back (never
    below what the project's running jobs hold; the rest at a later run)."""
    return quota_requests_end()
