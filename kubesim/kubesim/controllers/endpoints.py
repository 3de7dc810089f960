"""Services: cluster IP allocation (as kube-apiserver does on create) and the Endpoints
controller (ready and not-ready pod addresses behind each Service with a selector; a pod whose
hostname and subdomain match a headless Service gets its hostname on its address, which is how the
Indexed Job gang pods <job>-<i>.<service> resolve)."""

from __future__ import annotations

import asyncio
import ipaddress
import random
import traceback

from kubesim.api.errors import ApiError
from kubesim.controllers.context import follow

SERVICE_CIDR = ipaddress.ip_network("10.96.0.0/12")
FIELD_MANAGER = "endpoint-controller"


def service_defaults(store):
    rng = random.Random(0)  # noqa: S311 - reproducible simulated ClusterIPs, not a secret

    def taken() -> set[str]:
        return {
            s.get("spec", {}).get("clusterIP")
            for s in store.list("v1", "Service")
            if s.get("spec", {}).get("clusterIP")
        }

    def hook(operation: str, service: dict, old: dict | None) -> None:
        if operation != "CREATE":
            return
        spec = service.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        if spec["type"] == "ExternalName":
            return
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if not spec.get("clusterIP"):
            used = taken()
            while True:
                candidate = str(SERVICE_CIDR[rng.randrange(2, SERVICE_CIDR.num_addresses - 1)])
                if candidate not in used:
                    break
            spec["clusterIP"] = candidate
        spec.setdefault("clusterIPs", [spec["clusterIP"]])

    return hook


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _resolve_port(port: dict, pods: list[dict]) -> int | None:
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for pod in pods:
        for container in pod["spec"].get("containers", []):
            for cport in container.get("ports") or []:
                if cport.get("name") == target:
                    return cport.get("containerPort")
    return None


def endpoints_for(service: dict, pods: list[dict]) -> dict:
    name = service["metadata"]["name"]
    selector = service["spec"].get("selector") or {}
    ready, not_ready = [], []
    members = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        status = pod.get("status") or {}
        if not _matches(selector, pod["metadata"].get("labels") or {}):
            continue
        if status.get("phase") in ("Succeeded", "Failed") or not status.get("podIP"):
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        members.append(pod)
        address = {
            "ip": status["podIP"],
            "nodeName": pod["spec"].get("nodeName"),
            "targetRef": {
                "kind": "Pod",
                "namespace": pod["metadata"].get("namespace"),
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"].get("uid"),
            },
        }
        if pod["spec"].get("hostname") and pod["spec"].get("subdomain") == name:
            address["hostname"] = pod["spec"]["hostname"]
        (
            ready if _ready(pod) or service["spec"].get("publishNotReadyAddresses") else not_ready
        ).append(address)
    ports = []
    for port in service["spec"].get("ports") or []:
        number = _resolve_port(port, members)
        if number is None:
            continue
        entry = {"port": number, "protocol": port.get("protocol", "TCP")}
        if port.get("name"):
            entry["name"] = port["name"]
        ports.append(entry)
    subset: dict = {}
    if ready:
        subset["addresses"] = ready
    if not_ready:
        subset["notReadyAddresses"] = not_ready
    if service["spec"].get("ports"):
        if ports and subset:
            subset["ports"] = ports
        else:
            subset = {}
    elif service["spec"].get("clusterIP") != "None":
        subset = {}  # a port-less Service only lists addresses when headless
    return {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": name,
            "namespace": service["metadata"].get("namespace"),
            "labels": dict(service["metadata"].get("labels") or {}),
        },
        "subsets": [subset] if subset else [],
    }


class EndpointsController:
    def __init__(self, ctx):
        self.store = ctx.store
        self.services: dict[str, set[str]] = {}  # namespace -> names of services with selectors
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()

    def on_service(self, event_type: str, service: dict) -> None:
        meta = service["metadata"]
        namespace = meta.get("namespace") or ""
        names = self.services.setdefault(namespace, set())
        if event_type == "DELETED" or not (service.get("spec") or {}).get("selector"):
            names.discard(meta["name"])
        else:
            names.add(meta["name"])
        self.dirty.add(namespace)
        self.wake.set()

    def on_pod(self, event_type: str, pod: dict) -> None:
        namespace = pod["metadata"].get("namespace") or ""
        if self.services.get(namespace):
            self.dirty.add(namespace)
            self.wake.set()

    def sync(self, namespace: str) -> None:
        names = self.services.get(namespace) or set()
        if not names:
            return
        pods = self.store.list("v1", "Pod", namespace)
        for name in sorted(names):
            service = self.store.try_get("v1", "Service", namespace, name)
            if service is None or not (service.get("spec") or {}).get("selector"):
                continue
            wanted = endpoints_for(service, pods)
            current = self.store.try_get("v1", "Endpoints", namespace, name)
            try:
                if current is None:
                    self.store.create(wanted, namespace=namespace)
                elif current.get("subsets") != wanted["subsets"]:
                    current["subsets"] = wanted["subsets"]
                    self.store.update(current)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
                self.dirty.add(namespace)

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.05)
            batch = list(self.dirty)
            self.dirty.clear()
            for namespace in batch:
                try:
                    self.sync(namespace)
                except Exception:
                    traceback.print_exc()


def start(ctx) -> EndpointsController:
    ctx.store.add_admission_hook("v1", "Service", service_defaults(ctx.store))
    controller = EndpointsController(ctx)
    ctx.spawn(follow(ctx.store, "v1", "Service", controller.on_service), "endpoints-services")
    ctx.spawn(follow(ctx.store, "v1", "Pod", controller.on_pod), "endpoints-pods")
    ctx.spawn(controller.loop(), "endpoints-loop")
    return controller
