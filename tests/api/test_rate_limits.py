"""API rate limits: per token, per user (tokens and session together), per address without a
login; over a limit the answer is 429 in the error shape, with Retry-After."""

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tenants.services import token_create


@pytest.fixture
def rates(settings):
    """Counters start empty; each test sets the rates it needs ("off" = no limit)."""
    cache.clear()
    yield settings
    cache.clear()


def _token_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def test_a_token_over_its_rate_gets_429_with_retry_after(personas, rates):
    rates.PORTAL_API_RATE_TOKEN = "3/min"
    _, secret = token_create(actor=personas.member, expires_in=None)
    client = _token_client(secret)

    answers = [client.get("/api/v1/projects/") for _ in range(4)]

    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"]
    assert refused.json()["errors"] == {}


def test_each_token_has_its_own_allowance_but_the_user_limit_counts_them_all(personas, rates):
    rates.PORTAL_API_RATE_TOKEN = "2/min"
    rates.PORTAL_API_RATE_USER = "4/min"
    _, first = token_create(actor=personas.member, expires_in=None)
    _, second = token_create(actor=personas.member, expires_in=None)

    assert [_token_client(first).get("/api/v1/me/").status_code for _ in range(3)] == [
        200,
        200,
        429,
    ]
    # The second token still has its own allowance, up to the user's limit (every request the
    # user made counts there, the refused one too) ...
    assert _token_client(second).get("/api/v1/me/").status_code == 200
    assert _token_client(second).get("/api/v1/me/").status_code == 429
    # ... and the user's browser session counts towards the same per-user limit.
    session = APIClient()
    session.force_login(personas.member)
    assert session.get("/api/v1/me/").status_code == 429
    # Another user is not affected.
    other = APIClient()
    other.force_login(personas.viewer)
    assert other.get("/api/v1/me/").status_code == 200


def test_requests_without_a_login_are_limited_per_address(db, rates):
    rates.PORTAL_API_RATE_ANON = "1/min"
    client = APIClient()

    assert client.get("/api/schema/", REMOTE_ADDR="10.1.1.1").status_code == 200
    refused = client.get("/api/schema/", REMOTE_ADDR="10.1.1.1")
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert client.get("/api/schema/", REMOTE_ADDR="10.1.1.2").status_code == 200


def test_off_means_no_limit_and_a_rate_change_applies_at_once(personas, rates):
    rates.PORTAL_API_RATE_USER = "off"
    client = APIClient()
    client.force_login(personas.member)
    assert all(client.get("/api/v1/me/").status_code == 200 for _ in range(5))

    rates.PORTAL_API_RATE_USER = "1/min"
    assert client.get("/api/v1/me/").status_code == 200
    assert client.get("/api/v1/me/").status_code == 429
