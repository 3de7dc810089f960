"""/api/v1/memberships/: admins manage their project's members; errors are specific 400s."""

import pytest

from tenants.models import Membership, Role
from tests.factories import MembershipFactory, ProjectFactory, UserFactory


def _bob(personas) -> Membership:
    return Membership.objects.get(project=personas.project_a, user=personas.member)


def _alice(personas) -> Membership:
    return Membership.objects.get(project=personas.project_a, user=personas.admin)


def test_members_see_everyone_in_their_project(personas, api_client_for):
    response = api_client_for(personas.viewer).get("/api/v1/memberships/")
    rows = [(m["project"], m["user"], m["role"]) for m in response.json()["results"]]
    assert rows == [
        ("alpha", "alice", "admin"),
        ("alpha", "bob", "member"),
        ("alpha", "victor", "viewer"),
    ]


@pytest.mark.parametrize(
    ("params", "users"),
    [
        ({"project": "alpha"}, ["alice", "bob", "victor"]),
        ({"project": "beta"}, ["oscar"]),
        ({"role": "admin"}, ["alice", "oscar"]),
        ({"project": "alpha", "role": "viewer"}, ["victor"]),
        ({"user": "bob"}, ["bob"]),
    ],
)
def test_filters(params, users, personas, api_client_for):
    response = api_client_for(personas.staff).get("/api/v1/memberships/", params)
    assert [m["user"] for m in response.json()["results"]] == users


@pytest.mark.parametrize(
    ("params", "field"),
    [({"role": "owner"}, "role"), ({"project": "beta"}, "project")],
)
def test_bad_filters_are_400_naming_the_field(params, field, personas, api_client_for):
    # beta exists but the admin of alpha cannot see it: the same answer as a missing project.
    response = api_client_for(personas.admin).get("/api/v1/memberships/", params)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_admin_adds_a_member(personas, api_client_for):
    UserFactory(username="newcomer")
    response = api_client_for(personas.admin).post(
        "/api/v1/memberships/", {"project": "alpha", "user": "newcomer"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert (body["project"], body["user"], body["role"]) == ("alpha", "newcomer", "member")
    assert Membership.objects.get(pk=body["id"]).role == Role.MEMBER


@pytest.mark.parametrize(
    ("payload", "errors"),
    [
        ({}, {"project": ["This field is required."], "user": ["This field is required."]}),
        (
            {"project": "alpha", "user": "nobody"},
            {"user": ["No user named 'nobody'."]},
        ),
        (
            {"project": "beta", "user": "bob"},
            {"project": ["No project 'beta' that you belong to."]},
        ),
        (
            {"project": "alpha", "user": "bob", "role": "owner"},
            {"role": ['"owner" is not a valid choice.']},
        ),
        (
            {"project": "alpha", "user": "bob"},
            {
                "user": [
                    "bob is already a member of project 'alpha' (role member); "
                    "change their role instead."
                ]
            },
        ),
        ({"project": ["alpha"], "user": "bob"}, {"project": ["Give the project's slug."]}),
        ({"project": "alpha", "user": 7}, {"user": ["Give the user's username."]}),
    ],
)
def test_bad_create_input_gets_field_errors(payload, errors, personas, api_client_for):
    before = Membership.objects.count()
    response = api_client_for(personas.admin).post("/api/v1/memberships/", payload, format="json")
    assert response.status_code == 400
    assert response.json()["errors"] == errors
    field, messages = next(iter(errors.items()))
    assert response.json()["detail"] == f"{field}: {messages[0]}"
    assert Membership.objects.count() == before


def test_malformed_json_is_a_400(personas, api_client_for):
    response = api_client_for(personas.admin).post(
        "/api/v1/memberships/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
    assert response.json()["errors"] == {}


def test_admin_changes_a_role_with_patch(personas, api_client_for):
    response = api_client_for(personas.admin).patch(
        f"/api/v1/memberships/{_bob(personas).pk}/", {"role": "admin"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["role"] == "admin"
    assert _bob(personas).role == Role.ADMIN


def test_put_without_role_is_a_400(personas, api_client_for):
    response = api_client_for(personas.admin).put(
        f"/api/v1/memberships/{_bob(personas).pk}/", {}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == {"role": ["This field is required."]}


def test_demoting_the_last_admin_is_refused_with_a_clear_message(personas, api_client_for):
    response = api_client_for(personas.admin).patch(
        f"/api/v1/memberships/{_alice(personas).pk}/", {"role": "member"}, format="json"
    )
    assert response.status_code == 400
    message = (
        "alice is the last admin of project 'alpha'; make another member an admin before you "
        "demote them."
    )
    assert response.json() == {"detail": message, "errors": {"non_field_errors": [message]}}
    assert _alice(personas).role == Role.ADMIN


def test_removing_the_last_admin_is_refused(personas, api_client_for):
    response = api_client_for(personas.staff).delete(f"/api/v1/memberships/{_alice(personas).pk}/")
    assert response.status_code == 400
    assert "last admin of project 'alpha'" in response.json()["detail"]
    assert Membership.objects.filter(pk=_alice(personas).pk).exists()


def test_member_is_told_why_they_cannot_remove_someone(personas, api_client_for):
    response = api_client_for(personas.member).delete(f"/api/v1/memberships/{_alice(personas).pk}/")
    assert response.status_code == 403
    assert response.json() == {
        "detail": "Only admins of project 'alpha' can change its memberships.",
        "errors": {},
    }


def test_non_numeric_id_is_a_404_not_a_500(personas, api_client_for):
    assert api_client_for(personas.admin).get("/api/v1/memberships/abc/").status_code == 404


def test_membership_list_query_count_does_not_grow(
    personas, api_client_for, django_assert_max_num_queries
):
    for n in range(15):
        project = ProjectFactory(slug=f"bulk-{n}")
        MembershipFactory(project=project, user=personas.member, role=Role.MEMBER)
        MembershipFactory(project=project, role=Role.ADMIN)
    client = api_client_for(personas.member)
    # session + user, count, page: users and projects come joined.
    with django_assert_max_num_queries(4):
        response = client.get("/api/v1/memberships/")
    assert response.json()["count"] == 3 + 30
