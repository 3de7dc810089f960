"""The profile page: create a personal API token (shown once), list and revoke tokens."""

import re
from datetime import timedelta

from knox.models import AuthToken
from rest_framework.test import APIClient

from tenants.services import token_create


def _secret_in(html: str) -> str | None:
    match = re.search(r'<pre class="secret" id="new-token">([^<]+)</pre>', html)
    return match.group(1) if match else None


def test_profile_renders_for_each_persona(personas, web_client_for):
    for name in ("outsider", "viewer", "member", "admin", "staff"):
        user = personas.by_name(name)
        response = web_client_for(user).get("/profile/")
        assert response.status_code == 200
        html = response.content.decode()
        assert f"<dd>{user.username}</dd>" in html
        assert "You have no API tokens." in html


def test_profile_needs_login(db, client):
    response = client.get("/profile/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_create_token_shows_it_once_and_it_works(personas, web_client_for):
    client = web_client_for(personas.member)
    response = client.post("/profile/", {"expires_in_days": "30"})
    assert response.status_code == 200
    secret = _secret_in(response.content.decode())
    assert secret is not None
    assert len(secret) == 64

    token = AuthToken.objects.get(user=personas.member)
    assert token.token_key == secret[:15]
    assert timedelta(days=29) < token.expiry - token.created <= timedelta(days=30)

    again = client.get("/profile/").content.decode()
    assert _secret_in(again) is None
    assert secret not in again
    assert f"<code>{token.token_key}…</code>" in again

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/projects/alpha/").json()["my_role"] == "member"


def test_blank_lifetime_is_the_site_default_and_never_only_if_the_site_says(
    personas, web_client_for, settings
):
    client = web_client_for(personas.member)
    client.post("/profile/", {"expires_in_days": ""})
    token = AuthToken.objects.get(user=personas.member)
    assert token.expiry is not None  # tokens no longer live forever by default
    assert timedelta(days=89) < token.expiry - token.created <= timedelta(days=90)
    settings.PORTAL_TOKEN_TTL_DAYS = 0
    token.delete()
    client.post("/profile/", {"expires_in_days": ""})
    assert AuthToken.objects.get(user=personas.member).expiry is None


def test_invalid_lifetime_is_a_form_error_and_creates_nothing(personas, web_client_for):
    response = web_client_for(personas.member).post("/profile/", {"expires_in_days": "9999"})
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert not AuthToken.objects.exists()


def test_htmx_create_returns_only_the_tokens_section(personas, web_client_for):
    response = web_client_for(personas.member).post(
        "/profile/", {"expires_in_days": "90"}, HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section class="card" id="tokens">')
    assert "<html" not in html
    assert _secret_in(html) is not None


def test_revoke_a_token(personas, web_client_for):
    token, secret = token_create(actor=personas.member, expires_in=None)
    client = web_client_for(personas.member)
    response = client.post(f"/profile/tokens/{token.token_key}/revoke/")
    assert response.status_code == 302
    assert response["Location"] == "/profile/"
    assert not AuthToken.objects.filter(user=personas.member).exists()
    assert f"Token {token.token_key}… revoked." in client.get("/profile/").content.decode()

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    assert api.get("/api/v1/projects/").status_code == 401


def test_htmx_revoke_returns_the_updated_section(personas, web_client_for):
    keep, _ = token_create(actor=personas.member, expires_in=None)
    drop, _ = token_create(actor=personas.member, expires_in=None)
    response = web_client_for(personas.member).post(
        f"/profile/tokens/{drop.token_key}/revoke/", HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert keep.token_key in html
    assert drop.token_key not in html


def test_cannot_revoke_someone_elses_token(personas, web_client_for):
    token, _ = token_create(actor=personas.admin, expires_in=None)
    response = web_client_for(personas.member).post(f"/profile/tokens/{token.token_key}/revoke/")
    assert response.status_code == 404
    assert AuthToken.objects.filter(pk=token.pk).exists()


def test_revoke_is_post_only(personas, web_client_for):
    token, _ = token_create(actor=personas.member, expires_in=None)
    response = web_client_for(personas.member).get(f"/profile/tokens/{token.token_key}/revoke/")
    assert response.status_code == 405
    assert AuthToken.objects.filter(pk=token.pk).exists()
