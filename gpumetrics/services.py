"""Writes for GPU metrics: one sweep's readings into the job GPU records and packed blocks,
events (XID, isolation check, idle), rollups after a job ends, and retention.

Safe to run twice at once: a sweep's timestamp is its period slot (two overlapping sweeps write
the same time, and the reader keeps one), device rows are upserts on their natural key, and the
rollup of a job runs under a row lock on its summary.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from gpumetrics import codec
from gpumetrics import idle as idle_rule
from gpumetrics.attribution import (
    KAI_RESERVATION_NAMESPACE,
    JobFacts,
    attribute,
    job_id_from_pod,
)
from gpumetrics.conf import MetricsConfig, config
from gpumetrics.models import (
    ExporterStatus,
    JobGpu,
    JobGpuSummary,
    MetricBlock,
    NodeHourTotal,
)
from gpumetrics.parsing import DeviceReading
from gpumetrics.series import SERIES_INDEX, XID, row_from_fields, xid_meaning
from gpumetrics.sources import SweepResult, read_prometheus, scrape_exporters
from jobs.models import Job, JobEvent, JobKind, JobPod
from jobs.services import job_record_event
from jobs.states import ACTIVE, TERMINAL, JobState
from notifications.events import GPU_IDLE
from notifications.services import notify
from portal.kube import metrics as kube_metrics
from quotas import sharing

log = logging.getLogger(__name__)
SOURCE = "gpu-metrics"


@dataclass
class IngestReport:
    at: int
    devices: int = 0
    attributed: int = 0
    jobs: int = 0
    samples: int = 0
    skipped_lines: int = 0
    events: list[str] = field(default_factory=list)


def _epoch(dt: datetime) -> int:
    return int(dt.timestamp())


def _dt(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def slot(now: float, period: float) -> int:
    """The sweep's timestamp: the start of its period slot (shared by overlapping sweeps)."""
    period = max(1, int(period))
    return int(now) - int(now) % period


def devices_expected(kind: str, gpus: int, replicas: int) -> int:
    pods = replicas if kind == JobKind.GANG else 1
    return pods if kind == JobKind.MIG else max(1, gpus) * pods


def _job_facts(readings: list[DeviceReading]) -> dict[int, JobFacts]:
    ids = {job_id_from_pod(r.pod) for r in readings if r.pod}
    ids.discard(None)
    if not ids:
        return {}
    rows = Job.objects.filter(pk__in=ids).values_list(
        "pk", "project__namespace", "kind", "gpus", "replicas", "pool__sharing_mode"
    )
    return {
        pk: JobFacts(
            pk,
            namespace,
            devices_expected(kind, gpus, replicas),
            shared=sharing.is_shared(mode or sharing.EXCLUSIVE),
        )
        for pk, namespace, kind, gpus, replicas, mode in rows
    }


def _shared_gpus(readings: list[DeviceReading]) -> dict[str, dict[int, float]]:
    """GPU UUID → {job id: share} for the GPUs KAI's reservation pods hold in this sweep: the
    live fraction jobs whose pods were put on them (JobPod.gpu_group and the UUID the
    reservation pod reported)."""
    uuids = {r.key.uuid for r in readings if r.namespace == KAI_RESERVATION_NAMESPACE}
    if not uuids:
        return {}
    # Live fraction pods are few; their UUIDs are matched here rather than with a JSON
    # containment lookup, which SQLite (the demo's database) does not have.
    rows = [
        (job_id, held)
        for job_id, held in JobPod.objects.filter(deleted=False, job__state__in=sorted(ACTIVE))
        .exclude(gpu_group="")
        .values_list("job_id", "gpu_uuids")
        if uuids.intersection(held or ())
    ]
    from jobs.selectors import fraction_shares  # jobs' reads; gpumetrics sits above jobs

    shares = fraction_shares({job_id for job_id, _ in rows})
    out: dict[str, dict[int, float]] = {}
    for job_id, held in rows:
        for uuid in held or ():
            if uuid in uuids and job_id in shares:
                out.setdefault(uuid, {})[job_id] = shares[job_id]
    return out


def _upsert_devices(at: int, by_job: dict[int, list[DeviceReading]]) -> dict[tuple, tuple]:
    """Upsert the JobGpu rows of this sweep; {(job, uuid, gi, pod): (id, last_xid)}."""
    now = _dt(at)
    unique: dict[tuple, tuple[int, DeviceReading]] = {}
    for job_id, readings in by_job.items():
        for r in readings:
            # One row per natural key even if two exporters report the same device.
            unique.setdefault((job_id, r.key.uuid, r.key.gi_id, r.pod), (job_id, r))
    rows = [
        (
            job_id,
            r.key.node,
            r.key.uuid,
            r.gpu_index[:8],
            r.key.gi_id[:8],
            r.gi_profile[:32],
            r.model[:64],
            r.pod[:253],
            r.container[:253],
            now,
            now,
            1,
            0,
        )
        for job_id, r in unique.values()
    ]
    if not rows:
        return {}
    if connection.vendor != "postgresql":
        return _upsert_devices_portable(now, rows)
    table = JobGpu._meta.db_table
    columns = (
        "job_id, node, gpu_uuid, gpu_index, mig_instance_id, mig_profile, model_name, pod, "
        "container, first_seen, last_seen, samples, last_xid"
    )
    placeholders = ", ".join(["(" + ", ".join(["%s"] * 13) + ")"] * len(rows))
    # The table and columns are the model's own names; every value is a query parameter.
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES {placeholders} "  # noqa: S608
        "ON CONFLICT (job_id, gpu_uuid, mig_instance_id, pod) DO UPDATE SET "
        f"node = EXCLUDED.node, last_seen = GREATEST({table}.last_seen, EXCLUDED.last_seen), "
        # a second sweep of the same slot (two beats at once) does not count twice
        f"samples = {table}.samples + (EXCLUDED.last_seen > {table}.last_seen)::int "
        "RETURNING id, job_id, gpu_uuid, mig_instance_id, pod, last_xid"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [v for row in rows for v in row])
        return {(j, u, g, p): (pk, xid) for pk, j, u, g, p, xid in cursor.fetchall()}


def _upsert_devices_portable(now: datetime, rows: list[tuple]) -> dict[tuple, tuple]:
    """The same upsert row by row through the ORM (the demo's SQLite)."""
    out = {}
    for job_id, node, uuid, index, gi, profile, model, pod, container, *_ in rows:
        device, created = JobGpu.objects.get_or_create(
            job_id=job_id,
            gpu_uuid=uuid,
            mig_instance_id=gi,
            pod=pod,
            defaults={
                "node": node,
                "gpu_index": index,
                "mig_profile": profile,
                "model_name": model,
                "container": container,
                "first_seen": now,
                "last_seen": now,
                "samples": 1,
            },
        )
        if not created and now > device.last_seen:
            device.last_seen, device.samples, device.node = now, device.samples + 1, node
            device.save(update_fields=["last_seen", "samples", "node"])
        out[(job_id, uuid, gi, pod)] = (device.pk, device.last_xid)
    return out


def _append_raw(at: int, rows: list[tuple[int, list[float]]]) -> None:
    """Append one raw row per device to the block of the current span (created if missing)."""
    if not rows:
        return
    start = codec.block_start(at, codec.RAW)
    encoded = [(device_id, *codec.encode(start, codec.RAW, [(at, row)])) for device_id, row in rows]
    table = MetricBlock._meta.db_table
    if connection.vendor == "postgresql":
        placeholders = ", ".join(["(%s, 0, %s, %s, %s, %s)"] * len(encoded))
        params = []
        for device_id, ts, vals in encoded:
            params += [device_id, start, at, ts, vals]
        with connection.cursor() as cursor:
            # The model's own table name; every value is a query parameter.
            cursor.execute(
                f'INSERT INTO {table} (device_id, resolution, start, "end", ts, vals) '  # noqa: S608
                f"VALUES {placeholders} "
                "ON CONFLICT (device_id, resolution, start) DO UPDATE SET "
                f"ts = {table}.ts || EXCLUDED.ts, vals = {table}.vals || EXCLUDED.vals, "
                f'"end" = GREATEST({table}."end", EXCLUDED."end")',
                params,
            )
        return
    # Other databases (the demo's SQLite): read, concatenate, write.
    for device_id, ts, vals in encoded:
        block, created = MetricBlock.objects.get_or_create(
            device_id=device_id,
            resolution=codec.RAW,
            start=start,
            defaults={"end": at, "ts": ts, "vals": vals},
        )
        if not created:
            block.ts = bytes(block.ts) + ts
            block.vals = bytes(block.vals) + vals
            block.end = max(block.end, at)
            block.save(update_fields=["ts", "vals", "end"])


def _once(job_id: int, reason: str, message: str) -> str | None:
    """Write a warning event unless the job already has this exact one."""
    if JobEvent.objects.filter(job_id=job_id, reason=reason, message=message).exists():
        return None
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return None
    job_record_event(job, reason=reason, message=message, source=SOURCE)
    return message


def _node_totals(at: int, attribution) -> None:
    hour = _dt(at - at % 3600)
    for node, total in attribution.unattributed.items():
        updated = NodeHourTotal.objects.filter(node=node, hour=hour).update(
            device_samples=F("device_samples") + total.devices,
            held_by_others=F("held_by_others") + total.held_by_others,
            util_sum=F("util_sum") + total.util_sum,
        )
        if not updated:
            NodeHourTotal.objects.get_or_create(
                node=node,
                hour=hour,
                defaults={
                    "device_samples": total.devices,
                    "held_by_others": total.held_by_others,
                    "util_sum": total.util_sum,
                },
            )


def _wait_for_ingest() -> None:
    """Inside a transaction: take the sweep lock (held until commit) so no sweep is stored
    meanwhile."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext('gpumetrics.ingest'))")


def ingest(readings: dict | list[DeviceReading], *, at: int) -> IngestReport:
    """Store one sweep's readings taken at epoch second `at`."""
    devices = list(readings.values()) if isinstance(readings, dict) else list(readings)
    report = IngestReport(at=at, devices=len(devices))
    jobs = _job_facts(devices)
    attribution = attribute(devices, jobs, _shared_gpus(devices))
    with transaction.atomic():
        # Sweeps store one at a time (a slow one and the next beat's may overlap).
        _wait_for_ingest()
        ids = _upsert_devices(at, attribution.by_job)
        rows = []
        appended: set[int] = set()
        xids: list[tuple[int, int, DeviceReading, int]] = []
        for job_id, held in attribution.by_job.items():
            for r in held:
                device_id, last_xid = ids[(job_id, r.key.uuid, r.key.gi_id, r.pod)]
                if device_id in appended:
                    continue
                appended.add(device_id)
                rows.append((device_id, row_from_fields(r.fields, mig=r.key.is_mig)))
                xid = int(r.fields.get(XID, 0) or 0)
                if xid != last_xid:
                    xids.append((job_id, device_id, r, xid))
                report.samples += len(r.fields)
        _append_raw(at, rows)
        for job_id, device_id, r, xid in xids:
            JobGpu.objects.filter(pk=device_id).update(last_xid=xid)
            if xid:
                message = (
                    f"XID {xid} on GPU {r.key} (node {r.key.node}, pod {r.pod}): {xid_meaning(xid)}"
                )
                job = Job.objects.get(pk=job_id)
                job_record_event(job, reason="XidError", message=message, source=SOURCE)
                report.events.append(message)
        for job_id, messages in attribution.warnings.items():
            for message in messages:
                if _once(job_id, "IsolationCheck", message):
                    report.events.append(message)
        _node_totals(at, attribution)
    report.attributed = sum(len(v) for v in attribution.by_job.values())
    report.jobs = len(attribution.by_job)
    return report


def _record_targets(sweep: SweepResult) -> None:
    now = timezone.now()
    for target in sweep.targets:
        status, _ = ExporterStatus.objects.get_or_create(
            pod=target.pod, defaults={"node": target.node}
        )
        if target.ok:
            ExporterStatus.objects.filter(pk=status.pk).update(
                node=target.node,
                last_success=now,
                consecutive_failures=0,
                skipped_lines=F("skipped_lines") + target.skipped_lines,
            )
        else:
            ExporterStatus.objects.filter(pk=status.pk).update(
                node=target.node,
                last_failure=now,
                consecutive_failures=F("consecutive_failures") + 1,
                failures=F("failures") + 1,
                last_error=target.error[:2000],
            )


def _backing_off(cfg: MetricsConfig, now: datetime) -> frozenset[str]:
    """Exporters that failed repeatedly wait (2 periods doubling per failure, at most 5 min)
    instead of being hammered every sweep."""
    out = set()
    for pod, failures, last in ExporterStatus.objects.filter(
        consecutive_failures__gte=2, last_failure__isnull=False
    ).values_list("pod", "consecutive_failures", "last_failure"):
        wait = min(300.0, cfg.period * 2 ** min(failures - 1, 10))
        if (now - last).total_seconds() < wait:
            out.add(pod)
    return frozenset(out)


@dataclass
class CollectReport:
    source: str
    targets: int
    failures: int
    ingest: IngestReport


def collect(*, cfg: MetricsConfig | None = None, now: float | None = None) -> CollectReport:
    """One sweep: read every exporter (or Prometheus), store, count failures."""
    cfg = cfg or config()
    at = slot(now if now is not None else time.time(), cfg.period)
    if cfg.source == "prometheus":
        sweep = read_prometheus(cfg)
    else:
        pods = kube_metrics.list_exporter_pods(cfg.namespace, cfg.label_selector)
        sweep = scrape_exporters(cfg, pods, skip=_backing_off(cfg, timezone.now()))
    report = ingest(sweep.readings.devices, at=at)
    report.skipped_lines = sweep.readings.skipped_lines
    if sweep.readings.skipped_lines:
        log.warning(
            "skipped %d unparsable exporter line(s), e.g. %s",
            sweep.readings.skipped_lines,
            sweep.readings.errors[:2],
        )
    _record_targets(sweep)
    return CollectReport(cfg.source, len(sweep.targets), sweep.failures, report)


# ---------------------------------------------------------------------------------------------
# Summary, rollups, idle warnings, retention


def _mig_share(profile: str) -> float:
    """The share of a GPU a MIG instance stands for (compute slices of 7; e.g. 3g → 3/7)."""
    if not profile:
        return 1.0
    head = profile.split("g", 1)[0]
    return min(1.0, int(head) / 7) if head.isdigit() else 1.0


def summary_from_rows(
    devices: list[tuple[float, list[tuple[int, list[float]]]]],
    *,
    period: float,
    threshold: float,
    held_seconds: float,
    idle_min_span: float = idle_rule.DEFAULT_MIN_SPAN_SECONDS,
) -> dict:
    """Figures of a job from its raw rows: [(device share, [(t, row), ...]), ...]. Pure."""
    util_i, fb_i, total_i, power_i = (
        SERIES_INDEX["util"],
        SERIES_INDEX["fb_used"],
        SERIES_INDEX["fb_total"],
        SERIES_INDEX["power"],
    )
    utils: list[float] = []
    timed_utils: list[tuple[float, float]] = []
    fb_peak = fb_total = None
    energy_j = 0.0
    for share, rows in devices:
        for i, (t, row) in enumerate(rows):
            util = row[util_i]
            if not math.isnan(util):
                utils.append(util)
                timed_utils.append((t, util))
            if not math.isnan(row[fb_i]):
                fb_peak = row[fb_i] if fb_peak is None else max(fb_peak, row[fb_i])
            if not math.isnan(row[total_i]):
                fb_total = row[total_i] if fb_total is None else max(fb_total, row[total_i])
            nxt = rows[i + 1][0] if i + 1 < len(rows) else t + period
            dt = min(max(0.0, nxt - t), 2 * period)
            if not math.isnan(row[power_i]):
                energy_j += row[power_i] * share * dt
    utils.sort()
    judged = idle_rule.idle_verdict(
        timed_utils, threshold=threshold, min_span_seconds=idle_min_span
    )
    return {
        "util_mean": sum(utils) / len(utils) if utils else None,
        "util_p95": utils[min(len(utils) - 1, math.ceil(0.95 * len(utils)) - 1)] if utils else None,
        "fb_peak_mib": fb_peak,
        "fb_total_mib": fb_total,
        "energy_kwh": energy_j / 3.6e6,
        "gpu_hours": held_seconds / 3600.0,
        "idle_fraction": judged.idle_fraction,
        "idle": judged.idle,  # False when too short to judge
        "idle_verdict": judged.verdict,
        "idle_threshold": threshold,
        "samples": len(utils),
    }


def _raw_rows(device: JobGpu) -> list[tuple[int, list[float]]]:
    from gpumetrics.selectors import device_rows

    return device_rows(device, codec.RAW)


def compute_summary(
    job: Job, *, cfg: MetricsConfig | None = None, final: bool = False
) -> JobGpuSummary:
    cfg = cfg or config()
    devices = list(JobGpu.objects.filter(job=job))
    data = []
    held = 0.0
    from jobs.selectors import fraction_shares

    fraction = fraction_shares([job.pk]).get(job.pk)
    for device in devices:
        # GPU-hours count the part of the GPU a fraction job held.
        share = fraction if fraction is not None else _mig_share(device.mig_profile)
        data.append((share, _raw_rows(device)))
        held += share * ((device.last_seen - device.first_seen).total_seconds() + cfg.period)
    figures = summary_from_rows(
        data,
        period=cfg.period,
        threshold=cfg.idle_threshold,
        held_seconds=held,
        idle_min_span=cfg.idle_min_minutes * 60,
    )
    summary, _ = JobGpuSummary.objects.update_or_create(
        job=job, defaults={**figures, "final": final, "computed_at": timezone.now()}
    )
    return summary


def _write_blocks(device: JobGpu, resolution: int, points: list[tuple[int, list[float]]]) -> None:
    MetricBlock.objects.filter(device=device, resolution=resolution).delete()
    by_start: dict[int, list] = defaultdict(list)
    for t, row in points:
        by_start[codec.block_start(t, resolution)].append((t, row))
    MetricBlock.objects.bulk_create(
        [
            MetricBlock(
                device=device,
                resolution=resolution,
                start=start,
                end=rows[-1][0],
                ts=(enc := codec.encode(start, resolution, rows))[0],
                vals=enc[1],
            )
            for start, rows in sorted(by_start.items())
        ]
    )


def rollup_job(job: Job, *, cfg: MetricsConfig | None = None) -> JobGpuSummary | None:
    """After a job ends: final summary, then 1-minute and hourly (mean, max) blocks from the
    raw samples. Idempotent: rollups are rewritten whole; runs once (row lock + flag)."""
    cfg = cfg or config()
    with transaction.atomic():
        # A sweep being stored (it may hold the job's last samples) is finished first.
        _wait_for_ingest()
        summary, _ = JobGpuSummary.objects.select_for_update().get_or_create(job=job)
        if summary.rolled_up_at is not None:
            return summary
        summary = compute_summary(job, cfg=cfg, final=True)
        for device in JobGpu.objects.filter(job=job):
            rows = _raw_rows(device)
            if not rows:
                continue
            times = [t for t, _ in rows]
            flat = [v for _, row in rows for v in row]
            minutes = codec.rollup(
                times, flat, src_width=codec.width(codec.RAW), step=codec.MINUTE, weighted=False
            )
            _write_blocks(device, codec.MINUTE, minutes)
            m_times = [t for t, _ in minutes]
            m_flat = [v for _, row in minutes for v in row]
            hours = codec.rollup(
                m_times, m_flat, src_width=codec.ROLLUP_WIDTH, step=codec.HOUR, weighted=True
            )
            # An hour's count is the number of minutes with samples (minutes held).
            minute_counts: dict[int, int] = defaultdict(int)
            for t in m_times:
                minute_counts[t - t % codec.HOUR] += 1
            hours = [(t, [float(minute_counts[t]), *row[1:]]) for t, row in hours]
            _write_blocks(device, codec.HOUR, hours)
        JobGpuSummary.objects.filter(pk=job.pk).update(rolled_up_at=timezone.now())
        summary.rolled_up_at = timezone.now()
    return summary


def summarise_ended_job(job_id: int) -> bool:
    """The final summary and rollups of a job that has just ended; False when there is nothing
    to summarise (no such job, not ended, or no GPU records)."""
    job = Job.objects.filter(pk=job_id, state__in=TERMINAL).first()
    if job is None or not JobGpu.objects.filter(job=job).exists():
        return False
    rollup_job(job)
    return True


def rollup_finished(*, limit: int = 200) -> int:
    """Roll up every ended job that has GPU records and no rollup yet."""
    ids = list(
        Job.objects.filter(state__in=TERMINAL, gpu_devices__isnull=False)
        .filter(Q(gpu_summary__isnull=True) | Q(gpu_summary__rolled_up_at__isnull=True))
        .values_list("pk", flat=True)
        .distinct()[:limit]
    )
    for job in Job.objects.filter(pk__in=ids):
        rollup_job(job)
    return len(ids)


def check_idle(*, cfg: MetricsConfig | None = None, now: float | None = None) -> list[int]:
    """Warn (once) about running jobs whose GPUs stayed below the idle threshold for the last
    PORTAL_METRICS_IDLE_WARN_MINUTES minutes; refresh their running summary."""
    cfg = cfg or config()
    now = now if now is not None else time.time()
    window = cfg.idle_warn_minutes * 60
    since = _dt(now - window)
    warned = []
    candidates = (
        Job.objects.filter(state=JobState.RUNNING, gpu_devices__first_seen__lte=since)
        .filter(Q(gpu_summary__isnull=True) | Q(gpu_summary__idle_warned_at__isnull=True))
        .select_related("project", "submitter")
        .distinct()
    )
    for job in candidates:
        from gpumetrics.selectors import device_rows

        utils = []
        for device in JobGpu.objects.filter(job=job, last_seen__gte=since):
            rows = device_rows(device, codec.RAW, since=int(now - window))
            utils += [row[SERIES_INDEX["util"]] for _, row in rows]
        utils = [u for u in utils if not math.isnan(u)]
        summary = compute_summary(job, cfg=cfg)
        if utils and max(utils) < cfg.idle_threshold:
            minutes = int(cfg.idle_warn_minutes)
            job_record_event(
                job,
                reason="GpuIdle",
                message=(
                    f"the job's GPUs have been idle (utilisation below {cfg.idle_threshold:g} %) "
                    f"for the last {minutes} minutes; cancel it if it is not doing GPU work"
                ),
                source=SOURCE,
            )
            JobGpuSummary.objects.filter(pk=summary.pk).update(idle_warned_at=timezone.now())
            _notify_idle(job, minutes=minutes, threshold=cfg.idle_threshold)
            warned.append(job.pk)
    return warned


def _notify_idle(job: Job, *, minutes: int, threshold: float) -> None:
    """The submitter's idle-GPU message (once per job: dedupe key gpu.idle:<job id>)."""
    base = settings.PORTAL_BASE_URL.rstrip("/")
    url = f"{base}/jobs/{job.pk}/" if base else ""
    text = (
        f"Job {job.pk} ({job.name}) in project {job.project.slug} has kept its GPUs idle "
        f"(utilisation below {threshold:g} %) for the last {minutes} minutes. Cancel it if it "
        "is not doing GPU work, so that others can use them."
    )
    notify(
        GPU_IDLE,
        user=job.submitter,
        subject=f"Job {job.pk} ({job.name}): GPUs idle for {minutes} minutes",
        text=f"{text}\n\n{url}" if url else text,
        payload={
            "job": {"id": job.pk, "name": job.name, "project": job.project.slug, "url": url},
            "idle_minutes": minutes,
            "threshold_percent": threshold,
        },
        dedupe_key=f"{GPU_IDLE}:{job.pk}",
        project=job.project,
    )


def apply_retention(*, cfg: MetricsConfig | None = None, now: float | None = None) -> dict:
    """Delete blocks older than each resolution's retention. Raw blocks of a job go only once
    its rollups exist, so nothing is lost before it is summarised."""
    cfg = cfg or config()
    now = now if now is not None else time.time()
    deleted = {}
    raw_cut = now - cfg.retention_raw_days * 86400
    deleted["raw"] = MetricBlock.objects.filter(
        resolution=codec.RAW,
        end__lt=raw_cut,
        device__job__gpu_summary__rolled_up_at__isnull=False,
    ).delete()[0]
    if cfg.retention_minute_days > 0:
        cut = now - cfg.retention_minute_days * 86400
        deleted["minute"] = MetricBlock.objects.filter(
            resolution=codec.MINUTE, end__lt=cut
        ).delete()[0]
    if cfg.retention_hour_days > 0:
        cut = now - cfg.retention_hour_days * 86400
        deleted["hour"] = MetricBlock.objects.filter(resolution=codec.HOUR, end__lt=cut).delete()[0]
    NodeHourTotal.objects.filter(
        hour__lt=_dt(now) - timedelta(days=cfg.retention_minute_days or 90)
    ).delete()
    return deleted
