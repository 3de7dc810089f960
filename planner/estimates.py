"""How long a job is expected to run, from the submitter's history of similar jobs (pure).

"Similar" is the same submitter, image, kind and size (GPUs, pods, MIG profile): the selectors
group finished jobs by that key. With enough history the conservative estimate is a high
quantile of the past run times and the optimistic one a low quantile; without, the job's own
maximum runtime is the conservative estimate (it cannot run longer) and a quarter of it the
optimistic one. Neither ever exceeds the maximum runtime.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_SAMPLES = 3  # fewer past runs say too little: fall back on the maximum runtime
HIGH_QUANTILE = 0.9  # conservative
LOW_QUANTILE = 0.25
NO_HISTORY_LOW_SHARE = 0.25


@dataclass(frozen=True)
class DurationEstimate:
    low: float  # seconds
    high: float
    samples: int

    @property
    def from_history(self) -> bool:
        return self.samples >= MIN_SAMPLES


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between the closest ranks (NumPy's default)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)


def estimate_duration(*, max_runtime_seconds: float, history: Sequence[float]) -> DurationEstimate:
    """Expected run time of one job.

    >>> estimate_duration(max_runtime_seconds=3600, history=[])
    DurationEstimate(low=900.0, high=3600, samples=0)
    >>> estimate_duration(max_runtime_seconds=3600, history=[600, 600, 1200])
    DurationEstimate(low=600.0, high=1080.0, samples=3)
    """
    runs = [max(0.0, float(value)) for value in history]
    if len(runs) < MIN_SAMPLES:
        return DurationEstimate(
            low=max_runtime_seconds * NO_HISTORY_LOW_SHARE,
            high=max_runtime_seconds,
            samples=len(runs),
        )
    high = min(quantile(runs, HIGH_QUANTILE), max_runtime_seconds)
    low = min(quantile(runs, LOW_QUANTILE), high)
    return DurationEstimate(low=low, high=high, samples=len(runs))
