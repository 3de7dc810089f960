"""membership_add / membership_change_role / membership_remove: permissions and invariants."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from tenants.models import Membership, Role
from tenants.services import membership_add, membership_change_role, membership_remove
from tests.factories import MembershipFactory, UserFactory


def _membership(project, user) -> Membership:
    return Membership.objects.get(project=project, user=user)


@pytest.mark.parametrize("actor", ["admin", "staff"])
def test_admins_and_staff_add_members(actor, personas):
    newcomer = UserFactory(username="newcomer")
    membership = membership_add(
        actor=personas.by_name(actor),
        project=personas.project_a,
        user=newcomer,
        role=Role.VIEWER,
    )
    assert membership.role == Role.VIEWER
    assert _membership(personas.project_a, newcomer) == membership


@pytest.mark.parametrize("actor", ["member", "viewer", "outsider"])
def test_others_cannot_add_members(actor, personas):
    newcomer = UserFactory(username="newcomer")
    with pytest.raises(PermissionDenied, match="Only admins of project 'alpha'"):
        membership_add(actor=personas.by_name(actor), project=personas.project_a, user=newcomer)
    assert not Membership.objects.filter(user=newcomer).exists()


def test_denial_names_the_actors_role(personas):
    with pytest.raises(PermissionDenied, match="your role there is viewer"):
        membership_remove(
            actor=personas.viewer, membership=_membership(personas.project_a, personas.member)
        )


def test_adding_an_existing_member_is_refused_with_their_role(personas):
    with pytest.raises(ValidationError) as excinfo:
        membership_add(actor=personas.admin, project=personas.project_a, user=personas.viewer)
    assert excinfo.value.message_dict == {
        "user": [
            "victor is already a member of project 'alpha' (role viewer); "
            "change their role instead."
        ]
    }


def test_unknown_role_is_refused_naming_the_valid_ones(personas):
    with pytest.raises(ValidationError) as excinfo:
        membership_add(
            actor=personas.admin,
            project=personas.project_a,
            user=UserFactory(username="newcomer"),
            role="owner",
        )
    assert "choose one of: admin, member, viewer" in excinfo.value.message_dict["role"][0]


def test_deactivated_users_cannot_be_added(personas):
    gone = UserFactory(username="gone", is_active=False)
    with pytest.raises(ValidationError, match="deactivated"):
        membership_add(actor=personas.admin, project=personas.project_a, user=gone)


def test_admin_changes_a_role(personas):
    membership = membership_change_role(
        actor=personas.admin,
        membership=_membership(personas.project_a, personas.viewer),
        role=Role.MEMBER,
    )
    assert membership.role == Role.MEMBER
    assert _membership(personas.project_a, personas.viewer).role == Role.MEMBER


def test_member_cannot_promote_themselves(personas):
    with pytest.raises(PermissionDenied):
        membership_change_role(
            actor=personas.member,
            membership=_membership(personas.project_a, personas.member),
            role=Role.ADMIN,
        )
    assert _membership(personas.project_a, personas.member).role == Role.MEMBER


def test_last_admin_cannot_be_demoted(personas):
    with pytest.raises(ValidationError) as excinfo:
        membership_change_role(
            actor=personas.admin,
            membership=_membership(personas.project_a, personas.admin),
            role=Role.MEMBER,
        )
    assert excinfo.value.messages == [
        "alice is the last admin of project 'alpha'; make another member an admin before you "
        "demote them."
    ]
    assert _membership(personas.project_a, personas.admin).role == Role.ADMIN


def test_last_admin_cannot_be_removed_even_by_staff(personas):
    with pytest.raises(ValidationError, match="last admin of project 'alpha'"):
        membership_remove(
            actor=personas.staff, membership=_membership(personas.project_a, personas.admin)
        )
    assert Membership.objects.filter(project=personas.project_a, user=personas.admin).exists()


def test_an_admin_can_step_down_once_there_is_another_admin(personas):
    membership_change_role(
        actor=personas.admin,
        membership=_membership(personas.project_a, personas.member),
        role=Role.ADMIN,
    )
    membership_change_role(
        actor=personas.admin,
        membership=_membership(personas.project_a, personas.admin),
        role=Role.VIEWER,
    )
    roles = dict(
        Membership.objects.filter(project=personas.project_a).values_list("user__username", "role")
    )
    assert roles == {"alice": "viewer", "bob": "admin", "victor": "viewer"}


def test_removing_an_admin_is_allowed_when_another_remains(personas):
    second = MembershipFactory(project=personas.project_a, role=Role.ADMIN).user
    membership_remove(actor=personas.admin, membership=_membership(personas.project_a, second))
    assert not Membership.objects.filter(user=second).exists()


def test_setting_the_same_role_is_a_no_op_even_for_the_last_admin(personas):
    membership = membership_change_role(
        actor=personas.admin,
        membership=_membership(personas.project_a, personas.admin),
        role=Role.ADMIN,
    )
    assert membership.role == Role.ADMIN


def test_admin_of_another_project_cannot_touch_project_a(personas):
    with pytest.raises(PermissionDenied):
        membership_remove(
            actor=personas.outsider, membership=_membership(personas.project_a, personas.member)
        )
    assert Membership.objects.filter(project=personas.project_a, user=personas.member).exists()


def test_two_admins_demoting_each_other_at_once_leave_one_admin(transactional_db, personas):
    """The admin rows are locked, so concurrent demotions cannot remove the last admin."""
    import threading

    from django.db import connection, connections

    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL")
    membership_change_role(
        actor=personas.admin,
        membership=_membership(personas.project_a, personas.member),
        role=Role.ADMIN,
    )
    alice = _membership(personas.project_a, personas.admin)
    bob = _membership(personas.project_a, personas.member)
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def demote(actor, membership, name):
        try:
            barrier.wait(timeout=10)
            membership_change_role(actor=actor, membership=membership, role=Role.MEMBER)
            outcomes[name] = "demoted"
        except (ValidationError, PermissionDenied):
            # ValidationError: the other one committed first and this would leave no admin;
            # PermissionDenied: the other one already demoted this actor.
            outcomes[name] = "refused"
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=demote, args=(personas.member, alice, "alice")),
        threading.Thread(target=demote, args=(personas.admin, bob, "bob")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes.values()) == ["demoted", "refused"]
    assert Membership.objects.filter(project=personas.project_a, role=Role.ADMIN).count() == 1
