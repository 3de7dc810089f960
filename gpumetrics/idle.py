"""Whether a job's GPUs sat idle: the one rule, pure (no Django).

A verdict needs evidence: a reading or two taken while the job starts up (a trainer that ran
3 s, seen by one sweep at 0 %) says nothing about how it used its GPUs. Only readings from at
least MIN_SWEEPS distinct sample times spanning at least the minimum span (5 minutes by
default, PORTAL_METRICS_IDLE_MIN_MINUTES) are judged; anything less is "too short to judge".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

IDLE = "idle"
BUSY = "busy"
TOO_SHORT = "too_short"
VERDICTS = (IDLE, BUSY, TOO_SHORT)

MIN_SWEEPS = 5
DEFAULT_MIN_SPAN_SECONDS = 300.0
# Idle when more than this share of the readings is below the utilisation threshold.
IDLE_SHARE = 0.5


@dataclass(frozen=True)
class IdleJudgement:
    verdict: str  # IDLE | BUSY | TOO_SHORT
    idle_fraction: float | None  # share of the readings below the threshold (None: no reading)

    @property
    def idle(self) -> bool:
        return self.verdict == IDLE


def idle_verdict(
    readings: Iterable[tuple[float, float]],
    *,
    threshold: float,
    min_span_seconds: float = DEFAULT_MIN_SPAN_SECONDS,
    min_sweeps: int = MIN_SWEEPS,
) -> IdleJudgement:
    """Judge (sample time, utilisation %) readings of all the job's GPUs (NaN left out before).

    Several GPUs read at the same time count as one sweep: eight GPUs seen once are one moment,
    not eight pieces of evidence."""
    times: set[float] = set()
    below = total = 0
    for t, util in readings:
        times.add(t)
        total += 1
        below += util < threshold
    if not total:
        return IdleJudgement(TOO_SHORT, None)
    fraction = below / total
    if len(times) < min_sweeps or max(times) - min(times) < min_span_seconds:
        return IdleJudgement(TOO_SHORT, fraction)
    return IdleJudgement(IDLE if fraction > IDLE_SHARE else BUSY, fraction)
