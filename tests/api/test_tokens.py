"""Personal API tokens against the API: token auth works, revoked and expired tokens do not, and
`manage.py issue_token` prints a working token."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import ManagementUtility, call_command
from django.core.management.base import CommandError
from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants.services import token_create, token_revoke
from tests.factories import UserFactory


def _token_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_token_authenticates_as_its_owner(personas):
    _, secret = token_create(actor=personas.viewer, expires_in=None)
    response = _token_client(secret).get("/api/v1/projects/")
    assert response.status_code == 200
    assert [p["my_role"] for p in response.json()["results"]] == ["viewer"]


def test_token_writes_need_no_csrf_and_follow_the_owners_role(personas):
    _, secret = token_create(actor=personas.admin, expires_in=None)
    UserFactory(username="newcomer")
    response = _token_client(secret).post(
        "/api/v1/memberships/", {"project": "alpha", "user": "newcomer"}, format="json"
    )
    assert response.status_code == 201


def test_revoked_token_is_refused(personas):
    token, secret = token_create(actor=personas.member, expires_in=None)
    client = _token_client(secret)
    assert client.get("/api/v1/projects/").status_code == 200
    token_revoke(actor=personas.member, token_key=token.token_key)
    response = client.get("/api/v1/projects/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token.", "errors": {}}


def test_expired_token_is_refused(personas):
    token, secret = token_create(actor=personas.member, expires_in=timedelta(days=1))
    AuthToken.objects.filter(pk=token.pk).update(expiry=token.created - timedelta(seconds=1))
    assert _token_client(secret).get("/api/v1/projects/").status_code == 401


def test_garbage_token_is_a_401(personas):
    assert _token_client("not-a-token").get("/api/v1/projects/").status_code == 401


def test_issue_token_prints_a_working_token_that_expires_by_default(personas):
    out, err = StringIO(), StringIO()
    call_command("issue_token", "bob", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert len(secret) == 64
    response = _token_client(secret).get("/api/v1/projects/alpha/")
    assert response.status_code == 200
    assert response.json()["my_role"] == "member"
    token = AuthToken.objects.get(user=personas.member)
    assert timedelta(days=89) < token.expiry - token.created <= timedelta(days=90)
    assert f"expires {token.expiry:%Y-%m-%d %H:%M} UTC" in err.getvalue()


def test_token_lifetime_follows_the_setting(personas, settings):
    settings.PORTAL_TOKEN_TTL_DAYS = 7
    err = StringIO()
    call_command("issue_token", "bob", stdout=StringIO(), stderr=err)
    token = AuthToken.objects.get(user=personas.member)
    assert timedelta(days=6) < token.expiry - token.created <= timedelta(days=7)
    settings.PORTAL_TOKEN_TTL_DAYS = 0  # the site turned expiry off
    call_command("issue_token", "alice", stdout=StringIO(), stderr=err)
    assert AuthToken.objects.get(user=personas.admin).expiry is None
    assert "never expires" in err.getvalue()


def test_profile_page_shows_each_tokens_expiry(personas, web_client_for):
    client = web_client_for(personas.member)
    page = client.get("/profile/").content.decode()
    assert "Site default (90 days)" in page
    assert "Never expires" not in page  # no longer offered
    response = client.post("/profile/", {"expires_in_days": ""})
    assert response.status_code == 200
    token = AuthToken.objects.get(user=personas.member)
    assert timedelta(days=89) < token.expiry - token.created <= timedelta(days=90)
    assert f"{token.expiry:%Y-%m-%d %H:%M} UTC" in response.content.decode()


def test_issue_token_with_expiry(personas):
    call_command("issue_token", "bob", "--expires-in-days", "7", stdout=StringIO())
    token = AuthToken.objects.get(user=personas.member)
    assert timedelta(days=6) < token.expiry - token.created <= timedelta(days=7)


def test_issue_token_for_unknown_user_is_a_clear_error(db):
    with pytest.raises(CommandError, match="No user named 'nobody'"):
        call_command("issue_token", "nobody")


def test_issue_token_for_unknown_user_exits_non_zero(db, capsys):
    with pytest.raises(SystemExit) as excinfo:
        ManagementUtility(["manage.py", "issue_token", "nobody"]).execute()
    assert excinfo.value.code != 0
    captured = capsys.readouterr()
    assert captured.err.strip() == "CommandError: No user named 'nobody'."
    assert captured.out == ""


def test_issue_token_refuses_deactivated_users(db):
    UserFactory(username="gone", is_active=False)
    with pytest.raises(CommandError, match="deactivated"):
        call_command("issue_token", "gone")
    assert not AuthToken.objects.exists()
