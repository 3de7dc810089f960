"""The role predicates of tenants.permissions, for every persona on project A."""

import pytest

from tenants.permissions import (
    can_manage_members,
    can_view,
    can_write,
    is_project_admin,
    is_staff,
    role_in,
)

# persona: (role_in, can_view, can_write, is_project_admin / can_manage_members)
TABLE = {
    "admin": ("admin", True, True, True),
    "member": ("member", True, True, False),
    "viewer": ("viewer", True, False, False),
    "outsider": (None, False, False, False),
    "staff": (None, True, True, True),
}


@pytest.mark.parametrize("persona", sorted(TABLE))
def test_role_predicates_on_project_a(persona, personas):
    user = personas.by_name(persona)
    role, view, write, manage = TABLE[persona]
    project = personas.project_a
    assert role_in(user, project) == role
    assert can_view(user, project) is view
    assert can_write(user, project) is write
    assert is_project_admin(user, project) is manage
    assert can_manage_members(user, project) is manage


def test_outsider_administers_their_own_project_only(personas):
    assert can_manage_members(personas.outsider, personas.project_b)
    assert not can_view(personas.admin, personas.project_b)


def test_anonymous_and_inactive_staff_get_nothing(personas):
    from django.contrib.auth.models import AnonymousUser

    anonymous = AnonymousUser()
    assert role_in(anonymous, personas.project_a) is None
    assert not can_view(anonymous, personas.project_a)
    staff = personas.staff
    staff.is_active = False
    assert not is_staff(staff)
    assert not can_write(staff, personas.project_a)
