"""The ID token checks, against tokens signed by a local key set: signature, issuer, audience,
expiry with leeway, nonce, and the algorithms a token may not use."""

from __future__ import annotations

import time

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

ISSUER = "https://idp.example.org/realms/research"
CLIENT_ID = "gpu-portal"
NONCE = "n-0S6_WzA2Mj"


@pytest.fixture
def oidc_settings(settings):
    settings.PORTAL_OIDC_ISSUER = ISSUER
    settings.PORTAL_OIDC_CLIENT_ID = CLIENT_ID
    settings.PORTAL_OIDC_LEEWAY_SECONDS = 60
    return settings


@pytest.fixture(scope="module")
def signing_key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": "portal-test"})


def _claims(**overrides) -> dict:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": CLIENT_ID,
        "sub": "ada",
        "iat": now,
        "exp": now + 300,
        "nonce": NONCE,
        "groups": ["vision-members"],
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def _sign(claims: dict, key, alg: str = "RS256") -> str:
    return jwt.encode({"alg": alg, "kid": key.kid}, claims, key)


def _validate(token: str, key: RSAKey, nonce: str = NONCE):
    from tenants.sso.client import validate_id_token

    return validate_id_token(token, keys=KeySet([key]), nonce=nonce)


def test_a_good_token_gives_its_claims(oidc_settings, signing_key):
    claims = _validate(_sign(_claims(), signing_key), signing_key)

    assert claims["sub"] == "ada"
    assert claims["groups"] == ["vision-members"]


@pytest.mark.parametrize(
    "overrides",
    [
        {"nonce": "another-login's-nonce"},
        {"nonce": None},
        {"aud": "another-client"},
        {"iss": "https://evil.example.org"},
        {"exp": int(time.time()) - 61 - 5},  # expired beyond the leeway
        {"iat": None},
        {"aud": [CLIENT_ID, "another-client"]},  # several audiences and no azp naming us
    ],
    ids=["wrong-nonce", "no-nonce", "wrong-aud", "wrong-iss", "expired", "no-iat", "no-azp"],
)
def test_a_token_that_does_not_check_out_is_refused(oidc_settings, signing_key, overrides):
    from tenants.sso.client import SsoError

    with pytest.raises(SsoError, match="could not be verified"):
        _validate(_sign(_claims(**overrides), signing_key), signing_key)


def test_clock_skew_within_the_leeway_is_tolerated(oidc_settings, signing_key):
    now = int(time.time())
    # Our clock is 30 s ahead of the IdP's: the token looks expired by 30 s, issued in the future.
    token = _sign(_claims(iat=now + 30, exp=now - 30), signing_key)

    assert _validate(token, signing_key)["sub"] == "ada"


def test_a_token_signed_by_another_key_is_refused(oidc_settings, signing_key):
    from tenants.sso.client import SsoError

    impostor = RSAKey.generate_key(2048, parameters={"kid": "portal-test"})

    with pytest.raises(SsoError):
        _validate(_sign(_claims(), impostor), signing_key)


def test_a_token_signed_with_the_client_secret_is_refused(oidc_settings, signing_key):
    from tenants.sso.client import SsoError

    secret = OctKey.import_key("a-client-secret-of-at-least-32-bytes!!")
    token = jwt.encode({"alg": "HS256"}, _claims(), secret)

    with pytest.raises(SsoError):
        _validate(token, signing_key)
