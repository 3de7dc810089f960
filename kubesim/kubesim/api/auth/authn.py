"""Bearer token -> user, and impersonation.

- the admin token of kubesim's kubeconfig: `kubesim-admin` in system:masters (allowed everything);
- ServiceAccount tokens (TokenRequest JWTs and legacy Secret tokens), checked as
  kube-apiserver checks them: our signature, an API audience, not expired (60 s leeway), and the
  account (and the pod or secret it is bound to) still there with the same uid;
- no token at all: system:anonymous, when anonymous requests are enabled (with --rbac);
- anything else: None (the server answers 401 Unauthorized).
"""

from __future__ import annotations

import base64
import hmac

from kubesim.api import errors
from kubesim.api.auth import tokens
from kubesim.api.auth.tokens import TokenIssuer
from kubesim.api.auth.user import (
    ADMIN,
    ALL_AUTHENTICATED,
    ALL_UNAUTHENTICATED,
    ANONYMOUS,
    ANONYMOUS_USER,
    UserInfo,
    service_account_groups,
    service_account_user,
    split_service_account_username,
)

CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
NODE_NAME = "authentication.kubernetes.io/node-name"
NODE_UID = "authentication.kubernetes.io/node-uid"


class _BoundToken:
    """What a verified TokenRequest token says, parsed once."""

    __slots__ = ("audiences", "bound", "expires", "namespace", "not_before", "sa_name", "user")

    def __init__(self, claims: dict):
        self.expires = float(claims["exp"])
        self.not_before = float(claims.get("nbf", 0))
        audiences = claims.get("aud") or []
        self.audiences = frozenset([audiences] if isinstance(audiences, str) else audiences)
        private = claims["kubernetes.io"]
        self.namespace = private.get("namespace") or ""
        account = private.get("serviceaccount") or {}
        self.sa_name = account.get("name") or ""
        sa_uid = account.get("uid") or ""
        extra: dict[str, tuple[str, ...]] = {}
        if claims.get("jti"):
            extra[CREDENTIAL_ID] = (f"JTI={claims['jti']}",)
        # (kind, name, uid) of the objects the token dies with: the account, a pod or secret
        self.bound = [("ServiceAccount", self.sa_name, sa_uid)]
        for claim, kind in (("pod", "Pod"), ("secret", "Secret")):
            ref = private.get(claim)
            if ref:
                self.bound.append((kind, ref.get("name") or "", ref.get("uid") or ""))
                if claim == "pod":
                    extra[POD_NAME] = (ref.get("name") or "",)
                    extra[POD_UID] = (ref.get("uid") or "",)
        node = private.get("node")
        if node:
            extra[NODE_NAME] = (node.get("name") or "",)
            extra[NODE_UID] = (node.get("uid") or "",)
        self.user = service_account_user(self.namespace, self.sa_name, sa_uid, extra)


class Authenticator:
    def __init__(self, store, issuer: TokenIssuer, admin_token: str, *, anonymous: bool = False):
        self.store = store
        self.issuer = issuer
        self.admin_token = admin_token
        self.anonymous = anonymous
        self.audiences = tokens.API_AUDIENCES
        self._parsed: dict[str, _BoundToken | None] = {}
        registry = store.registry
        self._types = {
            kind: registry.by_kind("v1", kind) for kind in ("ServiceAccount", "Pod", "Secret")
        }

    def authenticate_header(self, header: str | None) -> UserInfo | None:
        scheme, _, token = (header or "").partition(" ")
        token = token.strip()
        if not token:  # no credentials (an empty bearer token is none either)
            return ANONYMOUS_USER if self.anonymous else None
        if scheme.lower() != "bearer":
            return None
        return self.authenticate_token(token)

    def authenticate_token(self, token: str, audiences: tuple[str, ...] | None = None):
        """The user of a bearer token, or None (audiences: those the caller accepts)."""
        if hmac.compare_digest(token, self.admin_token):
            return ADMIN
        parsed = self._parsed.get(token)
        if parsed is None:
            claims = self.issuer.verified_claims(token)
            if claims is None:
                return None
            if claims.get("iss") == tokens.LEGACY_ISSUER:
                return self._legacy_user(token, claims)
            if claims.get("iss") != tokens.ISSUER:
                return None
            try:
                parsed = _BoundToken(claims)
            except (KeyError, TypeError, ValueError, AttributeError):
                return None
            if len(self._parsed) >= 10_000:
                self._parsed.clear()
            self._parsed[token] = parsed
        return self._bound_user(parsed, audiences or self.audiences)

    def _alive(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        """The object is there, not being deleted, and is the one the token names (its uid)."""
        obj = self.store.try_get_raw(self._types[kind], namespace, name)
        if obj is None:
            return False
        meta = obj["metadata"]
        return not meta.get("deletionTimestamp") and (not uid or meta.get("uid") == uid)

    def _bound_user(self, token: _BoundToken, audiences: tuple[str, ...]) -> UserInfo | None:
        now = self.store.clock.time()
        leeway = tokens.LEEWAY_SECONDS
        if now > token.expires + leeway or now < token.not_before - leeway:
            return None
        if token.audiences.isdisjoint(audiences):
            return None
        for kind, name, uid in token.bound:
            if not self._alive(kind, token.namespace, name, uid):
                return None  # the token died with the object it was bound to
        return token.user

    def _legacy_user(self, token: str, claims: dict) -> UserInfo | None:
        prefix = tokens.LEGACY_PREFIX
        namespace = claims.get(prefix + "namespace") or ""
        secret_name = claims.get(prefix + "secret.name") or ""
        name = claims.get(prefix + "service-account.name") or ""
        uid = claims.get(prefix + "service-account.uid") or ""
        secret = self.store.try_get_raw(self._types["Secret"], namespace, secret_name)
        if secret is None or secret["metadata"].get("deletionTimestamp"):
            return None
        stored = (secret.get("data") or {}).get("token") or ""
        try:
            if base64.b64decode(stored).decode() != token:
                return None
        except ValueError:
            return None
        if not self._alive("ServiceAccount", namespace, name, uid):
            return None
        return service_account_user(namespace, name, uid)


IMPERSONATE_USER = "Impersonate-User"
IMPERSONATE_GROUP = "Impersonate-Group"
IMPERSONATE_UID = "Impersonate-Uid"
IMPERSONATE_EXTRA = "Impersonate-Extra-"


def impersonation_requests(headers) -> list[tuple[str, str, str, str, str]] | None:
    """What the Impersonate-* headers ask to act as, as (API group, resource, subresource, name,
    namespace) to authorize with the verb "impersonate" (None: no such header)."""
    user = headers.get(IMPERSONATE_USER)
    groups = headers.getall(IMPERSONATE_GROUP, [])
    uid = headers.get(IMPERSONATE_UID)
    extras = [key for key in headers if key.lower().startswith(IMPERSONATE_EXTRA.lower())]
    if user is None and not groups and uid is None and not extras:
        return None
    if not user:
        raise errors.bad_request(
            "requested impersonation of groups, uid or extra without impersonating a user"
        )
    checks: list[tuple[str, str, str, str, str]] = []
    account = split_service_account_username(user)
    if account is not None:
        checks.append(("", "serviceaccounts", "", account[1], account[0]))
    else:
        checks.append(("", "users", "", user, ""))
    checks.extend(("", "groups", "", group, "") for group in groups)
    if uid:
        checks.append(("authentication.k8s.io", "uids", "", uid, ""))
    for key in extras:
        extra_key = key[len(IMPERSONATE_EXTRA) :].lower()
        checks.extend(
            ("authentication.k8s.io", "userextras", extra_key, value, "")
            for value in headers.getall(key)
        )
    return checks


def impersonated_user(headers) -> UserInfo:
    """The user the Impersonate-* headers name, with the groups kube-apiserver gives it."""
    name = headers[IMPERSONATE_USER]
    groups = list(headers.getall(IMPERSONATE_GROUP, []))
    account = split_service_account_username(name)
    if account is not None and not groups:
        groups = list(service_account_groups(account[0]))
    if name == ANONYMOUS:
        if ALL_UNAUTHENTICATED not in groups:
            groups.append(ALL_UNAUTHENTICATED)
    elif ALL_AUTHENTICATED not in groups:
        groups.append(ALL_AUTHENTICATED)
    extra: dict[str, tuple[str, ...]] = {}
    for key in headers:
        if key.lower().startswith(IMPERSONATE_EXTRA.lower()):
            extra[key[len(IMPERSONATE_EXTRA) :].lower()] = tuple(headers.getall(key))
    return UserInfo(name, tuple(groups), headers.get(IMPERSONATE_UID) or "", extra)
