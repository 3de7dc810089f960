"""The packed storage format of metric blocks. Pure: bytes in, numbers out.

A block holds the samples of one job GPU at one resolution over a fixed, aligned span:
- `ts`: unsigned 16-bit offsets from the block start, in units of the resolution (seconds for
  raw samples, minutes for the 1-minute rollup, hours for the hourly one);
- `vals`: little-endian float32, one row per offset. Raw rows have one column per series
  (gpumetrics.series.SERIES order, NaN where a reading was missing); rollup rows have
  [count, mean of each series..., max of each series...].
So a raw device sample costs 2 + 4 × 7 bytes for 7 series, ~4.6 bytes per series value, plus the
block row's overhead shared by up to 240 samples.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable, Sequence

from gpumetrics.series import WIDTH

RAW = 0
MINUTE = 60
HOUR = 3600
RESOLUTIONS = (RAW, MINUTE, HOUR)
# The span of one block per resolution (seconds): blocks are aligned to multiples of it.
BLOCK_SPAN = {RAW: 3600, MINUTE: 86400, HOUR: 86400 * 32}
ROLLUP_WIDTH = 1 + 2 * WIDTH
_LITTLE = sys.byteorder == "little"


def unit(resolution: int) -> int:
    return max(1, resolution)


def block_start(t: int, resolution: int) -> int:
    span = BLOCK_SPAN[resolution]
    return t - t % span


def width(resolution: int) -> int:
    return WIDTH if resolution == RAW else ROLLUP_WIDTH


def encode(
    start: int, resolution: int, rows: Iterable[tuple[int, Sequence[float]]]
) -> tuple[bytes, bytes]:
    """(ts, vals) bytes of rows (t, values) that all fall in the block starting at `start`."""
    step = unit(resolution)
    offsets = array("H")
    values = array("f")
    w = width(resolution)
    for t, row in rows:
        offset = (t - start) // step
        if not 0 <= offset < 65536:
            raise ValueError(f"time {t} is outside the block starting at {start}")
        if len(row) != w:
            raise ValueError(f"expected {w} values per row, got {len(row)}")
        offsets.append(offset)
        values.extend(row)
    if not _LITTLE:
        offsets.byteswap()
        values.byteswap()
    return offsets.tobytes(), values.tobytes()


def decode(start: int, resolution: int, ts: bytes, vals: bytes) -> tuple[list[int], array]:
    """(times, flat float values) of a block; rows with the same time keep the last one."""
    offsets = array("H")
    offsets.frombytes(bytes(ts))
    values = array("f")
    values.frombytes(bytes(vals))
    if not _LITTLE:
        offsets.byteswap()
        values.byteswap()
    w = width(resolution)
    n = min(len(offsets), len(values) // w)
    step = unit(resolution)
    times = [start + o * step for o in offsets[:n]]
    if all(times[i] < times[i + 1] for i in range(n - 1)):
        return times, values[: n * w]
    # Out of order or repeated (two overlapping sweeps appended the same scrape): sort, dedupe.
    last: dict[int, int] = {}
    for i, t in enumerate(times):
        last[t] = i
    order = sorted(last)
    out = array("f")
    for t in order:
        i = last[t]
        out.extend(values[i * w : (i + 1) * w])
    return order, out


def rollup(
    times: Sequence[int], values: Sequence[float], *, src_width: int, step: int, weighted: bool
) -> list[tuple[int, list[float]]]:
    """Bucket rows into `step`-second points: [count, means..., maxes...] per point.

    Raw input (weighted=False): count = raw samples in the bucket. Rollup input (weighted=True,
    rows [count, means, maxes]): counts add up, means are count-weighted, maxes are maxed.
    NaN readings are left out of a series' mean and max (NaN when none is left).
    """
    buckets: dict[int, list[int]] = {}
    for i, t in enumerate(times):
        buckets.setdefault(t - t % step, []).append(i)
    out = []
    for bucket, rows in sorted(buckets.items()):
        count = 0.0
        means, maxes = [], []
        for s in range(WIDTH):
            total = weight = 0.0
            peak = -math.inf
            for i in rows:
                base = i * src_width
                if weighted:
                    w = values[base]
                    mean, high = values[base + 1 + s], values[base + 1 + WIDTH + s]
                else:
                    w, mean = 1.0, values[base + s]
                    high = mean
                if w <= 0 or math.isnan(mean):
                    continue
                total += mean * w
                weight += w
                if high > peak:
                    peak = high
            means.append(total / weight if weight else math.nan)
            maxes.append(peak if weight else math.nan)
        for i in rows:
            count += values[i * src_width] if weighted else 1.0
        out.append((bucket, [count, *means, *maxes]))
    return out
