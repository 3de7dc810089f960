"""Durations as people type them: '90m', '2h', '1h30m', '1d', '45s'; a bare number is minutes."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_seconds(text: str) -> int:
    """Seconds in `text`; raises ValueError with a message naming the accepted forms."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value) * 60
    if not value or _PART.sub("", value):
        raise ValueError(f"'{text}' is not a duration; use forms like 90m, 2h, 1h30m or 1d.")
    return sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(value))


def parse_minutes(text: str) -> int:
    """Whole minutes, rounded up (a job's maximum runtime is set in minutes)."""
    seconds = parse_seconds(text)
    if seconds <= 0:
        raise ValueError(f"'{text}' must be longer than zero.")
    return -(-seconds // 60)
