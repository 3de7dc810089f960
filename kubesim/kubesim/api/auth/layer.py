"""What the server asks on every request: who is this (401 if nobody), may they act as whom
their Impersonate-* headers name, and may they do what they ask (403 if not)."""

from __future__ import annotations

import base64
import logging

from kubesim.api import errors
from kubesim.api.auth import bootstrap, tokens
from kubesim.api.auth.aggregation import ClusterRoleAggregator
from kubesim.api.auth.authn import Authenticator, impersonated_user, impersonation_requests
from kubesim.api.auth.escalation import EscalationCheck
from kubesim.api.auth.rbac import (
    Decision,
    RBACAuthorizer,
    create_on_update_forbidden,
    forbidden_error,
)
from kubesim.api.auth.requestinfo import Attributes, request_attributes
from kubesim.api.auth.tokens import TokenIssuer
from kubesim.api.auth.user import ADMIN, UserInfo

log = logging.getLogger("kubesim.rbac")
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
SA_TOKEN_SECRET = "kubernetes.io/service-account-token"  # noqa: S105 - a Secret type
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"
ALLOW_ALL = Decision(True, "")
PRIVILEGED_RULES = (
    [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
    [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
)


class AuthLayer:
    def __init__(self, store, admin_token: str, *, rbac: bool = False):
        self.store = store
        self.rbac = rbac
        self._admin_header = f"Bearer {admin_token}"
        self.issuer = TokenIssuer()
        self.authenticator = Authenticator(store, self.issuer, admin_token, anonymous=rbac)
        self.authorizer = RBACAuthorizer(self._policy_objects)
        self.ca_pem = b""  # written into legacy token Secrets (ca.crt), set once TLS is up
        store.add_write_listener(self._on_write)
        self.aggregator: ClusterRoleAggregator | None = None
        if rbac:
            self.aggregator = ClusterRoleAggregator(store)
            store.add_write_listener(self.aggregator.on_write)
            escalation = EscalationCheck(self.authorize, self.rules_for)
            rbac_version = f"{RBAC_GROUP}/v1"
            escalation.cluster_roles = lambda name: store.try_get(
                rbac_version, "ClusterRole", None, name
            )
            escalation.roles = lambda namespace, name: store.try_get(
                rbac_version, "Role", namespace, name
            )
            for kind in RBAC_KINDS:
                store.add_admission_hook(rbac_version, kind, escalation.check)

    # ------------------------------------------------------------------ policy
    def _policy_objects(self):
        registry = self.store.registry
        for kind in RBAC_KINDS:
            rtype = registry.by_group_kind(RBAC_GROUP, kind)
            if rtype is None:
                continue
            for obj in self.store.select(rtype, None, [], []):
                if obj.get("kind") != kind:
                    obj = {**obj, "kind": kind}
                yield obj

    def bootstrap(self) -> None:
        """Create the default roles and bindings that are missing (as kube-apiserver at start)."""
        if not self.rbac:
            return
        for obj in bootstrap.objects():
            name = obj["metadata"]["name"]
            if self.store.try_get(obj["apiVersion"], obj["kind"], None, name) is None:
                self.store.create(obj, field_manager="kube-apiserver")
        if self.aggregator is not None:
            self.aggregator.sync()

    def _on_write(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        if rtype.group == RBAC_GROUP:
            if obj.get("kind") != rtype.kind:
                obj = {**obj, "kind": rtype.kind}
            self.authorizer.changed(event_type, obj)
        elif (
            rtype.group == ""
            and rtype.kind == "Secret"
            and event_type == "ADDED"
            and obj.get("type") == SA_TOKEN_SECRET
        ):
            self._fill_token_secret(obj)

    def _fill_token_secret(self, secret: dict) -> None:
        """The token controller: a service-account-token Secret gets its account's token."""
        meta = secret["metadata"]
        if (secret.get("data") or {}).get("token"):
            return
        namespace = meta.get("namespace") or ""
        account_name = (meta.get("annotations") or {}).get(SA_NAME_ANNOTATION)
        account = (
            self.store.try_get("v1", "ServiceAccount", namespace, account_name)
            if account_name
            else None
        )
        if account is None:
            return
        token = self.issuer.sign(tokens.legacy_claims(namespace, meta["name"], account))

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        try:
            self.store.patch(
                "v1",
                "Secret",
                namespace,
                meta["name"],
                {
                    "metadata": {
                        "annotations": {SA_UID_ANNOTATION: account["metadata"].get("uid", "")}
                    },
                    "data": {
                        "token": b64(token.encode()),
                        "namespace": b64(namespace.encode()),
                        "ca.crt": b64(self.ca_pem),
                    },
                },
                patch_type="merge",
                field_manager="kube-controller-manager",
            )
        except errors.ApiError as exc:
            log.warning("filling token Secret %s/%s: %s", namespace, meta["name"], exc)

    # ------------------------------------------------------------------ decisions
    def authorize(self, attrs: Attributes) -> Decision:
        """AlwaysAllow without --rbac; with it, system:masters first, then RBAC."""
        if not self.rbac or attrs.user.is_privileged:
            return ALLOW_ALL
        return self.authorizer.authorize(attrs)

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict], list[dict], str]:
        if not self.rbac:
            return PRIVILEGED_RULES[0], PRIVILEGED_RULES[1], ""
        resource_rules, non_resource_rules, error = self.authorizer.rules_for(user, namespace)
        if user.is_privileged:
            resource_rules = PRIVILEGED_RULES[0] + resource_rules
            non_resource_rules = PRIVILEGED_RULES[1] + non_resource_rules
        return resource_rules, non_resource_rules, error

    def check(self, request) -> UserInfo:
        """The user a request acts as (ApiError 401, 400 or 403 when it may not go on)."""
        headers = request.headers
        if headers.get("Authorization") == self._admin_header and not any(
            key[:12].lower() == "impersonate-" for key in headers
        ):
            return ADMIN  # the common case: the admin kubeconfig, allowed everything
        user = self.authenticator.authenticate_header(request.headers.get("Authorization"))
        if user is None:
            raise errors.unauthorized()
        acting_as = impersonation_requests(request.headers)
        if acting_as is not None:
            for group, resource, subresource, name, namespace in acting_as:
                attrs = Attributes(
                    user=user,
                    verb="impersonate",
                    resource_request=True,
                    path=request.path,
                    api_group=group,
                    namespace=namespace,
                    resource=resource,
                    subresource=subresource,
                    name=name,
                )
                decision = self.authorize(attrs)
                if not decision.allowed:
                    raise forbidden_error(attrs, decision.reason)
            user = impersonated_user(request.headers)
        if self.rbac and not user.is_privileged:
            attrs = request_attributes(user, request.method, request.path, request.query)
            decision = self.authorizer.authorize(attrs)
            if not decision.allowed:
                raise forbidden_error(attrs, decision.reason)
        return user

    def check_create_on_apply(self, request, user: UserInfo) -> None:
        """A server-side apply that creates its object needs "create" besides "patch"."""
        if not self.rbac or user.is_privileged:
            return
        attrs = request_attributes(user, request.method, request.path, request.query)
        attrs.verb = "create"
        decision = self.authorizer.authorize(attrs)
        if not decision.allowed:
            raise create_on_update_forbidden(attrs, decision.reason)
