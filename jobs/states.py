"""The job state machine: the states a user sees and the only allowed transitions.

This module is the single source of truth: the model's choices, the database CheckConstraint,
`jobs.services.job_transition` and the status mapping all read it.

A reconcile reads the cluster only every so often, so it may observe a job several steps further
on than the portal last recorded (Submitted straight to Running or Succeeded); those edges are
allowed on purpose. Nothing ever goes back to Submitted, and terminal states are absorbing.
"""

from django.db import models


class JobState(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"  # stored; not yet seen in the cluster
    QUEUED = "queued", "Queued"  # the cluster has it and it waits for quota or placement
    ADMITTED = "admitted", "Admitted"  # quota granted, pods starting
    RUNNING = "running", "Running"
    PREEMPTED = "preempted", "Preempted"  # evicted by a higher priority or a reclaim; requeued
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


S = JobState

TERMINAL: frozenset[str] = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
ACTIVE: frozenset[str] = frozenset(s for s in S.values if s not in TERMINAL)

_ENDINGS = {S.SUCCEEDED, S.FAILED, S.CANCELLED}

TRANSITIONS: dict[str, frozenset[str]] = {
    S.SUBMITTED: frozenset({S.QUEUED, S.ADMITTED, S.RUNNING, *_ENDINGS}),
    S.QUEUED: frozenset({S.ADMITTED, S.RUNNING, S.PREEMPTED, *_ENDINGS}),
    S.ADMITTED: frozenset({S.QUEUED, S.RUNNING, S.PREEMPTED, *_ENDINGS}),
    S.RUNNING: frozenset({S.QUEUED, S.PREEMPTED, *_ENDINGS}),
    S.PREEMPTED: frozenset({S.QUEUED, S.ADMITTED, S.RUNNING, *_ENDINGS}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


def can_transition(current: str, to: str) -> bool:
    return to in TRANSITIONS.get(current, frozenset())


def sources_for(to: str) -> frozenset[str]:
    """Every state from which `to` may be entered (the compare-and-set filter)."""
    return frozenset(src for src, targets in TRANSITIONS.items() if to in targets)


def is_terminal(state: str) -> bool:
    return state in TERMINAL
