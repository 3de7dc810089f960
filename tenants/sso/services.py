"""Writes of single sign-on: the portal user behind an IdP identity, and the memberships the
admin-defined group mappings give them, re-evaluated at every login.

A user is found by (issuer, subject) only, never by e-mail: an IdP that lets users change their
address would otherwise let one take another's account. Memberships a mapping created carry
source "sso" and follow the groups; memberships granted in the portal ("local") are never
changed or removed by a login.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from audit.context import Source
from audit.services import created, record, removed
from tenants.models import ExternalIdentity, GroupMapping, Membership, MembershipSource, Role

audit = logging.getLogger("portal.audit")

# The strongest role wins when several of the user's groups map to one project.
ROLE_RANK = {Role.VIEWER: 0, Role.MEMBER: 1, Role.ADMIN: 2}
USERNAME_MAX = 150
_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


@dataclass
class MembershipChanges:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def groups_from_claims(claims: dict[str, Any], claim_name: str) -> list[str]:
    """The user's groups from the ID token: a list of strings (or one string); else none."""
    value = claims.get(claim_name)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [group for group in value if isinstance(group, str)]
    return []


def _free_username(claims: dict[str, Any]) -> str:
    wanted = claims.get("preferred_username") or claims.get("email") or f"sso-{claims['sub']}"
    base = _USERNAME_UNSAFE.sub("-", str(wanted))[: USERNAME_MAX - 8] or "sso-user"
    user_model = get_user_model()
    candidate, suffix = base, 1
    # A local account may already hold the name: the IdP user gets another one, never that one.
    while user_model.objects.filter(username=candidate).exists():
        suffix += 1
        candidate = f"{base}-{suffix}"
    return candidate


@transaction.atomic
def user_for_identity(*, issuer: str, claims: dict[str, Any]) -> Any:
    """The portal user of this IdP identity, created at the first login; profile kept current."""
    identity = (
        ExternalIdentity.objects.select_related("user")
        .filter(issuer=issuer, subject=claims["sub"])
        .first()
    )
    if identity is None:
        # No password: this user logs in through the IdP only (create_user stores an unusable one).
        user = get_user_model().objects.create_user(username=_free_username(claims))
        identity = ExternalIdentity.objects.create(user=user, issuer=issuer, subject=claims["sub"])
        record(
            "user.create",
            actor=user,
            target=user,
            source=Source.SSO,
            detail=f"first login through single sign-on ({issuer})",
        )
        audit.info("sso_user_create user=%s issuer=%s", user.get_username(), issuer)
    user = identity.user
    user.email = str(claims.get("email") or user.email)[:254]
    user.first_name = str(claims.get("given_name") or user.first_name)[:150]
    user.last_name = str(claims.get("family_name") or user.last_name)[:150]
    user.save(update_fields=["email", "first_name", "last_name"])
    identity.last_login_at = timezone.now()
    identity.save(update_fields=["last_login_at"])
    return user


def _wanted_roles(groups: Iterable[str]) -> dict[int, str]:
    """project id → the strongest role the user's groups map to."""
    wanted: dict[int, str] = {}
    for mapping in GroupMapping.objects.filter(group__in=set(groups)):
        current = wanted.get(mapping.project_id)
        if current is None or ROLE_RANK[mapping.role] > ROLE_RANK[current]:
            wanted[mapping.project_id] = mapping.role
    return wanted


def _record_sso_change(action: str, user: Any, target: Any, project: Any, changes: dict) -> None:
    # The user's own login made the change, as their IdP groups said.
    record(
        action,
        actor=user,
        target=target,
        project=project,
        changes=changes,
        source=Source.SSO,
        detail="from the identity provider's groups at login",
    )


@transaction.atomic
def sync_group_memberships(*, user: Any, groups: Iterable[str]) -> MembershipChanges:
    """Make the user's "sso" memberships match their groups' mappings; local ones stay as is."""
    wanted = _wanted_roles(groups)
    changes = MembershipChanges()
    existing = {
        m.project_id: m
        for m in Membership.objects.select_for_update().select_related("project").filter(user=user)
    }
    for membership in existing.values():
        if membership.source != MembershipSource.SSO:
            continue
        role = wanted.get(membership.project_id)
        if role is None:
            target = ("tenants.membership", membership.pk, str(membership))
            membership.delete()
            changes.removed.append(membership.project.slug)
            _record_sso_change(
                "membership.remove",
                user,
                target,
                membership.project,
                removed({"user": user.get_username(), "role": membership.role}),
            )
        elif role != membership.role:
            old_role = membership.role
            membership.role = role
            membership.save(update_fields=["role"])
            changes.changed.append(membership.project.slug)
            _record_sso_change(
                "membership.change",
                user,
                membership,
                membership.project,
                {"role": [old_role, role]},
            )
    new_project_ids = [pid for pid in wanted if pid not in existing]
    for mapping_project_id in new_project_ids:
        membership = Membership.objects.create(
            user=user,
            project_id=mapping_project_id,
            role=wanted[mapping_project_id],
            source=MembershipSource.SSO,
        )
        changes.added.append(membership.project.slug)
        _record_sso_change(
            "membership.add",
            user,
            membership,
            membership.project,
            created({"user": user.get_username(), "role": membership.role}),
        )
    if changes.added or changes.changed or changes.removed:
        audit.info(
            "sso_memberships user=%s added=%s changed=%s removed=%s",
            user.get_username(),
            ",".join(changes.added) or "-",
            ",".join(changes.changed) or "-",
            ",".join(changes.removed) or "-",
        )
    return changes
