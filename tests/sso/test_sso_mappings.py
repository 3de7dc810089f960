"""Group mappings that point nowhere: the admin refuses a mapping to a project that does not
exist (a form error, nothing stored), and a project's deletion takes its mappings with it, so a
login with that group gives no membership and no error."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


def test_the_admin_refuses_a_mapping_to_a_missing_project(web_client_for):
    from tenants.models import GroupMapping
    from tests.factories import UserFactory

    staff = UserFactory(username="root", is_staff=True, is_superuser=True)
    answer = web_client_for(staff).post(
        "/admin/tenants/groupmapping/add/",
        {"group": "ml-ghost-admins", "project": "999999", "role": "admin"},
    )

    assert answer.status_code == 200  # the form again, with the error on the project field
    assert answer.context["adminform"].form.errors["project"]
    assert not GroupMapping.objects.exists()


def test_a_group_whose_project_was_deleted_gives_nothing_at_login(db):
    from tenants.models import GroupMapping, Membership
    from tenants.services import project_delete
    from tenants.sso.services import sync_group_memberships, user_for_identity
    from tests.factories import ProjectFactory

    ghost = ProjectFactory(slug="ghost")
    GroupMapping.objects.create(group="ghost-members", project=ghost, role="member")
    project_delete(actor=None, project=ghost)
    user = user_for_identity(
        issuer="https://idp.example.org", claims={"sub": "x1", "preferred_username": "lin"}
    )

    changes = sync_group_memberships(user=user, groups=["ghost-members"])

    assert changes.added == []
    assert not GroupMapping.objects.exists()
    assert not Membership.objects.filter(user=user).exists()
