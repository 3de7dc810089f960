"""The project page: details, quota table and members; project admins manage members."""

import pytest

from tenants.models import Membership, Role
from tests.conftest import PERSONA_NAMES
from tests.factories import UserFactory

# persona: (status of /projects/alpha/, sees the management forms)
PAGE = {
    "outsider": (404, False),
    "viewer": (200, False),
    "member": (200, False),
    "admin": (200, True),
    "staff": (200, True),
}


@pytest.mark.parametrize("persona", PERSONA_NAMES)
def test_project_page_per_persona(persona, personas, web_client_for):
    status, manages = PAGE[persona]
    response = web_client_for(personas.by_name(persona)).get("/projects/alpha/")
    assert response.status_code == status
    if status != 200:
        return
    html = response.content.decode()
    assert "<code>gp-alpha</code>" in html
    assert 'class="quota-table"' in html
    for username in ("alice", "bob", "victor"):
        assert f'id="member-{username}"' in html
    assert ('action="/projects/alpha/members/"' in html) is manages
    assert ("Only project admins can add" in html) is not manages


def test_missing_project_is_the_same_404(personas, web_client_for):
    assert web_client_for(personas.admin).get("/projects/nope/").status_code == 404


def test_home_links_to_the_project_page(personas, web_client_for):
    assert 'href="/projects/alpha/"' in web_client_for(personas.viewer).get("/").content.decode()


def test_admin_adds_a_member(personas, web_client_for):
    UserFactory(username="newcomer")
    client = web_client_for(personas.admin)
    response = client.post("/projects/alpha/members/", {"user": "newcomer", "role": "viewer"})
    assert response.status_code == 302
    assert response["Location"] == "/projects/alpha/"
    assert Membership.objects.get(user__username="newcomer").role == Role.VIEWER
    assert "Added newcomer as viewer." in client.get("/projects/alpha/").content.decode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"user": "nobody", "role": "member"}, "No user named &#x27;nobody&#x27;."),
        ({"user": "bob", "role": "member"}, "bob is already a member of project"),
        ({"user": "", "role": "member"}, "This field is required."),
        ({"user": "bob", "role": "owner"}, "Select a valid choice."),
    ],
)
def test_add_member_errors_are_shown_with_400(data, message, personas, web_client_for):
    before = Membership.objects.count()
    response = web_client_for(personas.admin).post("/projects/alpha/members/", data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert Membership.objects.count() == before


def test_htmx_add_returns_only_the_members_section(personas, web_client_for):
    UserFactory(username="newcomer")
    response = web_client_for(personas.admin).post(
        "/projects/alpha/members/", {"user": "newcomer", "role": "member"}, HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section class="card" id="members">')
    assert 'id="member-newcomer"' in html


@pytest.mark.parametrize("persona", ["viewer", "member"])
def test_non_admins_cannot_manage_members(persona, personas, web_client_for):
    UserFactory(username="newcomer")
    client = web_client_for(personas.by_name(persona))
    bob = Membership.objects.get(project=personas.project_a, user=personas.member)
    assert client.post("/projects/alpha/members/", {"user": "newcomer"}).status_code == 403
    assert (
        client.post(f"/projects/alpha/members/{bob.pk}/role/", {"role": "admin"}).status_code == 403
    )
    assert client.post(f"/projects/alpha/members/{bob.pk}/remove/").status_code == 403
    bob.refresh_from_db()
    assert bob.role == Role.MEMBER
    assert not Membership.objects.filter(user__username="newcomer").exists()


def test_outsider_gets_404_on_every_member_action(personas, web_client_for):
    client = web_client_for(personas.outsider)
    bob = Membership.objects.get(project=personas.project_a, user=personas.member)
    assert client.post("/projects/alpha/members/", {"user": "oscar"}).status_code == 404
    assert (
        client.post(f"/projects/alpha/members/{bob.pk}/role/", {"role": "admin"}).status_code == 404
    )
    assert client.post(f"/projects/alpha/members/{bob.pk}/remove/").status_code == 404


def test_membership_of_another_project_is_404_through_this_project(personas, web_client_for):
    oscar = Membership.objects.get(project=personas.project_b, user=personas.outsider)
    response = web_client_for(personas.admin).post(f"/projects/alpha/members/{oscar.pk}/remove/")
    assert response.status_code == 404
    assert Membership.objects.filter(pk=oscar.pk).exists()


def test_admin_changes_a_role_with_htmx(personas, web_client_for):
    victor = Membership.objects.get(project=personas.project_a, user=personas.viewer)
    response = web_client_for(personas.admin).post(
        f"/projects/alpha/members/{victor.pk}/role/", {"role": "member"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    victor.refresh_from_db()
    assert victor.role == Role.MEMBER


def test_last_admin_demotion_is_refused_with_the_reason(personas, web_client_for):
    alice = Membership.objects.get(project=personas.project_a, user=personas.admin)
    response = web_client_for(personas.admin).post(
        f"/projects/alpha/members/{alice.pk}/role/", {"role": "viewer"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 400
    assert "alice is the last admin of project &#x27;alpha&#x27;" in response.content.decode()
    alice.refresh_from_db()
    assert alice.role == Role.ADMIN


def test_admin_removes_a_member(personas, web_client_for):
    bob = Membership.objects.get(project=personas.project_a, user=personas.member)
    client = web_client_for(personas.admin)
    response = client.post(f"/projects/alpha/members/{bob.pk}/remove/")
    assert response.status_code == 302
    assert not Membership.objects.filter(pk=bob.pk).exists()
    assert "Removed bob from alpha." in client.get("/projects/alpha/").content.decode()


def test_last_admin_cannot_be_removed_from_the_page(personas, web_client_for):
    alice = Membership.objects.get(project=personas.project_a, user=personas.admin)
    response = web_client_for(personas.staff).post(f"/projects/alpha/members/{alice.pk}/remove/")
    assert response.status_code == 400
    assert "last admin" in response.content.decode()
    assert Membership.objects.filter(pk=alice.pk).exists()
