"""Who may do what in a project: the role predicates, checked by services and views.

Staff users administer everything. Inside a project an admin manages members and settings, a
member does the work (submits jobs), a viewer only reads. Every predicate is a plain function of
(user, project) so services, API permissions and templates all ask the same question.
"""

from __future__ import annotations

from typing import Any

from tenants.models import Membership, Project, Role

# Roles that may write (submit and change work) in a project.
WRITER_ROLES = frozenset({Role.ADMIN, Role.MEMBER})


def role_in(user: Any, project: Project) -> str | None:
    """The user's role in the project, or None when they do not belong to it."""
    if not getattr(user, "is_authenticated", False):
        return None
    return (
        Membership.objects.filter(user=user, project=project).values_list("role", flat=True).first()
    )


def is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.is_active and user.is_staff)


def can_view(user: Any, project: Project) -> bool:
    return is_staff(user) or role_in(user, project) is not None


def is_project_admin(user: Any, project: Project) -> bool:
    return is_staff(user) or role_in(user, project) == Role.ADMIN


def can_write(user: Any, project: Project) -> bool:
    return is_staff(user) or role_in(user, project) in WRITER_ROLES


def can_manage_members(user: Any, project: Project) -> bool:
    return is_project_admin(user, project)


def administered_project(actor: Any, project: Project | str, *, what: str) -> Project:
    """The project if the actor administers it (its admin, or staff), for writes of project
    settings such as credentials and data volumes.

    ValidationError on `project` when the actor cannot see it (as if it did not exist: another
    tenant's project is not confirmed), PermissionDenied naming `what` when they see it without
    being its admin.
    """
    from django.core.exceptions import PermissionDenied, ValidationError

    slug = project if isinstance(project, str) else project.slug
    found = Project.objects.filter(slug=slug).first()
    role = role_in(actor, found) if found is not None else None
    if found is None or (role is None and not is_staff(actor)):
        raise ValidationError({"project": [f"No project {slug!r} that you belong to."]})
    if not (is_staff(actor) or role == Role.ADMIN):
        raise PermissionDenied(f"Only admins of project '{slug}' can manage its {what}.")
    return found
