"""Reads for GPU metrics: a job's series at a resolution, its summary, project usage."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpumetrics import codec
from gpumetrics.models import JobGpu, JobGpuSummary, MetricBlock
from gpumetrics.series import SERIES, SERIES_INDEX, WIDTH
from jobs.models import Job

STEPS = {"raw": codec.RAW, "0": codec.RAW, "60": codec.MINUTE, "1m": codec.MINUTE}


def device_rows(
    device: JobGpu, resolution: int, *, since: int | None = None, until: int | None = None
) -> list[tuple[int, list[float]]]:
    """(t, row) of one device at a stored resolution, in time order, within [since, until]."""
    blocks = MetricBlock.objects.filter(device=device, resolution=resolution)
    if since is not None:
        blocks = blocks.filter(end__gte=since)
    if until is not None:
        blocks = blocks.filter(start__lte=until)
    return _rows(
        blocks.order_by("start").values_list("start", "ts", "vals"), resolution, since, until
    )


def _rows(blocks, resolution: int, since: int | None, until: int | None):
    w = codec.width(resolution)
    out: list[tuple[int, list[float]]] = []
    for start, ts, vals in blocks:
        times, values = codec.decode(start, resolution, ts, vals)
        for i, t in enumerate(times):
            if (since is None or t >= since) and (until is None or t <= until):
                out.append((t, values[i * w : (i + 1) * w].tolist()))
    return out


def devices_columns(
    devices: list[JobGpu], resolution: int, *, since: int | None = None, until: int | None = None
) -> dict[int, tuple[list[int], list[array]]]:
    """Like device_rows, but for several devices in one query and column-wise (times, one
    float array per column): the fast path for serving, which never builds a list per row."""
    blocks = MetricBlock.objects.filter(device__in=devices, resolution=resolution)
    if since is not None:
        blocks = blocks.filter(end__gte=since)
    if until is not None:
        blocks = blocks.filter(start__lte=until)
    by_device: dict[int, list] = defaultdict(list)
    for device_id, start, ts, vals in blocks.order_by("device_id", "start").values_list(
        "device_id", "start", "ts", "vals"
    ):
        by_device[device_id].append((start, ts, vals))
    return {d.pk: _columns(by_device.get(d.pk, []), resolution, since, until) for d in devices}


def _columns(blocks, resolution: int, since: int | None, until: int | None):
    w = codec.width(resolution)
    times: list[int] = []
    columns = [array("f") for _ in range(w)]
    for start, ts, vals in blocks:
        block_times, values = codec.decode(start, resolution, ts, vals)
        lo, hi = 0, len(block_times)
        if since is not None:
            lo = bisect_left(block_times, since)
        if until is not None:
            hi = bisect_right(block_times, until)
        if lo >= hi:
            continue
        times += block_times[lo:hi]
        for c in range(w):
            columns[c].extend(values[lo * w + c : hi * w : w])
    return times, columns


def _clean(values) -> list[float | None]:
    # NaN (no reading) becomes null. Values are the stored float32 as they are (rounding 160,000
    # values would cost more than the whole query of a day).
    out = values.tolist() if isinstance(values, array) else list(values)
    total = sum(out)
    if total == total:  # no NaN anywhere (the common case): nothing to replace
        return out
    return [None if v != v else v for v in out]


@dataclass(frozen=True)
class SeriesQuery:
    series: tuple[str, ...]
    since: int | None
    until: int | None
    step: int  # 0 = raw


def _resolution_for(job_devices: list[JobGpu], step: int) -> int:
    """The stored resolution to answer `step` from: the finest one that is not finer than the
    step and has data (raw samples are gone after the raw retention; rollups exist after the
    job ended)."""
    ids = [d.pk for d in job_devices]
    present = set(
        MetricBlock.objects.filter(device_id__in=ids)
        .values_list("resolution", flat=True)
        .distinct()
    )
    for resolution in sorted(present, reverse=True):
        if resolution <= step:
            return resolution
    return min(present) if present else codec.RAW


def job_metrics(job: Job, query: SeriesQuery) -> dict[str, Any]:
    """The job's series per GPU device (grouped by pod for gang jobs), and its summary."""
    devices = list(JobGpu.objects.filter(job=job).order_by("pod", "gpu_index", "mig_instance_id"))
    resolution = _resolution_for(devices, query.step)
    wanted = [SERIES_INDEX[name] for name in query.series]
    out_devices = []
    needs_bucketing = query.step > resolution
    columns_of = (
        {}
        if needs_bucketing
        else devices_columns(devices, resolution, since=query.since, until=query.until)
    )
    for device in devices:
        if not needs_bucketing:
            times, columns = columns_of[device.pk]
            entry = _device_entry(device, times)
            if resolution == codec.RAW:
                entry["mean"] = {SERIES[i].name: _clean(columns[i]) for i in wanted}
                entry["max"] = None
            else:
                entry["mean"] = {SERIES[i].name: _clean(columns[1 + i]) for i in wanted}
                entry["max"] = {SERIES[i].name: _clean(columns[1 + WIDTH + i]) for i in wanted}
            out_devices.append(entry)
            continue
        # Coarser than stored: bucket the stored points (means weighted by their counts).
        rows = device_rows(device, resolution, since=query.since, until=query.until)
        rows = codec.rollup(
            [t for t, _ in rows],
            [v for _, row in rows for v in row],
            src_width=codec.width(resolution),
            step=query.step,
            weighted=resolution != codec.RAW,
        )
        entry = _device_entry(device, [t for t, _ in rows])
        entry["mean"] = {SERIES[i].name: _clean([row[1 + i] for _, row in rows]) for i in wanted}
        entry["max"] = {
            SERIES[i].name: _clean([row[1 + WIDTH + i] for _, row in rows]) for i in wanted
        }
        out_devices.append(entry)
    pods: dict[str, list[int]] = defaultdict(list)
    for index, entry in enumerate(out_devices):
        pods[entry["pod"]].append(index)
    return {
        "job": job.pk,
        "state": job.state,
        "resolution": "raw" if resolution == codec.RAW else resolution,
        "step": query.step or None,
        "since": _iso(query.since),
        "until": _iso(query.until),
        "series": [
            {"name": SERIES[i].name, "unit": SERIES[i].unit, "help": SERIES[i].help} for i in wanted
        ],
        "devices": out_devices,
        "pods": [{"pod": pod, "devices": idx} for pod, idx in sorted(pods.items())],
        "summary": summary_dict(job),
    }


def _device_entry(device: JobGpu, times: list[int]) -> dict[str, Any]:
    return {
        "uuid": device.gpu_uuid,
        "mig_instance_id": device.mig_instance_id or None,
        "mig_profile": device.mig_profile or None,
        "gpu_index": device.gpu_index,
        "model": device.model_name,
        "node": device.node,
        "pod": device.pod,
        "first_seen": device.first_seen,
        "last_seen": device.last_seen,
        "timestamps": times,
    }


def _iso(epoch: int | None) -> str | None:
    return datetime.fromtimestamp(epoch, tz=UTC).isoformat() if epoch is not None else None


def summary_dict(job: Job) -> dict[str, Any] | None:
    summary = JobGpuSummary.objects.filter(job=job).first()
    if summary is None or summary.computed_at is None:
        return None
    return {
        "final": summary.final,
        "util_mean": summary.util_mean,
        "util_p95": summary.util_p95,
        "fb_peak_mib": summary.fb_peak_mib,
        "fb_total_mib": summary.fb_total_mib,
        "energy_kwh": summary.energy_kwh,
        "gpu_hours": summary.gpu_hours,
        "idle": summary.idle,
        "idle_verdict": summary.idle_verdict,
        "idle_fraction": summary.idle_fraction,
        "idle_threshold": summary.idle_threshold,
        "idle_warning": summary.idle_warned_at is not None,
        # A KAI fraction: the exporter reports the shared GPU as a whole, not this job's part.
        "shared_gpu": job.gpu_fraction is not None or job.gpu_memory is not None,
        "samples": summary.samples,
        "computed_at": summary.computed_at,
    }


def _share(profile: str) -> float:
    from gpumetrics.services import _mig_share

    return _mig_share(profile)


def project_usage(
    project, *, since: int | None, until: int | None, group_by: str
) -> list[dict[str, Any]]:
    """GPU-hours held and used and mean utilisation per user, day or pool, from the hourly
    rollups of the project's ended jobs. Used = held × mean utilisation."""
    devices = JobGpu.objects.filter(job__project=project).select_related(
        "job__submitter", "job__pool"
    )
    blocks = MetricBlock.objects.filter(device__in=devices, resolution=codec.HOUR)
    if since is not None:
        blocks = blocks.filter(end__gte=since)
    if until is not None:
        blocks = blocks.filter(start__lte=until)
    by_device = {d.pk: d for d in devices}
    from jobs.selectors import fraction_shares

    fractions = fraction_shares({d.job_id for d in by_device.values()})
    groups: dict[str, dict[str, Any]] = {}
    util_i = SERIES_INDEX["util"]
    for device_id, start, ts, vals in blocks.values_list("device_id", "start", "ts", "vals"):
        device = by_device[device_id]
        share = fractions.get(device.job_id) or _share(device.mig_profile)
        times, values = codec.decode(start, codec.HOUR, ts, vals)
        for i, t in enumerate(times):
            if (since is not None and t + 3600 <= since) or (until is not None and t > until):
                continue
            base = i * codec.ROLLUP_WIDTH
            minutes, util = values[base], values[base + 1 + util_i]
            if group_by == "user":
                key = device.job.submitter.get_username()
            elif group_by == "pool":
                key = device.job.pool.slug if device.job.pool else (device.model_name or "-")
            else:
                key = datetime.fromtimestamp(t, tz=UTC).date().isoformat()
            group = groups.setdefault(
                key, {group_by: key, "gpu_hours_held": 0.0, "gpu_hours_used": 0.0, "jobs": set()}
            )
            held = share * minutes / 60.0
            group["gpu_hours_held"] += held
            if not math.isnan(util):
                group["gpu_hours_used"] += held * util / 100.0
            group["jobs"].add(device.job_id)
    out = []
    for key in sorted(groups):
        group = groups[key]
        held = group["gpu_hours_held"]
        out.append(
            {
                group_by: key,
                "jobs": len(group["jobs"]),
                "gpu_hours_held": round(held, 4),
                "gpu_hours_used": round(group["gpu_hours_used"], 4),
                "util_mean": round(100.0 * group["gpu_hours_used"] / held, 2) if held else None,
            }
        )
    return out
