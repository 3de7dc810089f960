"""Writes for tenancy: departments, projects, project members and personal API tokens.

Every service takes the acting user as `actor=`, checks the role predicates itself (so the API,
the HTML views, the admin console and scripts share one rule) and logs an audit line. A project
always keeps at least one admin: removing or demoting the last one is refused. Departments and
projects are staff's (``actor=None`` is the system: migrations, seeding).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from knox.models import AuthToken

from audit.services import created, diff, record, removed, snapshot
from quotas.services import department_move_errors
from tenants.models import Department, GangBackend, Membership, Project, Role
from tenants.permissions import can_manage_members, role_in

audit = logging.getLogger("portal.audit")

DEPARTMENT_FIELDS = ("name", "description")
# The slug is fixed once a project exists: it names the namespace and the queues.
PROJECT_FIELDS = (
    "name",
    "description",
    "department",
    "default_gang_backend",
    "pod_security",
    "max_array_elements",
)


def _actor_name(actor: Any) -> str:
    return "system" if actor is None else actor.get_username()


def _require_staff(actor: Any, doing: str) -> None:
    if actor is not None and not (actor.is_active and actor.is_staff):
        raise PermissionDenied(f"Only staff can {doing}.")


@transaction.atomic
def department_create(*, actor: Any, slug: str, name: str, description: str = "") -> Department:
    _require_staff(actor, "create departments")
    department = Department(slug=slug, name=name, description=description)
    department.full_clean()
    department.save()
    record(
        "department.create",
        actor=actor,
        target=department,
        changes=created({"slug": slug, "name": name, "description": description}),
    )
    audit.info("department_create actor=%s department=%s", _actor_name(actor), slug)
    return department


@transaction.atomic
def department_update(*, actor: Any, department: Department, **changes: Any) -> Department:
    """Change some fields of a department (see DEPARTMENT_FIELDS)."""
    _require_staff(actor, "change departments")
    unknown = sorted(set(changes) - set(DEPARTMENT_FIELDS))
    if unknown:
        raise TypeError(f"department_update cannot change {', '.join(unknown)}")
    department = Department.objects.select_for_update().get(pk=department.pk)
    before = snapshot(department, list(changes))
    for name, value in changes.items():
        setattr(department, name, value)
    department.full_clean()
    department.save()
    record(
        "department.change",
        actor=actor,
        target=department,
        changes=diff(before, snapshot(department, list(changes))),
    )
    audit.info(
        "department_update actor=%s department=%s fields=%s",
        _actor_name(actor),
        department.slug,
        changes,
    )
    return department


@transaction.atomic
def department_delete(*, actor: Any, department: Department) -> None:
    """Delete a department without projects (its projects protect it: ProtectedError)."""
    _require_staff(actor, "delete departments")
    slug = department.slug
    target = ("tenants.department", department.pk, str(department))
    Department.objects.get(pk=department.pk).delete()
    record("department.delete", actor=actor, target=target, detail=f"department {slug}")
    audit.info("department_delete actor=%s department=%s", _actor_name(actor), slug)


def project_conflicts(project: Project) -> dict[str, list[str]]:
    """Rules that involve other rows, as field errors: moving a project into a department whose
    caps its quotas would break."""
    if project.pk is None or project.department_id is None:
        return {}
    errors = department_move_errors(project=project, department_id=project.department_id)
    return {"department": errors} if errors else {}


@transaction.atomic
def project_create(
    *,
    actor: Any,
    slug: str,
    name: str,
    department: Department,
    description: str = "",
    default_gang_backend: str = GangBackend.KUEUE,
    pod_security: str | None = None,
    max_array_elements: int | None = None,
) -> Project:
    """Create a project; its namespace follows from the slug (the quota sync creates it).
    Without `pod_security` it gets the site default (PORTAL_DEFAULT_POD_SECURITY)."""
    _require_staff(actor, "create projects")
    project = Project(
        slug=slug,
        name=name,
        department=department,
        description=description,
        default_gang_backend=default_gang_backend,
    )
    if pod_security is not None:
        project.pod_security = pod_security
    if max_array_elements is not None:
        project.max_array_elements = max_array_elements
    project.full_clean()
    project.save()
    record(
        "project.create",
        actor=actor,
        target=project,
        changes=created(snapshot(project, ["slug", *PROJECT_FIELDS])),
    )
    audit.info(
        "project_create actor=%s project=%s department=%s",
        _actor_name(actor),
        slug,
        department.slug,
    )
    return project


@transaction.atomic
def project_update(*, actor: Any, project: Project, **changes: Any) -> Project:
    """Change some fields of a project (see PROJECT_FIELDS); a move to another department is
    refused when the project's quotas would break that department's caps."""
    _require_staff(actor, "change projects")
    unknown = sorted(set(changes) - set(PROJECT_FIELDS))
    if unknown:
        raise TypeError(f"project_update cannot change {', '.join(unknown)}")
    project = Project.objects.select_for_update().get(pk=project.pk)
    before = snapshot(project, list(changes))
    for name, value in changes.items():
        setattr(project, name, value)
    project.full_clean()
    errors = project_conflicts(project)
    if errors:
        raise ValidationError(errors)
    project.save()
    record(
        "project.change",
        actor=actor,
        target=project,
        changes=diff(before, snapshot(project, list(changes))),
    )
    audit.info(
        "project_update actor=%s project=%s fields=%s",
        _actor_name(actor),
        project.slug,
        {k: str(v) for k, v in changes.items()},
    )
    return project


@transaction.atomic
def project_delete(*, actor: Any, project: Project) -> None:
    """Delete a project (its jobs protect it). The quota sync keeps its namespace, marked."""
    _require_staff(actor, "delete projects")
    slug = project.slug
    target = ("tenants.project", project.pk, str(project))
    Project.objects.get(pk=project.pk).delete()
    # The project row is gone: the trail keeps its slug, not a link to it.
    record("project.delete", actor=actor, target=target, detail=f"project {slug}")
    audit.info("project_delete actor=%s project=%s", _actor_name(actor), slug)


def _require_member_manager(*, actor: Any, project: Project, doing: str) -> None:
    if can_manage_members(actor, project):
        return
    role = role_in(actor, project)
    raise PermissionDenied(
        f"Only admins of project '{project.slug}' can {doing}; your role there is {role}."
        if role
        else f"Only admins of project '{project.slug}' can {doing}."
    )


def _validate_role(role: str) -> None:
    if role not in Role.values:
        raise ValidationError(
            {"role": [f"'{role}' is not a role; choose one of: {', '.join(Role.values)}."]}
        )


def _lock_for_change(membership: Membership) -> tuple[Membership, list[int]]:
    """Lock the project's admin rows, then the membership; return it fresh and the admin ids.

    Locking the admins first, in primary-key order, serialises concurrent role changes in one
    project (two admins demoting each other cannot both win) without deadlocking.
    """
    admin_ids = list(
        Membership.objects.select_for_update()
        .filter(project_id=membership.project_id, role=Role.ADMIN)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    current = Membership.objects.select_for_update().get(pk=membership.pk)
    return current, admin_ids


def _refuse_losing_last_admin(*, membership: Membership, admin_ids: list[int], doing: str) -> None:
    if membership.role == Role.ADMIN and admin_ids == [membership.pk]:
        raise ValidationError(
            f"{membership.user.get_username()} is the last admin of project "
            f"'{membership.project.slug}'; make another member an admin before you {doing}."
        )


def membership_add(
    *, actor: Any, project: Project, user: Any, role: str = Role.MEMBER
) -> Membership:
    _require_member_manager(actor=actor, project=project, doing="add members")
    _validate_role(role)
    if not user.is_active:
        raise ValidationError(
            {"user": [f"User '{user.get_username()}' is deactivated and cannot join projects."]}
        )
    existing = Membership.objects.filter(project=project, user=user).first()
    if existing is not None:
        raise ValidationError(
            {
                "user": [
                    f"{user.get_username()} is already a member of project '{project.slug}' "
                    f"(role {existing.role}); change their role instead."
                ]
            }
        )
    try:
        with transaction.atomic():
            membership = Membership.objects.create(project=project, user=user, role=role)
            record(
                "membership.add",
                actor=actor,
                target=membership,
                changes=created({"user": user.get_username(), "role": role}),
            )
    except IntegrityError as exc:  # a concurrent add of the same user won the race
        raise ValidationError(
            {"user": [f"{user.get_username()} is already a member of project '{project.slug}'."]}
        ) from exc
    audit.info(
        "membership_add actor=%s project=%s user=%s role=%s",
        actor.get_username(),
        project.slug,
        user.get_username(),
        role,
    )
    return membership


def membership_change_role(*, actor: Any, membership: Membership, role: str) -> Membership:
    project = membership.project
    _require_member_manager(actor=actor, project=project, doing="change member roles")
    _validate_role(role)
    with transaction.atomic():
        membership, admin_ids = _lock_for_change(membership)
        old_role = membership.role
        if old_role == role:
            return membership
        if role != Role.ADMIN:
            _refuse_losing_last_admin(
                membership=membership, admin_ids=admin_ids, doing="demote them"
            )
        membership.role = role
        membership.save(update_fields=["role"])
        record(
            "membership.change",
            actor=actor,
            target=membership,
            changes={"role": [old_role, role]},
            detail=f"user {membership.user.get_username()}",
        )
    audit.info(
        "membership_change_role actor=%s project=%s user=%s role=%s->%s",
        actor.get_username(),
        project.slug,
        membership.user.get_username(),
        old_role,
        role,
    )
    return membership


def membership_remove(*, actor: Any, membership: Membership) -> None:
    project = membership.project
    _require_member_manager(actor=actor, project=project, doing="remove members")
    with transaction.atomic():
        membership, admin_ids = _lock_for_change(membership)
        _refuse_losing_last_admin(membership=membership, admin_ids=admin_ids, doing="remove them")
        username = membership.user.get_username()
        target = ("tenants.membership", membership.pk, str(membership))
        old_role = membership.role
        membership.delete()
        record(
            "membership.remove",
            actor=actor,
            target=target,
            project=project,
            changes=removed({"user": username, "role": old_role}),
        )
    audit.info(
        "membership_remove actor=%s project=%s user=%s",
        actor.get_username(),
        project.slug,
        username,
    )


def default_token_lifetime() -> timedelta | None:
    """PORTAL_TOKEN_TTL_DAYS (90 by default); None only when the site set it to 0 (never)."""
    days = settings.PORTAL_TOKEN_TTL_DAYS
    return timedelta(days=days) if days else None


def token_create(*, actor: Any, expires_in: timedelta | None = None) -> tuple[Any, str]:
    """Issue a personal API token for `actor`; returns the stored row and the secret.

    Only a hash is stored, so the secret can be shown once and never again. Without
    `expires_in` the token gets the site's default lifetime: tokens do not live forever unless
    the site says so.
    """
    if expires_in is None:
        expires_in = default_token_lifetime()
    if expires_in is not None and expires_in <= timedelta(0):
        raise ValidationError({"expires_in": ["A token must expire in the future."]})
    token, secret = AuthToken.objects.create(user=actor, expiry=expires_in)
    # The public key prefix names the token; the secret never reaches the trail.
    record(
        "token.create",
        actor=actor,
        target=("knox.authtoken", token.token_key, f"token {token.token_key}"),
        changes=created({"expiry": token.expiry.isoformat() if token.expiry else None}),
    )
    audit.info(
        "token_create actor=%s key=%s expiry=%s",
        actor.get_username(),
        token.token_key,
        token.expiry,
    )
    return token, secret


def token_revoke(*, actor: Any, token_key: str) -> None:
    """Revoke one of the actor's own tokens, named by its public key prefix."""
    deleted, _ = AuthToken.objects.filter(user=actor, token_key=token_key).delete()
    if not deleted:
        raise ObjectDoesNotExist(f"You have no token '{token_key}'.")
    record(
        "token.revoke",
        actor=actor,
        target=("knox.authtoken", token_key, f"token {token_key}"),
    )
    audit.info("token_revoke actor=%s key=%s", actor.get_username(), token_key)
