"""The authentication.k8s.io and authorization.k8s.io APIs, answered from the same authenticator
and authorizer the server uses on every request:

- serviceaccounts/NAME/token (TokenRequest, `kubectl create token`): a signed JWT;
- TokenReview (who a token is) and SelfSubjectReview (`kubectl auth whoami`);
- SelfSubjectAccessReview (`kubectl auth can-i`), SubjectAccessReview, LocalSubjectAccessReview
  and SelfSubjectRulesReview (`kubectl auth can-i --list`);
- the service-account issuer's OIDC discovery document and JWKS.
"""

from __future__ import annotations

import datetime

import orjson
from aiohttp import web

from kubesim.api import errors, protobuf
from kubesim.api.auth import tokens
from kubesim.api.auth.requestinfo import Attributes
from kubesim.api.auth.user import ADMIN, UserInfo
from kubesim.clock import rfc3339

USER_KEY = web.RequestKey("kubesim.user", UserInfo)  # who the request acts as
MIN_TOKEN_SECONDS = 600
MAX_TOKEN_SECONDS = 1 << 32
DEFAULT_TOKEN_SECONDS = 3600
AUTHZ = "authorization.k8s.io"
AUTHN = "authentication.k8s.io"
_BOUND_KINDS = {"Pod": ("pod", "pods"), "Secret": ("secret", "secrets"), "Node": ("node", "nodes")}


def request_user(request: web.Request) -> UserInfo:
    return request.get(USER_KEY) or ADMIN


def _json(body: dict, status: int = 201) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


async def _read_body(request: web.Request, kind: str) -> dict:
    raw = await request.read()
    try:
        # kubectl's typed clients (auth can-i, create token) send protobuf
        body = protobuf.decode_body(raw, request.content_type) if raw.strip() else {}
    except ValueError:
        raise errors.bad_request(f"the body of a {kind} could not be decoded") from None
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body of a {kind} must be an object")
    return body


def _epoch_rfc3339(epoch: float) -> str:
    return rfc3339(datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC))


class AuthApis:
    def __init__(self, server):
        self.server = server
        self.store = server.store
        self.auth = server.auth

    # ---------------------------------------------------------------- TokenRequest
    async def token_request(
        self, request: web.Request, namespace: str, name: str, rest: str = ""
    ) -> web.Response:
        if request.method != "POST":
            raise errors.method_not_allowed()
        body = await _read_body(request, "TokenRequest")
        account = self.store.try_get("v1", "ServiceAccount", namespace, name)
        if account is None:
            raise errors.not_found("serviceaccounts", name)
        spec = dict(body.get("spec") or {})
        seconds = spec.get("expirationSeconds")
        if seconds in (None, 0):
            seconds = DEFAULT_TOKEN_SECONDS
        if not isinstance(seconds, int) or isinstance(seconds, bool):
            raise errors.bad_request("spec.expirationSeconds must be an integer")
        problem = ""
        if seconds < MIN_TOKEN_SECONDS:
            problem = "may not specify a duration less than 10 minutes"
        elif seconds > MAX_TOKEN_SECONDS:
            problem = "may not specify a duration larger than 2^32 seconds"
        if problem:
            raise errors.invalid(
                "TokenRequest",
                AUTHN,
                name,
                [errors.invalid_value("spec.expirationSeconds", seconds, problem)],
            )
        audiences = spec.get("audiences") or list(tokens.API_AUDIENCES)
        bound, node = self._bound_object(namespace, name, spec.get("boundObjectRef"))
        now = self.server.clock.time()
        claims = tokens.bound_claims(
            namespace=namespace,
            service_account=account,
            audiences=audiences,
            now=now,
            expiration_seconds=seconds,
            bound_object=bound,
            node=node,
        )
        spec["audiences"] = audiences
        spec["expirationSeconds"] = seconds
        spec.setdefault("boundObjectRef", None)
        return _json(
            {
                "kind": "TokenRequest",
                "apiVersion": f"{AUTHN}/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
                "spec": spec,
                "status": {
                    "token": self.auth.issuer.sign(claims),
                    "expirationTimestamp": _epoch_rfc3339(claims["exp"]),
                },
            }
        )

    def _bound_object(self, namespace: str, name: str, ref: dict | None):
        if not ref:
            return None, None
        kind = ref.get("kind")
        if kind not in _BOUND_KINDS:
            raise errors.invalid(
                "TokenRequest",
                AUTHN,
                name,
                [
                    errors.cause(
                        "FieldValueNotSupported",
                        "spec.boundObjectRef.kind",
                        f'Unsupported value: "{kind}": supported values: "Pod", "Secret", "Node"',
                    )
                ],
            )
        claim, plural = _BOUND_KINDS[kind]
        obj_namespace = None if kind == "Node" else namespace
        obj = self.store.try_get("v1", kind, obj_namespace, ref.get("name") or "")
        if obj is None:
            raise errors.not_found(plural, ref.get("name") or "")
        uid = ref.get("uid")
        if uid and obj["metadata"].get("uid") != uid:
            raise errors.conflict(
                plural,
                ref.get("name") or "",
                f"the UID in the bound object reference ({uid}) does not match the UID in "
                f"record. The object might have been deleted and then recreated",
            )
        node = None
        if kind == "Pod":
            node_name = (obj.get("spec") or {}).get("nodeName")
            node = self.store.try_get("v1", "Node", None, node_name) if node_name else None
        if kind == "Node":
            return None, obj
        return (claim, obj), node

    # ---------------------------------------------------------------- authentication
    async def token_review(self, request: web.Request) -> web.Response:
        body = await _read_body(request, "TokenReview")
        spec = body.get("spec") or {}
        token = spec.get("token") or ""
        wanted = tuple(spec.get("audiences") or tokens.API_AUDIENCES)
        status: dict = {"user": {}}
        user = self.auth.authenticator.authenticate_token(token, wanted) if token else None
        if user is not None:
            claims = self.auth.issuer.verified_claims(token) or {}
            token_audiences = claims.get("aud") or list(wanted)
            if isinstance(token_audiences, str):
                token_audiences = [token_audiences]
            status = {
                "authenticated": True,
                "user": user.to_api(),
                "audiences": [a for a in wanted if a in token_audiences],
            }
        else:
            status["error"] = "[invalid bearer token, token lookup failed]"
        return _json(
            {
                "kind": "TokenReview",
                "apiVersion": f"{AUTHN}/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec,
                "status": status,
            }
        )

    async def self_subject_review(self, request: web.Request) -> web.Response:
        await _read_body(request, "SelfSubjectReview")
        return _json(
            {
                "kind": "SelfSubjectReview",
                "apiVersion": f"{AUTHN}/v1",
                "metadata": {"creationTimestamp": self.store.now()},
                "status": {"userInfo": request_user(request).to_api()},
            }
        )

    # ---------------------------------------------------------------- authorization
    async def access_review(self, request: web.Request) -> web.Response:
        path = request.path
        if path.endswith("selfsubjectaccessreviews"):
            kind = "SelfSubjectAccessReview"
        elif path.endswith("localsubjectaccessreviews"):
            kind = "LocalSubjectAccessReview"
        else:
            kind = "SubjectAccessReview"
        body = await _read_body(request, kind)
        spec = body.get("spec") or {}
        resource = spec.get("resourceAttributes")
        non_resource = spec.get("nonResourceAttributes")
        if bool(resource) == bool(non_resource):
            raise errors.invalid(
                kind,
                AUTHZ,
                "",
                [
                    errors.required(
                        "spec.resourceAttributes",
                        "exactly one of nonResourceAttributes or resourceAttributes must be "
                        "specified",
                    )
                ],
            )
        if kind == "SelfSubjectAccessReview":
            user = request_user(request)
        else:
            if not spec.get("user") and not spec.get("groups"):
                raise errors.invalid(
                    kind,
                    AUTHZ,
                    "",
                    [
                        errors.invalid_value(
                            "spec.user", "", "at least one of user or group must be specified"
                        )
                    ],
                )
            extra = {k: tuple(v or ()) for k, v in (spec.get("extra") or {}).items()}
            user = UserInfo(
                spec.get("user") or "", tuple(spec.get("groups") or ()), spec.get("uid", ""), extra
            )
        if kind == "LocalSubjectAccessReview":
            namespace = request.match_info.get("namespace", "")
            if non_resource:
                raise errors.invalid(
                    kind,
                    AUTHZ,
                    "",
                    [
                        errors.forbidden_field(
                            "spec.nonResourceAttributes", "disallowed on this kind of request"
                        )
                    ],
                )
            if (resource.get("namespace") or "") != namespace:
                raise errors.invalid(
                    kind,
                    AUTHZ,
                    "",
                    [
                        errors.invalid_value(
                            "spec.resourceAttributes.namespace",
                            resource.get("namespace") or "",
                            "must match metadata.namespace",
                        )
                    ],
                )
        if resource:
            attrs = Attributes(
                user=user,
                verb=resource.get("verb") or "",
                resource_request=True,
                api_group=resource.get("group") or "",
                api_version=resource.get("version") or "",
                namespace=resource.get("namespace") or "",
                resource=resource.get("resource") or "",
                subresource=resource.get("subresource") or "",
                name=resource.get("name") or "",
            )
        else:
            attrs = Attributes(
                user=user,
                verb=non_resource.get("verb") or "",
                resource_request=False,
                path=non_resource.get("path") or "",
            )
        decision = self.auth.authorize(attrs)
        status: dict = {"allowed": decision.allowed}
        if decision.reason:
            status["reason"] = decision.reason
        metadata: dict = {"creationTimestamp": None}
        if kind == "LocalSubjectAccessReview":
            metadata["namespace"] = request.match_info.get("namespace", "")
        return _json(
            {
                "kind": kind,
                "apiVersion": f"{AUTHZ}/v1",
                "metadata": metadata,
                "spec": spec,
                "status": status,
            }
        )

    async def rules_review(self, request: web.Request) -> web.Response:
        body = await _read_body(request, "SelfSubjectRulesReview")
        spec = body.get("spec") or {}
        resource_rules, non_resource_rules, error = self.auth.rules_for(
            request_user(request), spec.get("namespace") or ""
        )
        status: dict = {
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": bool(error),
        }
        if error:
            status["evaluationError"] = error
        return _json(
            {
                "kind": "SelfSubjectRulesReview",
                "apiVersion": f"{AUTHZ}/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec,
                "status": status,
            }
        )

    # ---------------------------------------------------------------- OIDC discovery
    async def openid_configuration(self, request: web.Request) -> web.Response:
        return _json(
            {
                "issuer": tokens.ISSUER,
                "jwks_uri": f"https://{self.server.server_address}/openid/v1/jwks",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            },
            200,
        )

    async def jwks(self, request: web.Request) -> web.Response:
        return _json(self.auth.issuer.public_jwks(), 200)


def _discovery_entry(name: str, kind: str, namespaced: bool) -> dict:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["create"],
    }


def install(server) -> AuthApis:
    apis = AuthApis(server)
    auth = f"/apis/{AUTHZ}/v1"
    server.add_route("POST", auth + "/selfsubjectaccessreviews", apis.access_review)
    server.add_route("POST", auth + "/subjectaccessreviews", apis.access_review)
    server.add_route(
        "POST", auth + "/namespaces/{namespace}/localsubjectaccessreviews", apis.access_review
    )
    server.add_route("POST", auth + "/selfsubjectrulesreviews", apis.rules_review)
    authn = f"/apis/{AUTHN}/v1"
    server.add_route("POST", authn + "/selfsubjectreviews", apis.self_subject_review)
    server.add_route("POST", authn + "/tokenreviews", apis.token_review)
    server.add_route("GET", "/.well-known/openid-configuration", apis.openid_configuration)
    server.add_route("GET", "/openid/v1/jwks", apis.jwks)
    server.set_subresource_handler("v1", "ServiceAccount", "token", apis.token_request)
    server.add_discovery_group(
        AUTHZ,
        "v1",
        [
            _discovery_entry("localsubjectaccessreviews", "LocalSubjectAccessReview", True),
            _discovery_entry("selfsubjectaccessreviews", "SelfSubjectAccessReview", False),
            _discovery_entry("selfsubjectrulesreviews", "SelfSubjectRulesReview", False),
            _discovery_entry("subjectaccessreviews", "SubjectAccessReview", False),
        ],
    )
    server.add_discovery_group(
        AUTHN,
        "v1",
        [
            _discovery_entry("selfsubjectreviews", "SelfSubjectReview", False),
            _discovery_entry("tokenreviews", "TokenReview", False),
        ],
    )
    return apis
