"""The login page with single sign-on on or off, and an unreachable identity provider."""

from __future__ import annotations

import socket

import pytest


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def unreachable_idp(settings):
    from tenants.sso.client import clear_discovery_cache

    settings.PORTAL_OIDC_ISSUER = f"http://127.0.0.1:{_closed_port()}"
    settings.PORTAL_OIDC_CLIENT_ID = "gpu-portal"
    settings.PORTAL_OIDC_TIMEOUT_SECONDS = 2
    settings.PORTAL_OIDC_BUTTON_LABEL = "Log in with Research SSO"
    clear_discovery_cache()
    yield settings
    clear_discovery_cache()


def test_the_login_page_has_no_sso_button_when_sso_is_off(client, db):
    page = client.get("/accounts/login/")

    assert page.status_code == 200
    assert "/accounts/sso/login/" not in page.content.decode()


def test_the_login_page_offers_sso_beside_the_local_form(client, db, unreachable_idp):
    page = client.get("/accounts/login/?next=/jobs/").content.decode()

    assert "Log in with Research SSO" in page
    assert "/accounts/sso/login/?next=/jobs/" in page
    assert 'name="password"' in page


def test_an_unreachable_idp_gets_a_page_that_says_so_and_local_login_still_works(
    client, db, unreachable_idp, caplog
):
    from tests.factories import TEST_PASSWORD, UserFactory

    answer = client.get("/accounts/sso/login/")

    assert answer.status_code == 502
    assert "cannot be reached" in answer.content.decode()
    assert len([r for r in caplog.records if r.name == "portal.sso"]) == 1

    UserFactory(username="breakglass")
    local = client.post("/accounts/login/", {"username": "breakglass", "password": TEST_PASSWORD})
    assert local.status_code == 302
    assert local.url == "/"


def test_a_callback_without_a_started_login_is_refused(client, db, unreachable_idp):
    answer = client.get("/accounts/sso/callback/?state=abc&code=def")

    assert answer.status_code == 400
    assert "start the login again" in answer.content.decode()


def test_sso_login_when_sso_is_off_is_a_clear_404(client, db):
    answer = client.get("/accounts/sso/login/")

    assert answer.status_code == 404
    assert "not configured" in answer.content.decode()
