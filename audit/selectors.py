"""Reads of the audit trail: who may read which project's trail, and the filtered rows."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from audit.models import AuditEvent
from tenants.models import Project
from tenants.permissions import is_project_admin


def events_visible_to(user: Any) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.visible_to(user)


def project_trail_readable(user: Any, project: Project) -> bool:
    """Project admins (and staff) read a project's trail."""
    return is_project_admin(user, project)


def administered_project_or_none(user: Any, slug: str) -> Project | None:
    """The project with this slug when the user may read its trail, else None (a 404)."""
    project = Project.objects.filter(slug=slug).first()
    if project is None or not project_trail_readable(user, project):
        return None
    return project


def project_trail(project: Project) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(project=project)


def filter_project(queryset: QuerySet[AuditEvent], slug: str) -> QuerySet[AuditEvent]:
    """The rows of the project with this slug: by its id while it exists (the project-and-time
    index serves the first page), by the slug kept in the rows once it is deleted."""
    project_id = Project.objects.filter(slug=slug).values_list("pk", flat=True).first()
    if project_id is None:
        return queryset.filter(project_slug=slug)
    return queryset.filter(project_id=project_id)


def filter_actions(queryset: QuerySet[AuditEvent], value: str) -> QuerySet[AuditEvent]:
    """`job.cancel`, several separated by commas, or a family: `job.*` (or `job.`)."""
    query = Q()
    for part in filter(None, (p.strip() for p in value.split(","))):
        if part.endswith("*") or part.endswith("."):
            query |= Q(action__startswith=part.rstrip("*"))
        else:
            query |= Q(action=part)
    return queryset.filter(query) if query else queryset


def filter_target(queryset: QuerySet[AuditEvent], value: str) -> QuerySet[AuditEvent]:
    """`jobs.job:812`, `job:812` (the model name alone), or a type without an id."""
    kind, _, ident = value.partition(":")
    kind = kind.strip().lower()
    if kind:
        query = Q(target_type=kind) if "." in kind else Q(target_type__endswith="." + kind)
        queryset = queryset.filter(query)
    if ident.strip():
        queryset = queryset.filter(target_id=ident.strip())
    return queryset
