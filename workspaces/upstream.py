"""Requests from the portal to a workspace's server: where to send them and with what."""

from __future__ import annotations

import datetime

import httpx

from portal.kube.apply import RetryableKubeError
from portal.kube.service_proxy import ServiceTarget, service_target
from workspaces import launch
from workspaces.manifests import service_name
from workspaces.models import Workspace


def target_for(workspace: Workspace) -> ServiceTarget:
    return service_target(
        workspace.project.namespace, service_name(workspace.pk), workspace.kind.port
    )


def kernel_last_activity(workspace: Workspace) -> datetime.datetime | None:
    """Jupyter's /api/status last_activity (kernels and terminals included); None for an app
    that has no such endpoint. RetryableKubeError when the server cannot be asked now."""
    if workspace.kind.app != "jupyter":
        return None
    target = target_for(workspace)
    creds = launch.credentials(
        workspace.kind.app, token=workspace.token, via_api_server=target.via_api_server
    )
    url = f"{target.base_url}{workspace.base_path}api/status"
    try:
        with httpx.Client(
            verify=target.ssl_context or True, timeout=10.0, cookies=creds.cookies
        ) as client:
            response = client.get(
                url, params=creds.query, headers={**target.headers, **creds.headers}
            )
    except httpx.HTTPError as exc:
        raise RetryableKubeError(f"workspace {workspace.pk}: {exc}") from exc
    if response.status_code != 200:
        raise RetryableKubeError(
            f"workspace {workspace.pk}: /api/status answered {response.status_code}"
        )
    raw = (response.json() or {}).get("last_activity")
    if not raw:
        return None
    return datetime.datetime.fromisoformat(raw.replace("Z", "+00:00"))
