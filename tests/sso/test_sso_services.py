"""Users and memberships from IdP identities, without the provider: the matching key, the
strongest mapped role, and local memberships left alone."""

from __future__ import annotations

import pytest

ISSUER = "https://idp.example.org"


def _claims(sub: str = "0a1b2c", **extra) -> dict:
    return {"sub": sub, "preferred_username": "ada", "email": "ada@example.org", **extra}


def test_a_local_account_with_the_same_name_and_email_is_never_taken_over(db):
    from tenants.sso.services import user_for_identity
    from tests.factories import UserFactory

    local = UserFactory(username="ada", email="ada@example.org", is_staff=True)

    user = user_for_identity(issuer=ISSUER, claims=_claims())

    assert user.pk != local.pk
    assert user.username == "ada-2"
    assert not user.is_staff


def test_the_same_subject_at_another_issuer_is_another_person(db):
    from tenants.sso.services import user_for_identity

    first = user_for_identity(issuer=ISSUER, claims=_claims())
    again = user_for_identity(issuer=ISSUER, claims=_claims(email="ada@new.example.org"))
    elsewhere = user_for_identity(issuer="https://other-idp.example.org", claims=_claims())

    assert again.pk == first.pk
    assert again.email == "ada@new.example.org"
    assert elsewhere.pk != first.pk


def test_the_strongest_mapped_role_wins_and_unmapped_groups_are_ignored(db):
    from tenants.models import GroupMapping, Membership
    from tenants.sso.services import sync_group_memberships, user_for_identity
    from tests.factories import ProjectFactory

    vision = ProjectFactory(slug="vision")
    GroupMapping.objects.create(group="vision-viewers", project=vision, role="viewer")
    GroupMapping.objects.create(group="ml-vision-admins", project=vision, role="admin")
    user = user_for_identity(issuer=ISSUER, claims=_claims())

    changes = sync_group_memberships(
        user=user, groups=["vision-viewers", "ml-vision-admins", "no-such-group"]
    )

    assert changes.added == ["vision"]
    membership = Membership.objects.get(user=user)
    assert (membership.project, membership.role, membership.source) == (vision, "admin", "sso")


@pytest.mark.parametrize(
    ("claim", "groups"),
    [(["a", "b"], ["a", "b"]), ("a", ["a"]), (None, []), ({"a": 1}, []), (["a", 3], ["a"])],
)
def test_groups_are_read_from_a_list_or_a_single_string(claim, groups):
    from tenants.sso.services import groups_from_claims

    assert groups_from_claims({"groups": claim}, "groups") == groups
