"""Celery tasks for GPU metrics. Each body calls one service."""

import logging

from celery import shared_task

from portal.outage import RETRY_ON_OUTAGE, ServiceUnavailable, retry_when_unavailable

log = logging.getLogger(__name__)

# Bounded by max_retries; for the beat tasks also by beat's `expires` (one period): the next run
# supersedes a late retry.
OUTAGE_RETRIES = {"autoretry_for": (ServiceUnavailable,), **RETRY_ON_OUTAGE}


@shared_task(acks_late=True, ignore_result=True, **OUTAGE_RETRIES)
@retry_when_unavailable
def collect() -> dict:
    """Beat, every PORTAL_METRICS_PERIOD_SECONDS: one sweep over the exporters (or Prometheus).

    A failed sweep is logged and left to the next period, never retried in a tight loop; only a
    database or Redis outage retries it, with backoff."""
    from gpumetrics.services import collect as run
    from portal.kube.apply import PermanentKubeError

    try:
        report = run()
    except PermanentKubeError as exc:  # e.g. no permission to list the exporter pods
        log.error("GPU metrics: the cluster refused the sweep: %s", exc.message)
        return {"error": exc.message}
    return {
        "source": report.source,
        "targets": report.targets,
        "failures": report.failures,
        "devices": report.ingest.devices,
        "attributed": report.ingest.attributed,
        "skipped_lines": report.ingest.skipped_lines,
    }


@shared_task(acks_late=True, ignore_result=True, **OUTAGE_RETRIES)
@retry_when_unavailable
def summarise_ended_job(job_id: int) -> bool:
    """Enqueued when a job reaches a terminal state: its final summary and rollups at once."""
    from gpumetrics.services import summarise_ended_job as run

    return run(job_id)


@shared_task(acks_late=True, ignore_result=True, **OUTAGE_RETRIES)
@retry_when_unavailable
def maintain() -> dict:
    """Beat, every few minutes: roll up ended jobs not rolled up yet (their end-of-job task
    was lost), warn about idle running jobs, retention."""
    from gpumetrics.services import apply_retention, check_idle, rollup_finished

    return {
        "rolled_up": rollup_finished(),
        "idle_warned": check_idle(),
        "deleted": apply_retention(),
    }
