"""The APIs kubectl and clients expect beside stored objects, and what a namespace starts with
(authentication, authorization and TokenRequest are API machinery: kubesim/api/auth/):

- metrics.k8s.io/v1beta1 NodeMetrics and PodMetrics (`kubectl top`): simulated usage derived from
  each running container's requests (half its CPU request, 60 % of its memory request, floors of
  1m and 8Mi), the node's sum of its pods plus a system share;
- every namespace gets its `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap, as the
  serviceaccount and root-ca-cert-publisher controllers create them.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from kubesim.api import errors
from kubesim.api.quantity import canonical
from kubesim.api.selectors import labels_match, to_requirements
from kubesim.controllers.context import follow
from kubesim.controllers.scheduler import is_terminal, quantity_units

ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"
METRICS_WINDOW = "30s"
SYSTEM_CPU_MILLI = 250
SYSTEM_MEMORY_BYTES = 1 << 30


def _json(body: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


def _now(ctx) -> str:
    return ctx.store.now()


class ExtraApis:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.ca_pem = (getattr(ctx.server, "ca_pem", None) or b"").decode()

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
    metrics = f"/apis/{METRICS_GROUP}/{METRICS_VERSION}"
    server.add_route("GET", metrics + "/nodes", apis.node_metrics)
    server.add_route("GET", metrics + "/nodes/{name}", apis.node_metrics)
    server.add_route("GET", metrics + "/pods", apis.pod_metrics)
    server.add_route("GET", metrics + "/namespaces/{namespace}/pods", apis.pod_metrics)
    server.add_route("GET", metrics + "/namespaces/{namespace}/pods/{name}", apis.pod_metrics)
    _discovery(server)

    def namespace_written(event_type: str, rtype, obj: dict, old: dict | None) -> None:
        # at once, so that a pod created right after its namespace finds the default account
        if event_type == "ADDED" and rtype.group == "" and rtype.kind == "Namespace":
            apis.on_namespace(event_type, obj)

    ctx.store.add_write_listener(namespace_written)
    ctx.spawn(follow(ctx.store, "v1", "Namespace", apis.on_namespace), "namespace-defaults")
    return apis
