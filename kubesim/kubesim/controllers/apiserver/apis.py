"""The APIs kubectl and clients expect beside stored objects, and what a namespace starts with:

- authorization.k8s.io/v1 SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview
  (`kubectl auth can-i`); authorization is allow-all (the single admin token), so every review
  answers allowed, with the reason saying so;
- authentication.k8s.io/v1 SelfSubjectReview (`kubectl auth whoami`) and TokenReview;
- serviceaccounts/NAME/token (`kubectl create token`): a TokenRequest answered with a signed-looking
  JWT naming the account, its audiences and expiry;
- metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics (`kubectl top`): simulated usage derived from
  each running container's requests (half its CPU request, 60 % of its memory request, floors of
  1m and 8Mi), the node's sum of its pods plus a system share;
- every namespace gets its `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap, as the
  serviceaccount and root-ca-cert-publisher controllers create them.
"""

from __future__ import annotations

import base64
import hashlib
import uuid

import orjson
from aiohttp import web

from kubesim.api import errors, protobuf
from kubesim.api.quantity import canonical
from kubesim.api.selectors import labels_match, to_requirements
from kubesim.controllers.context import follow
from kubesim.controllers.scheduler import is_terminal, quantity_units
from kubesim.controllers.workloads import rfc3339

ADMIN_USER = "kubesim-admin"
ADMIN_GROUPS = ["system:masters", "system:authenticated"]
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
TOKEN_DEFAULT_SECONDS = 3600
METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
METRICS_WINDOW = "30s"
SYSTEM_CPU_MILLI = 250
SYSTEM_MEMORY_BYTES = 1 << 30


def _json(body: dict, status: int = 200) -> web.Response:
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


def _now(ctx) -> str:
    return ctx.store.now()


class ExtraApis:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.ca_pem = (getattr(ctx.server, "ca_pem", None) or b"").decode()

    # ---------------------------------------------------------------- authorization
    async def access_review(self, request: web.Request) -> web.Response:
        kind = (
            "SelfSubjectAccessReview"
            if request.path.endswith("selfsubjectaccessreviews")
            else "SubjectAccessReview"
        )
        body = await _read_body(request, kind)
        spec = body.get("spec") or {}
        if not spec.get("resourceAttributes") and not spec.get("nonResourceAttributes"):
            raise errors.invalid(
                kind,
                "authorization.k8s.io",
                "",
                [
                    errors.required(
                        "spec.resourceAttributes",
                        "exactly one of nonResourceAttributes or resourceAttributes must be "
                        "specified",
                    )
                ],
            )
        return _json(
            {
                "kind": kind,
                "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": spec,
                "status": {
                    "allowed": True,
                    "reason": "kubesim authorizes every request of its admin token",
                },
            },
            201,
        )

    async def rules_review(self, request: web.Request) -> web.Response:
        body = await _read_body(request, "SelfSubjectRulesReview")
        return _json(
            {
                "kind": "SelfSubjectRulesReview",
                "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": body.get("spec") or {},
                "status": {
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                    "incomplete": False,
                },
            },
            201,
        )

    # ---------------------------------------------------------------- authentication
    async def self_subject_review(self, request: web.Request) -> web.Response:
        await _read_body(request, "SelfSubjectReview")
        return _json(
            {
                "kind": "SelfSubjectReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": _now(self.ctx)},
                "status": {"userInfo": {"username": ADMIN_USER, "groups": ADMIN_GROUPS}},
            },
            201,
        )

    async def token_review(self, request: web.Request) -> web.Response:
        body = await _read_body(request, "TokenReview")
        token = (body.get("spec") or {}).get("token") or ""
        status: dict = {"authenticated": False, "user": {}}
        if token == self.ctx.server.token:
            status = {
                "authenticated": True,
                "user": {"username": ADMIN_USER, "groups": ADMIN_GROUPS},
            }
        else:
            claims = _token_claims(token)
            if claims is not None:
                namespace, name = claims.get("ns", ""), claims.get("sa", "")
                if self.store.try_get("v1", "ServiceAccount", namespace, name) is not None:
                    status = {
                        "authenticated": True,
                        "user": {
                            "username": f"system:serviceaccount:{namespace}:{name}",
                            "groups": [
                                "system:serviceaccounts",
                                f"system:serviceaccounts:{namespace}",
                                "system:authenticated",
                            ],
                        },
                        "audiences": claims.get("aud") or [],
                    }
        return _json(
            {
                "kind": "TokenReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": None},
                "spec": body.get("spec") or {},
                "status": status,
            },
            201,
        )

    async def token_request(
        self, request: web.Request, namespace: str, name: str, rest: str = ""
    ) -> web.Response:
        if request.method != "POST":
            raise errors.method_not_allowed()
        body = await _read_body(request, "TokenRequest")
        if self.store.try_get("v1", "ServiceAccount", namespace, name) is None:
            raise errors.not_found("serviceaccounts", name)
        spec = dict(body.get("spec") or {})
        seconds = int(spec.get("expirationSeconds") or TOKEN_DEFAULT_SECONDS)
        if seconds < 600:
            raise errors.invalid(
                "TokenRequest",
                "authentication.k8s.io",
                name,
                [
                    errors.invalid_value(
                        "spec.expirationSeconds",
                        seconds,
                        "may not specify a duration less than 10 minutes",
                    )
                ],
            )
        spec["expirationSeconds"] = seconds
        spec.setdefault("audiences", ["https://kubernetes.default.svc.cluster.local"])
        spec.setdefault("boundObjectRef", None)
        now = self.ctx.clock.time()
        claims = {
            "aud": spec["audiences"],
            "exp": int(now + seconds),
            "iat": int(now),
            "iss": "https://kubernetes.default.svc.cluster.local",
            "jti": str(uuid.uuid4()),
            "sub": f"system:serviceaccount:{namespace}:{name}",
            "ns": namespace,
            "sa": name,
        }
        token = _sign(claims, self.ctx.server.token)
        return _json(
            {
                "kind": "TokenRequest",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
                "spec": spec,
                "status": {"token": token, "expirationTimestamp": rfc3339(now + seconds)},
            },
            201,
        )

    # ---------------------------------------------------------------- metrics
    def _pod_metrics(self, pod: dict) -> dict | None:
        status = pod.get("status") or {}
        if status.get("phase") != "Running" or is_terminal(pod):
            return None
        containers = []
        for container in (pod.get("spec") or {}).get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            limits = (container.get("resources") or {}).get("limits") or {}
            cpu = requests.get("cpu", limits.get("cpu"))
            memory = requests.get("memory", limits.get("memory"))
            cpu_milli = max(1, quantity_units("cpu", cpu) // 2) if cpu is not None else 1
            memory_bytes = (
                max(8 << 20, quantity_units("memory", memory) * 6 // 10)
                if memory is not None
                else 8 << 20
            )
            containers.append(
                {
                    "name": container.get("name"),
                    "usage": {
                        "cpu": f"{cpu_milli * 1_000_000}n",
                        "memory": canonical(f"{memory_bytes // 1024}Ki"),
                    },
                }
            )
        meta = pod["metadata"]
        return {
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "creationTimestamp": _now(self.ctx),
                "labels": dict(meta.get("labels") or {}),
            },
            "timestamp": _now(self.ctx),
            "window": METRICS_WINDOW,
            "containers": containers,
        }

    def _node_metrics(self, node: dict) -> dict:
        name = node["metadata"]["name"]
        cpu = SYSTEM_CPU_MILLI * 1_000_000
        memory = SYSTEM_MEMORY_BYTES
        for pod in self.store.list("v1", "Pod", None, field_selector=f"spec.nodeName={name}"):
            metrics = self._pod_metrics(pod)
            for container in (metrics or {}).get("containers") or []:
                cpu += int(container["usage"]["cpu"].rstrip("n"))
                memory += quantity_units("memory", container["usage"]["memory"])
        return {
            "metadata": {
                "name": name,
                "creationTimestamp": _now(self.ctx),
                "labels": dict(node["metadata"].get("labels") or {}),
            },
            "timestamp": _now(self.ctx),
            "window": METRICS_WINDOW,
            "usage": {"cpu": f"{cpu}n", "memory": canonical(f"{memory // 1024}Ki")},
        }

    @staticmethod
    def _selected(items: list[dict], request: web.Request) -> list[dict]:
        selector = request.query.get("labelSelector")
        if not selector:
            return items
        reqs = to_requirements(selector)
        return [i for i in items if labels_match(reqs, i["metadata"].get("labels"))]

    def _list(self, kind: str, items: list[dict]) -> web.Response:
        return _json(
            {
                "kind": f"{kind}List",
                "apiVersion": f"{METRICS_GROUP}/{METRICS_VERSION}",
                "metadata": {},
                "items": [
                    {"kind": kind, "apiVersion": f"{METRICS_GROUP}/{METRICS_VERSION}", **i}
                    for i in items
                ],
            }
        )

    async def node_metrics(self, request: web.Request) -> web.Response:
        name = request.match_info.get("name")
        if name:
            node = self.store.try_get("v1", "Node", None, name)
            if node is None:
                raise errors.not_found("nodes.metrics.k8s.io", name)
            return _json(
                {
                    "kind": "NodeMetrics",
                    "apiVersion": f"{METRICS_GROUP}/{METRICS_VERSION}",
                    **self._node_metrics(node),
                }
            )
        nodes = [self._node_metrics(n) for n in self.store.list("v1", "Node", None)]
        return self._list("NodeMetrics", self._selected(nodes, request))

    async def pod_metrics(self, request: web.Request) -> web.Response:
        namespace = request.match_info.get("namespace")
        name = request.match_info.get("name")
        if name:
            pod = self.store.try_get("v1", "Pod", namespace, name)
            metrics = self._pod_metrics(pod) if pod is not None else None
            if metrics is None:
                raise errors.not_found("pods.metrics.k8s.io", name)
            return _json(
                {
                    "kind": "PodMetrics",
                    "apiVersion": f"{METRICS_GROUP}/{METRICS_VERSION}",
                    **metrics,
                }
            )
        items = [self._pod_metrics(p) for p in self.store.list("v1", "Pod", namespace)]
        return self._list("PodMetrics", self._selected([i for i in items if i], request))

    # ---------------------------------------------------------------- namespaces
    def on_namespace(self, event_type: str, namespace: dict) -> None:
        if event_type == "DELETED" or namespace["metadata"].get("deletionTimestamp"):
            return
        name = namespace["metadata"]["name"]
        if self.store.try_get("v1", "ServiceAccount", name, "default") is None:
            self._ensure(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name},
                },
                name,
            )
        if self.store.try_get("v1", "ConfigMap", name, ROOT_CA_CONFIGMAP) is None:
            self._ensure(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": ROOT_CA_CONFIGMAP,
                        "namespace": name,
                        "annotations": {
                            "kubernetes.io/description": "Contains a CA bundle that can be used "
                            "to verify the kube-apiserver when using internal endpoints such as "
                            "the internal service IP or kubernetes.default.svc. No other usage "
                            "is guaranteed across distributions of Kubernetes clusters."
                        },
                    },
                    "data": {"ca.crt": self.ca_pem},
                },
                name,
            )

    def _ensure(self, obj: dict, namespace: str) -> None:
        try:
            self.store.create(obj, namespace=namespace, field_manager="kube-controller-manager")
        except errors.ApiError as exc:
            if exc.code not in (403, 404, 409):  # namespace terminating or gone, or a race
                raise


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _sign(claims: dict, key: str) -> str:
    header = _b64(orjson.dumps({"alg": "HS256", "kid": "kubesim"}))
    payload = _b64(orjson.dumps(claims))
    signature = hashlib.sha256(f"{key}.{header}.{payload}".encode()).digest()
    return f"{header}.{payload}.{_b64(signature)}"


def _token_claims(token: str) -> dict | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        return orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None


def _discovery(server) -> None:
    def entry(name: str, kind: str, namespaced: bool, verbs: list[str]) -> dict:
        return {
            "name": name,
            "singularName": "",
            "namespaced": namespaced,
            "kind": kind,
            "verbs": verbs,
        }

    server.add_discovery_group(
        "authorization.k8s.io",
        "v1",
        [
            entry("localsubjectaccessreviews", "LocalSubjectAccessReview", True, ["create"]),
            entry("selfsubjectaccessreviews", "SelfSubjectAccessReview", False, ["create"]),
            entry("selfsubjectrulesreviews", "SelfSubjectRulesReview", False, ["create"]),
            entry("subjectaccessreviews", "SubjectAccessReview", False, ["create"]),
        ],
    )
    server.add_discovery_group(
        "authentication.k8s.io",
        "v1",
        [
            entry("selfsubjectreviews", "SelfSubjectReview", False, ["create"]),
            entry("tokenreviews", "TokenReview", False, ["create"]),
        ],
    )
    server.add_discovery_group(
        METRICS_GROUP,
        METRICS_VERSION,
        [
            entry("nodes", "NodeMetrics", False, ["get", "list"]),
            entry("pods", "PodMetrics", True, ["get", "list"]),
        ],
    )


def install(ctx) -> ExtraApis:
    apis = ExtraApis(ctx)
    server = ctx.server
    auth = "/apis/authorization.k8s.io/v1"
    server.add_route("POST", auth + "/selfsubjectaccessreviews", apis.access_review)
    server.add_route("POST", auth + "/subjectaccessreviews", apis.access_review)
    server.add_route(
        "POST", auth + "/namespaces/{namespace}/localsubjectaccessreviews", apis.access_review
    )
    server.add_route("POST", auth + "/selfsubjectrulesreviews", apis.rules_review)
    authn = "/apis/authentication.k8s.io/v1"
    server.add_route("POST", authn + "/selfsubjectreviews", apis.self_subject_review)
    server.add_route("POST", authn + "/tokenreviews", apis.token_review)
    metrics = f"/apis/{METRICS_GROUP}/{METRICS_VERSION}"
    server.add_route("GET", metrics + "/nodes", apis.node_metrics)
    server.add_route("GET", metrics + "/nodes/{name}", apis.node_metrics)
    server.add_route("GET", metrics + "/pods", apis.pod_metrics)
    server.add_route("GET", metrics + "/namespaces/{namespace}/pods", apis.pod_metrics)
    server.add_route("GET", metrics + "/namespaces/{namespace}/pods/{name}", apis.pod_metrics)
    server.set_subresource_handler("v1", "ServiceAccount", "token", apis.token_request)
    _discovery(server)

    def namespace_written(event_type: str, rtype, obj: dict, old: dict | None) -> None:
        # at once, so that a pod created right after its namespace finds the default account
        if event_type == "ADDED" and rtype.group == "" and rtype.kind == "Namespace":
            apis.on_namespace(event_type, obj)

    ctx.store.add_write_listener(namespace_written)
    ctx.spawn(follow(ctx.store, "v1", "Namespace", apis.on_namespace), "namespace-defaults")
    return apis
