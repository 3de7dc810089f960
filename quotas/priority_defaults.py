"""The three priority classes every install starts with: one set, used by the seed migration,
the demo and the tests (which must not invent values of their own).

Pure constants, no Django import. Values follow Kubernetes PriorityClass conventions (higher runs
first); admins may tune values and descriptions later in the admin console.
"""

from __future__ import annotations

from typing import NamedTuple


class DefaultPriority(NamedTuple):
    name: str
    value: int
    preemptible: bool
    description: str


PRIORITY_CLASSES: tuple[DefaultPriority, ...] = (
    DefaultPriority("high", 1000, False, "Deadline work; never preempted."),
    DefaultPriority("normal", 100, True, "The default for interactive and training jobs."),
    DefaultPriority("low", 10, True, "Opportunistic work that yields to everything else."),
)

PRIORITY_VALUES: dict[str, int] = {p.name: p.value for p in PRIORITY_CLASSES}
