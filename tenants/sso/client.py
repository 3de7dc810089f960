"""The portal as an OpenID Connect relying party: discovery, the authorization request (PKCE
S256, state, nonce), the code exchange and the ID token's checks (signature against the IdP's
JWKS, iss, aud, exp/iat/nbf with leeway, nonce). Nothing here touches the database."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from authlib.common.security import generate_token
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from django.conf import settings
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

DISCOVERY_CACHE_SECONDS = 300
# Asymmetric algorithms only: an HS256 token would be signed with the client secret, and "none"
# with nothing.
ALLOWED_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")

_discovery_cache: dict[str, tuple[float, dict[str, Any]]] = {}


class SsoError(Exception):
    """A login through the IdP that cannot go on; `message` is shown to the user as it is."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True)
class AuthorizationRequest:
    url: str
    state: str
    nonce: str
    code_verifier: str


def sso_enabled() -> bool:
    return bool(settings.PORTAL_OIDC_ISSUER and settings.PORTAL_OIDC_CLIENT_ID)


def _discovery_url() -> str:
    return (
        settings.PORTAL_OIDC_DISCOVERY_URL
        or f"{settings.PORTAL_OIDC_ISSUER}/.well-known/openid-configuration"
    )


def _get_json(url: str) -> dict[str, Any]:
    try:
        response = httpx.get(url, timeout=settings.PORTAL_OIDC_TIMEOUT_SECONDS)
        response.raise_for_status()
        body = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise SsoError(
            "The identity provider cannot be reached right now; try again later, or log in "
            "with a local account.",
            status=502,
        ) from error
    if not isinstance(body, dict):
        raise SsoError("The identity provider answered something unexpected.", status=502)
    return body


def clear_discovery_cache() -> None:
    _discovery_cache.clear()


def provider_metadata() -> dict[str, Any]:
    """The IdP's discovery document, kept a few minutes."""
    url = _discovery_url()
    cached = _discovery_cache.get(url)
    if cached and time.monotonic() - cached[0] < DISCOVERY_CACHE_SECONDS:
        return cached[1]
    metadata = _get_json(url)
    if metadata.get("issuer", "").rstrip("/") != settings.PORTAL_OIDC_ISSUER:
        raise SsoError(
            "The identity provider's metadata names another issuer than the one configured.",
            status=502,
        )
    for field in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        if not metadata.get(field):
            raise SsoError(f"The identity provider's metadata has no {field}.", status=502)
    _discovery_cache[url] = (time.monotonic(), metadata)
    return metadata


def authorization_request(redirect_uri: str) -> AuthorizationRequest:
    metadata = provider_metadata()
    state, nonce, code_verifier = generate_token(32), generate_token(32), generate_token(64)
    query = {
        "response_type": "code",
        "client_id": settings.PORTAL_OIDC_CLIENT_ID,
        "redirect_uri": redirect_uri,
        "scope": " ".join(settings.PORTAL_OIDC_SCOPES),
        "state": state,
        "nonce": nonce,
        "code_challenge": create_s256_code_challenge(code_verifier),
        "code_challenge_method": "S256",
    }
    url = f"{metadata['authorization_endpoint']}?{urlencode(query)}"
    return AuthorizationRequest(url=url, state=state, nonce=nonce, code_verifier=code_verifier)


def exchange_code(*, code: str, code_verifier: str, redirect_uri: str) -> dict[str, Any]:
    """The token response for an authorization code (client_secret_basic authentication)."""
    metadata = provider_metadata()
    try:
        response = httpx.post(
            metadata["token_endpoint"],
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": code_verifier,
            },
            auth=(settings.PORTAL_OIDC_CLIENT_ID, settings.PORTAL_OIDC_CLIENT_SECRET),
            timeout=settings.PORTAL_OIDC_TIMEOUT_SECONDS,
        )
    except httpx.HTTPError as error:
        raise SsoError(
            "The identity provider cannot be reached right now; try again later.", status=502
        ) from error
    if response.status_code != 200:
        raise SsoError(
            "The identity provider refused to complete the login (the sign-in may have expired); "
            "start again.",
            status=502,
        )
    try:
        tokens = response.json()
    except ValueError as error:
        raise SsoError(
            "The identity provider answered something unexpected.", status=502
        ) from error
    if not isinstance(tokens, dict) or not tokens.get("id_token"):
        raise SsoError("The identity provider sent no ID token.", status=502)
    return tokens


def provider_keys() -> KeySet:
    """The IdP's signing keys, fetched at each login so a rotated key is picked up at once."""
    try:
        return KeySet.import_key_set(_get_json(provider_metadata()["jwks_uri"]))
    except (JoseError, ValueError, TypeError) as error:
        raise SsoError(
            "The identity provider's signing keys cannot be read.", status=502
        ) from error


def validate_id_token(
    id_token: str, *, keys: KeySet, nonce: str, now: float | None = None
) -> dict[str, Any]:
    """The ID token's claims once its signature, issuer, audience, times and nonce check out."""
    failure = "The identity provider's answer could not be verified; start the login again."
    try:
        token = jwt.decode(id_token, keys, algorithms=list(ALLOWED_ALGORITHMS))
    except (JoseError, ValueError) as error:
        raise SsoError(failure) from error
    claims = token.claims
    registry = jwt.JWTClaimsRegistry(
        now=int(now if now is not None else time.time()),
        leeway=settings.PORTAL_OIDC_LEEWAY_SECONDS,
        iss={"essential": True, "value": settings.PORTAL_OIDC_ISSUER},
        aud={"essential": True, "value": settings.PORTAL_OIDC_CLIENT_ID},
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
        nonce={"essential": True, "value": nonce},
    )
    try:
        registry.validate(claims)
    except JoseError as error:
        raise SsoError(failure) from error
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    # Several audiences: the token must say it was issued to us (authorized party).
    if len(audiences) > 1 and claims.get("azp") != settings.PORTAL_OIDC_CLIENT_ID:
        raise SsoError(failure)
    return claims


def end_session_url(*, id_token: str, post_logout_redirect_uri: str) -> str | None:
    """Where to send the browser to end the IdP's session too (None when it has no such page)."""
    try:
        endpoint = provider_metadata().get("end_session_endpoint")
    except SsoError:
        return None
    if not endpoint:
        return None
    query = {
        "client_id": settings.PORTAL_OIDC_CLIENT_ID,
        "id_token_hint": id_token,
        "post_logout_redirect_uri": post_logout_redirect_uri,
    }
    return f"{endpoint}?{urlencode(query)}"
