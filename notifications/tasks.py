"""Celery tasks of notifications. Each body calls one service; each delivery is a task of its
own, so a slow or failing endpoint holds up nothing but its own message."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from notifications import producers, services


def backoff_seconds(attempt: int) -> float:
    """Exponential backoff after the `attempt`-th try (1, 2, ...), capped at an hour."""
    return min(settings.PORTAL_NOTIFY_RETRY_BASE_SECONDS * 2 ** (attempt - 1), 3600.0)


@shared_task(ignore_result=True)
def dispatch(notification_id: int) -> str:
    return services.dispatch(notification_id)


@shared_task(ignore_result=True)
def flush_digest(user_id: int) -> int:
    return services.flush_digest(user_id)


@shared_task(
    bind=True,
    ignore_result=True,
    max_retries=None,  # bounded by PORTAL_NOTIFY_MAX_ATTEMPTS below
    # Short limits: a delivery does one SMTP exchange or one POST with its own timeouts.
    soft_time_limit=60,
    time_limit=90,
)
def deliver(self, delivery_id: int) -> str:
    attempt = self.request.retries + 1
    final = attempt >= settings.PORTAL_NOTIFY_MAX_ATTEMPTS
    try:
        return services.deliver(delivery_id, final_attempt=final).status
    except services.RetryDelivery as exc:
        raise self.retry(exc=exc, countdown=backoff_seconds(attempt)) from exc


@shared_task(ignore_result=True)
def job_ended(job_id: int) -> bool:
    """Enqueued by the job's terminal transition."""
    return producers.announce_job_end(job_id)


@shared_task(ignore_result=True)
def sweep() -> dict:
    """Beat, every PORTAL_NOTIFY_SWEEP_SECONDS: jobs waiting longer than their owner's limit,
    job ends whose message was lost, digests and notifications left pending by a lost message."""
    return producers.sweep()
