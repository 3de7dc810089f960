"""Celery tasks for GPU metrics. Each body calls one service."""

import logging

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(acks_late=True, ignore_result=True)
def collect() -> dict:
    """Beat, every PORTAL_METRICS_PERIOD_SECONDS: one sweep over the exporters (or Prometheus).

    A failed sweep is logged and left to the next period, never retried in a tight loop."""
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


@shared_task(acks_late=True, ignore_result=True)
def maintain() -> dict:
    """Beat, every few minutes: roll up ended jobs, warn about idle running jobs, retention."""
    from gpumetrics.services import apply_retention, check_idle, rollup_finished

    return {
        "rolled_up": rollup_finished(),
        "idle_warned": check_idle(),
        "deleted": apply_retention(),
    }
