"""Reads for workspaces: who sees which, and what the pages show."""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from jobs.states import ACTIVE, JobState
from tenants.permissions import WRITER_ROLES
from workspaces import states
from workspaces.models import Workspace, WorkspaceKind


def kinds_enabled() -> QuerySet[WorkspaceKind]:
    return WorkspaceKind.objects.filter(enabled=True)


def openable_by(user: Any) -> Q:
    """The owner, and the project's members (admins, members) when the owner shared it.
    Staff get no exception: a workspace is someone's live session."""
    return Q(owner=user) | Q(
        shared=True,
        project__memberships__user=user,
        project__memberships__role__in=sorted(WRITER_ROLES),
    )


def workspaces_visible_to(user: Any) -> QuerySet[Workspace]:
    if not getattr(user, "is_authenticated", False):
        return Workspace.objects.none()
    return (
        Workspace.objects.filter(openable_by(user))
        .distinct()
        .select_related("project", "kind", "job", "owner")
    )


def my_workspaces(user: Any) -> QuerySet[Workspace]:
    return workspaces_visible_to(user).filter(owner=user)


def state_of(workspace: Workspace) -> str:
    return states.workspace_state(workspace.job.state if workspace.job_id else None)


def time_left(workspace: Workspace, *, now: datetime.datetime | None = None) -> int | None:
    """Minutes until the run's maximum lifetime ends it (None unless running)."""
    job = workspace.job
    if job is None or job.state != JobState.RUNNING:
        return None
    now = now or timezone.now()
    ends = job.state_changed_at + datetime.timedelta(minutes=job.max_runtime_minutes)
    return max(0, int((ends - now).total_seconds() // 60))


def is_active(workspace: Workspace) -> bool:
    return workspace.job is not None and workspace.job.state in ACTIVE


def workspace_rows(user: Any, *, mine_only: bool = True) -> list[dict[str, Any]]:
    """What the tables show per workspace: state, its label, time left."""
    found = my_workspaces(user) if mine_only else workspaces_visible_to(user)
    rows = []
    for ws in found[:50]:
        state = state_of(ws)
        rows.append(
            {"ws": ws, "state": state, "label": states.LABELS[state], "time_left": time_left(ws)}
        )
    return rows
