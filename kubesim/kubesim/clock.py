"""Simulated clock shared by the API server and the controllers.

Simulated time starts at the wall-clock time of construction and runs `speed` times faster than
the wall clock, so tests can compress minutes of cluster behaviour into seconds.
"""

from __future__ import annotations

import asyncio
import datetime
import time as _time


class SimClock:
    def __init__(self, speed: float = 1.0):
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = float(speed)
        self._wall_start = _time.monotonic()
        self._sim_start = _time.time()

    def time(self) -> float:
        """Simulated epoch seconds."""
        return self._sim_start + (_time.monotonic() - self._wall_start) * self.speed

    def now(self) -> datetime.datetime:
        """Simulated time as an aware UTC datetime."""
        return datetime.datetime.fromtimestamp(self.time(), tz=datetime.UTC)

    async def sleep(self, sim_seconds: float) -> None:
        await asyncio.sleep(max(0.0, sim_seconds) / self.speed)


def rfc3339(dt: datetime.datetime) -> str:
    """Format as Kubernetes does for metav1.Time: seconds precision, UTC, trailing Z."""
    if dt.tzinfo is not None:
        dt = dt.astimezone(datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> datetime.datetime:
    """Parse a Kubernetes timestamp ("...Z", optionally with fractional seconds)."""
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
