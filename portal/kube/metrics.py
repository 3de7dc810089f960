"""Reading dcgm-exporter: find its pods and fetch their /metrics (through the API server's pod
proxy from outside the cluster, straight to the pod IP from inside).

Scrapes use a client of their own (no rate-limiter token per scrape, a connection pool as large
as the scrape pool) so a sweep neither starves nor is starved by the reconcilers' API calls.
Proxy responses are read raw (`_preload_content=False`): the generated client would turn the
text into a bytes repr.
"""

from __future__ import annotations

import threading
import urllib.request
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from portal.kube.apply import classify
from portal.kube.client import build_api_client


@dataclass(frozen=True)
class ExporterPod:
    namespace: str
    name: str
    node: str
    pod_ip: str
    ready: bool


_lock = threading.Lock()
_clients: dict[tuple[int, int], k8s.ApiClient] = {}


def scrape_client(pool_size: int) -> k8s.ApiClient:
    """A process-wide ApiClient for scrapes with `pool_size` connections, unpaced."""
    import os

    key = (os.getpid(), pool_size)
    with _lock:
        api = _clients.get(key)
        if api is None:
            base = build_api_client()
            configuration = base.configuration
            configuration.connection_pool_maxsize = max(1, pool_size)
            base.close()
            api = _clients[key] = k8s.ApiClient(configuration=configuration)
        return api


def reset_scrape_clients() -> None:
    with _lock:
        for api in _clients.values():
            api.close()
        _clients.clear()


def _ready(pod: Any) -> bool:
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


def list_exporter_pods(
    namespace: str, label_selector: str, *, timeout: float = 10.0
) -> list[ExporterPod]:
    """The exporter pods (any phase; `ready` says whether to scrape them)."""
    core = k8s.CoreV1Api(scrape_client(1))
    try:
        pods = core.list_namespaced_pod(
            namespace, label_selector=label_selector, _request_timeout=timeout
        ).items
    except Exception as exc:
        raise classify(exc) from exc
    return [
        ExporterPod(
            namespace=namespace,
            name=p.metadata.name,
            node=(p.spec.node_name if p.spec else "") or "",
            pod_ip=(p.status.pod_ip if p.status else "") or "",
            ready=_ready(p),
        )
        for p in pods
    ]


def scrape_via_proxy(
    pod: ExporterPod, *, port: int, path: str, timeout: float, pool_size: int
) -> str:
    """GET <pod>:<port>/<path> through the API server's pod proxy."""
    core = k8s.CoreV1Api(scrape_client(pool_size))
    try:
        response = core.connect_get_namespaced_pod_proxy_with_path(
            f"{pod.name}:{port}",
            pod.namespace,
            path.lstrip("/"),
            _preload_content=False,
            _request_timeout=timeout,
        )
        return response.data.decode("utf-8", errors="replace")
    except Exception as exc:
        raise classify(exc) from exc


def scrape_direct(pod: ExporterPod, *, port: int, path: str, timeout: float) -> str:
    """GET http://<pod IP>:<port>/<path> (the portal runs inside the cluster)."""
    url = f"http://{pod.pod_ip}:{port}/{path.lstrip('/')}"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8", errors="replace")
