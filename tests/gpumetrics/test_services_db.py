"""Storage-side services on PostgreSQL with synthetic readings: the idle warning for running
jobs, retention per resolution, per-node totals of unheld GPUs, a sweep stored twice."""

import time

import pytest

from gpumetrics.parsing import DeviceKey, DeviceReading
from gpumetrics.series import FB_FREE, FB_USED, POWER, TENSOR, UTIL

pytestmark = pytest.mark.django_db

HOUR = 3600


def reading(job_id, namespace, uuid, util, node="n1"):
    return DeviceReading(
        key=DeviceKey(node, uuid),
        namespace=namespace,
        pod=f"gp-job-{job_id}-abcde" if job_id else "",
        fields={UTIL: util, TENSOR: util / 200, FB_USED: 100.0, FB_FREE: 900.0, POWER: 100.0},
    )


def sweep(jobs_utils, namespace, at):
    from gpumetrics import services

    readings = [reading(job.pk, namespace, f"GPU-{job.pk}", util) for job, util in jobs_utils] + [
        reading(None, "", "GPU-free", 3.0)
    ]
    return services.ingest(readings, at=at)


def test_idle_running_job_gets_one_warning_and_a_busy_one_none(make_job, personas):
    from gpumetrics import services
    from gpumetrics.models import JobGpuSummary, NodeHourTotal
    from jobs.models import JobEvent

    idle = make_job(state="running")
    busy = make_job(state="running")
    ns = personas.project_a.namespace
    now = int(time.time())
    start = now - 40 * 60
    for t in range(start, now, 15):
        sweep([(idle, 2.0), (busy, 85.0)], ns, t)
    warned = services.check_idle(now=now)
    assert warned == [idle.pk]
    (event,) = JobEvent.objects.filter(job=idle, reason="GpuIdle")
    assert "idle" in event.message
    assert "30 minutes" in event.message
    assert event.from_state == event.to_state == "running"
    assert not JobEvent.objects.filter(job=busy, reason="GpuIdle").exists()
    assert services.check_idle(now=now) == []  # once per job
    assert JobGpuSummary.objects.get(job=idle).idle_warned_at is not None
    summary = JobGpuSummary.objects.get(job=busy)
    assert summary.final is False
    assert summary.util_mean == pytest.approx(85.0)
    # the free GPU is kept only as a per-node total
    totals = NodeHourTotal.objects.filter(node="n1")
    assert sum(t.device_samples for t in totals) == len(range(start, now, 15))


def test_a_job_that_was_busy_recently_is_not_warned(make_job, personas):
    from gpumetrics import services

    job = make_job(state="running")
    ns = personas.project_a.namespace
    now = int(time.time())
    for i, t in enumerate(range(now - 40 * 60, now, 15)):
        sweep([(job, 90.0 if i == 150 else 0.0)], ns, t)  # one busy sample 2.5 min ago
    assert services.check_idle(now=now) == []


def test_the_same_sweep_stored_twice_counts_once(make_job, personas):
    from gpumetrics import codec
    from gpumetrics.models import JobGpu
    from gpumetrics.selectors import device_rows

    job = make_job(state="running")
    ns = personas.project_a.namespace
    at = int(time.time()) // 15 * 15
    sweep([(job, 50.0)], ns, at)
    sweep([(job, 50.0)], ns, at)
    sweep([(job, 60.0)], ns, at + 15)
    device = JobGpu.objects.get(job=job)
    assert device.samples == 2
    rows = device_rows(device, codec.RAW)
    assert [t for t, _ in rows] == [at, at + 15]
    assert [row[0] for _, row in rows] == [50.0, 60.0]


def test_retention_per_resolution(make_job, personas, settings):
    from gpumetrics import codec, services
    from gpumetrics.models import MetricBlock
    from jobs.services import job_transition

    ns = personas.project_a.namespace
    now = int(time.time())
    old = now - 100 * 86400
    ended = make_job()
    running = make_job(state="running")
    for t in range(old, old + 2 * HOUR, 60):
        sweep([(ended, 50.0), (running, 50.0)], ns, t)
    job_transition(
        ended, to="succeeded", reason="Completed", source="test", expected_from=ended.state
    )
    assert services.rollup_finished() == 1
    counts = lambda job, res: MetricBlock.objects.filter(device__job=job, resolution=res).count()  # noqa: E731
    assert counts(ended, codec.MINUTE) >= 1
    deleted = services.apply_retention(now=now)
    assert deleted["raw"] >= 1
    assert counts(ended, codec.RAW) == 0  # rolled up: raw samples go after 7 days
    assert counts(ended, codec.MINUTE) == 0  # 1-minute points go after 90 days
    assert counts(ended, codec.HOUR) >= 1  # hourly points stay
    assert counts(running, codec.RAW) >= 1  # not rolled up yet: kept
    settings.PORTAL_METRICS_RETENTION_HOUR_DAYS = 30
    services.apply_retention(now=now)
    assert counts(ended, codec.HOUR) == 0
