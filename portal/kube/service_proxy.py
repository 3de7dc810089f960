"""How the portal reaches an HTTP Service inside the cluster (workspaces' reverse proxy).

Two routes, chosen by PORTAL_WORKSPACE_ROUTE:
- "api-server": through the API server's service proxy
  (/api/v1/namespaces/NS/services/http:NAME:PORT/proxy/...), with the portal's own cluster
  credentials and CA; works wherever the portal can reach the API server (outside the cluster).
- "direct": straight to http://NAME.NS.svc:PORT, for a portal running inside the cluster.
"auto" (the default) is direct in-cluster and api-server otherwise.

The API server authenticates the portal's request and then drops its Authorization header, so
a credential meant for the Service must travel another way on that route (workspaces.launch).
"""

from __future__ import annotations

import os
import ssl
import threading
from dataclasses import dataclass

from django.conf import settings

from portal.kube.client import get_api_client, settings_key

API_SERVER, DIRECT = "api-server", "direct"


@dataclass(frozen=True)
class ServiceTarget:
    """Where to send a request whose path starts with the Service's own path ("/ws/7/...")."""

    base_url: str
    headers: dict[str, str]
    ssl_context: ssl.SSLContext | None
    via_api_server: bool
    # The prefix the API server puts before the Service's paths (to undo in redirects).
    prefix: str = ""


def route() -> str:
    chosen = str(getattr(settings, "PORTAL_WORKSPACE_ROUTE", "auto") or "auto")
    if chosen in (API_SERVER, DIRECT):
        return chosen
    in_cluster = getattr(settings, "PORTAL_KUBE_IN_CLUSTER", False)
    return DIRECT if in_cluster and not getattr(settings, "PORTAL_KUBE_HOST", "") else API_SERVER


_lock = threading.Lock()
_contexts: dict[tuple[int, str], ssl.SSLContext | None] = {}


def _ssl_context(configuration) -> ssl.SSLContext | None:
    """The TLS settings of the official client's configuration, built once per process."""
    key = (os.getpid(), settings_key())
    with _lock:
        if key in _contexts:
            return _contexts[key]
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None)
        if not configuration.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
        _contexts[key] = context
        return context


def service_target(namespace: str, service: str, port: int) -> ServiceTarget:
    if route() == DIRECT:
        return ServiceTarget(f"http://{service}.{namespace}.svc:{port}", {}, None, False)
    configuration = get_api_client().configuration
    headers = {}
    # Reads a rotated in-cluster token again (the client's refresh hook) before each use.
    for auth in configuration.auth_settings().values():
        if auth.get("in") == "header" and auth.get("value"):
            headers[auth["key"]] = auth["value"]
    prefix = f"/api/v1/namespaces/{namespace}/services/http:{service}:{port}/proxy"
    return ServiceTarget(
        configuration.host.rstrip("/") + prefix,
        headers,
        _ssl_context(configuration),
        True,
        prefix,
    )
