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


class Authenticator:
    def __init__(self, store, issuer: TokenIssuer, admin_token: str, *, anonymous: bool = False):
        self.store = store
        self.issuer = issuer
        self.admin_token = admin_token
        self.anonymous = anonymous
        self.audiences = tokens.API_AUDIENCES

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
        claims = self.issuer.verified_claims(token)
        if claims is None:
            return None
        if claims.get("iss") == tokens.LEGACY_ISSUER:
            return self._legacy_user(token, claims)
        if claims.get("iss") != tokens.ISSUER:
            return None
        return self._bound_user(claims, audiences or self.audiences)

    def _service_account(self, namespace: str, name: str, uid: str) -> dict | None:
        account = self.store.try_get("v1", "ServiceAccount", namespace, name)
        if account is None or account["metadata"].get("deletionTimestamp"):
            return None
        if uid and account["metadata"].get("uid") != uid:
            return None
        return account

    def _bound_user(self, claims: dict, audiences: tuple[str, ...]) -> UserInfo | None:
        now = self.store.clock.time()
        try:
            expires, not_before = float(claims["exp"]), float(claims.get("nbf", 0))
        except (KeyError, TypeError, ValueError):
            return None
        if now > expires + tokens.LEEWAY_SECONDS or now < not_before - tokens.LEEWAY_SECONDS:
            return None
        token_audiences = claims.get("aud") or []
        if isinstance(token_audiences, str):
            token_audiences = [token_audiences]
        if not set(token_audiences) & set(audiences):
            return None
        private = claims.get("kubernetes.io")
        if not isinstance(private, dict):
            return None
        namespace = private.get("namespace") or ""
        account = private.get("serviceaccount") or {}
        name, uid = account.get("name", ""), account.get("uid", "")
        if self._service_account(namespace, name, uid) is None:
            return None
        extra: dict[str, tuple[str, ...]] = {}
        if claims.get("jti"):
            extra[CREDENTIAL_ID] = (f"JTI={claims['jti']}",)
        for kind, api_version, kind_name in (("pod", "v1", "Pod"), ("secret", "v1", "Secret")):
            ref = private.get(kind)
            if not ref:
                continue
            bound = self.store.try_get(api_version, kind_name, namespace, ref.get("name", ""))
            if bound is None or bound["metadata"].get("uid") != ref.get("uid"):
                return None  # the token died with the object it was bound to
            if kind == "pod":
                extra[POD_NAME] = (ref["name"],)
                extra[POD_UID] = (ref["uid"],)
        node = private.get("node")
        if node:
            extra[NODE_NAME] = (node.get("name", ""),)
            extra[NODE_UID] = (node.get("uid", ""),)
        return service_account_user(namespace, name, uid, extra)

    def _legacy_user(self, token: str, claims: dict) -> UserInfo | None:
        prefix = tokens.LEGACY_PREFIX
        namespace = claims.get(prefix + "namespace") or ""
        secret_name = claims.get(prefix + "secret.name") or ""
        name = claims.get(prefix + "service-account.name") or ""
        uid = claims.get(prefix + "service-account.uid") or ""
        secret = self.store.try_get("v1", "Secret", namespace, secret_name)
        if secret is None or secret["metadata"].get("deletionTimestamp"):
            return None
        stored = (secret.get("data") or {}).get("token") or ""
        try:
            if base64.b64decode(stored).decode() != token:
                return None
        except ValueError:
            return None
        if self._service_account(namespace, name, uid) is None:
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
