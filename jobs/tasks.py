"""Celery tasks for jobs. Each body calls one service; the Job row is the result.

Layering: this module sits on top (it imports jobs.reconcile.services and the
services); the services
enqueue work by task name (jobs.services.RECONCILE_TASK), never by importing this module.

Retries: RetryableKubeError (409, 429, 5xx, no connection, a terminating namespace, a missing
CRD), JobBusy (another worker holds the job's lock) and ServiceUnavailable (PostgreSQL or Redis
cannot be reached: portal.outage) retry with exponential backoff and jitter, at most 30 s apart;
after the last retry the periodic resync picks the job up again, so a long outage delays jobs but
never loses them. Permanent rejections are handled inside the service
(the job becomes Failed with the API server's message).
"""

import logging
import time

from celery import shared_task
from django.conf import settings

from jobs.arrays import reconcile as array_reconcile
from jobs.idempotency import expire_submission_keys
from jobs.reconcile import services as reconcile
from jobs.reconcile.locking import JobBusy
from jobs.services import ARRAY_RECONCILE_TASK, RECONCILE_TASK
from portal import observability
from portal.kube.apply import RetryableKubeError
from portal.logs import log_context
from portal.outage import RETRY_ON_OUTAGE, ServiceUnavailable, retry_when_unavailable
from quotas.tasks import sync_quotas

log = logging.getLogger(__name__)


@shared_task(
    bind=True,
    name=RECONCILE_TASK,
    autoretry_for=(RetryableKubeError, JobBusy, ServiceUnavailable),
    **RETRY_ON_OUTAGE,
    acks_late=True,
    # No per-call signature check on the request path (it costs ~5 ms a submission).
    typing=False,
)
def reconcile_job(self, job_id: int) -> str:
    with log_context(job_id=job_id):
        return _reconcile_job(job_id)


@retry_when_unavailable
def _reconcile_job(job_id: int) -> str:
    started = time.monotonic()
    try:
        outcome = reconcile.job_reconcile(job_id=job_id)
    except Exception as exc:
        observability.count("reconcile_failures_total", reason=type(exc).__name__)
        observability.observe(
            "reconcile_duration_seconds", time.monotonic() - started, outcome="error"
        )
        raise
    observability.observe(
        "reconcile_duration_seconds", time.monotonic() - started, outcome=str(outcome)[:32]
    )
    return outcome


@shared_task(
    name=ARRAY_RECONCILE_TASK,
    autoretry_for=(RetryableKubeError, JobBusy, ServiceUnavailable),
    **RETRY_ON_OUTAGE,
    acks_late=True,
    typing=False,
)
@retry_when_unavailable
def reconcile_array(array_id: int) -> dict[str, int]:
    """Apply an array's held elements (in batches, up to its parallelism) and clean up its
    cancelled ones (jobs.arrays.reconcile)."""
    started = time.monotonic()
    counts = array_reconcile.array_reconcile(array_id=array_id)
    observability.observe("array_reconcile_duration_seconds", time.monotonic() - started)
    return counts


# The periodic tasks retry an outage too; beat's `expires` (one period) drops a retry the next
# run supersedes.
@shared_task(acks_late=True, autoretry_for=(ServiceUnavailable,), **RETRY_ON_OUTAGE)
@retry_when_unavailable
def resync_jobs() -> dict[str, int]:
    """Periodic: bring every live job in line with the cluster (bulk reads per namespace) and
    sweep objects no live job wants; forget expired Idempotency-Keys."""
    counts = reconcile.resync_jobs(enqueue=reconcile_job.delay)
    counts["expired_keys"] = expire_submission_keys()
    return counts


@shared_task(acks_late=True, autoretry_for=(ServiceUnavailable,), **RETRY_ON_OUTAGE)
@retry_when_unavailable
def resync_all() -> None:
    """The beat entry point: jobs and quota objects."""
    resync_jobs.delay()
    sync_quotas.delay()


def resync_seconds() -> float:
    return float(getattr(settings, "PORTAL_RESYNC_SECONDS", 60))
