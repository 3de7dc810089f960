"""Reads for tenancy: which projects and memberships a user may see.

`restrict_to_visible` is the single place where tenancy is applied to a queryset; the base API
viewset and the HTML views call it so no endpoint can forget it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery
from knox.models import AuthToken

from tenants.models import Membership, Project


def restrict_to_visible(queryset: QuerySet, *, user: Any, project_field: str) -> QuerySet:
    """Narrow `queryset` to the rows of projects `user` belongs to (staff see everything).

    `project_field` is the ORM path from the model to its Project ("project", "job__project"),
    or "" for Project itself. A model whose queryset defines `visible_to(user)` decides for
    itself.
    """
    if hasattr(queryset, "visible_to"):
        return queryset.visible_to(user)
    if not getattr(user, "is_authenticated", False):
        return queryset.none()
    if user.is_staff:
        return queryset
    prefix = f"{project_field}__" if project_field else ""
    # A user has at most one membership per project (unique constraint), so this join cannot
    # duplicate rows and needs no DISTINCT.
    return queryset.filter(**{f"{prefix}memberships__user": user})


def with_my_role(projects: QuerySet, *, user: Any) -> QuerySet:
    """Annotate each project with `my_role`: the user's role in it, or None (e.g. staff)."""
    role = Membership.objects.filter(project=OuterRef("pk"), user_id=user.pk).values("role")[:1]
    return projects.annotate(my_role=Subquery(role))


def project_list_visible_to(*, user: Any) -> QuerySet:
    """The projects a user may see, with their department and the user's role."""
    projects = Project.objects.select_related("department")
    return with_my_role(
        restrict_to_visible(projects, user=user, project_field=""), user=user
    ).order_by("slug")


def membership_list_visible_to(*, user: Any) -> QuerySet:
    """Memberships of the projects a user may see (any role may see who else is in them)."""
    memberships = Membership.objects.select_related("user", "project")
    return restrict_to_visible(memberships, user=user, project_field="project").order_by(
        "project__slug", "user__username"
    )


def membership_list_of_user(*, user: Any) -> QuerySet:
    """The user's own memberships, with their projects, by project slug."""
    return (
        Membership.objects.filter(user_id=user.pk)
        .select_related("project")
        .order_by("project__slug")
    )


def membership_list_for_project(*, project: Project) -> QuerySet:
    return (
        Membership.objects.filter(project=project).select_related("user").order_by("user__username")
    )


def token_list_for_user(*, user: Any) -> QuerySet:
    """A user's personal API tokens, newest first (only the public key prefix is stored)."""
    return AuthToken.objects.filter(user=user).order_by("-created")


def staff_contacts(*, limit: int = 5) -> list[Any]:
    """Active staff users to ask for access (named on the page of a user with no project)."""
    from django.contrib.auth import get_user_model

    User = get_user_model()
    return list(User.objects.filter(is_staff=True, is_active=True).order_by("username")[:limit])
