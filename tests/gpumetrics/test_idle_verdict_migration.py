"""The migration that adds the idle verdict judges the summaries already stored again: a job
flagged idle from a single sweep is no longer flagged; one sampled long enough keeps its flag."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("gpumetrics", "0001_gpu_metrics")]
AFTER = [("gpumetrics", "0002_summary_idle_verdict")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def test_stored_summaries_are_judged_on_their_evidence(make_job):
    old = _migrate(BEFORE)
    try:
        JobGpu = old.get_model("gpumetrics", "JobGpu")
        JobGpuSummary = old.get_model("gpumetrics", "JobGpuSummary")
        now = timezone.now()
        jobs = {}
        for name, sweeps, span_minutes, idle in [
            ("start-up", 1, 0, True),  # 8 GPUs read once at 0 %
            ("long-idle", 40, 10, True),
            ("long-busy", 40, 10, False),
        ]:
            job = make_job(state="succeeded", gpus=8)
            jobs[name] = job.pk
            for i in range(8):
                JobGpu.objects.create(
                    job_id=job.pk,
                    node="n1",
                    gpu_uuid=f"GPU-{job.pk}-{i}",
                    first_seen=now - timedelta(minutes=span_minutes),
                    last_seen=now,
                    samples=sweeps,
                )
            JobGpuSummary.objects.create(
                job_id=job.pk, idle=idle, idle_fraction=1.0 if idle else 0.0, samples=8 * sweeps
            )
        new = _migrate(AFTER)
        judged = {
            s.job_id: (s.idle_verdict, s.idle)
            for s in new.get_model("gpumetrics", "JobGpuSummary").objects.all()
        }
        assert judged[jobs["start-up"]] == ("too_short", False)
        assert judged[jobs["long-idle"]] == ("idle", True)
        assert judged[jobs["long-busy"]] == ("busy", False)
    finally:
        _migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
