"""The Service in front of a workspace's pod, and the Secret with its sign-in token. Pure.

The Service carries the labels of the job it serves, so the jobs sweep removes it (provably
ours) if the workspace's own stop did not; the selector is that job's pods. The Secret is the
workspace's (its labels say so) and goes when the run does (workspaces.services.workspace_sync).
"""

import base64
from typing import Any

from credentials.manifests import secret_name
from jobs.manifests import job_selector
from portal.kube import labels as L
from workspaces.launch import token_credential

WORKSPACE_ID_KEY = "gpu-portal.io/workspace-id"
PORT_NAME = "http"


def service_name(workspace_id: int) -> str:
    return f"gp-ws-{workspace_id}"


def service_manifest(
    *, workspace_id: int, job_id: int, project_slug: str, namespace: str, port: int
) -> dict[str, Any]:
    selector = dict(part.split("=", 1) for part in job_selector(job_id).split(","))
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(workspace_id),
            "namespace": namespace,
            "labels": L.managed_labels(
                **{
                    L.JOB_ID_KEY: str(job_id),
                    L.PROJECT_KEY: project_slug,
                    L.OWNER_KIND_KEY: "job",
                    WORKSPACE_ID_KEY: str(workspace_id),
                }
            ),
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }


def token_secret_name(workspace_id: int, run: int) -> str:
    return secret_name(token_credential(workspace_id, run))


def token_secret_manifest(
    *,
    workspace_id: int,
    run: int,
    job_id: int,
    project_slug: str,
    namespace: str,
    values: dict[str, str],
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": token_secret_name(workspace_id, run),
            "namespace": namespace,
            "labels": L.managed_labels(
                **{
                    L.JOB_ID_KEY: str(job_id),
                    L.PROJECT_KEY: project_slug,
                    L.OWNER_KIND_KEY: "workspace",
                    WORKSPACE_ID_KEY: str(workspace_id),
                }
            ),
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())},
    }


def is_token_secret(obj: dict[str, Any] | None, workspace_id: int) -> bool:
    """Whether a Secret read from the cluster is this workspace's token Secret (the portal's)."""
    labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
    return L.is_managed(obj or {}) and labels.get(WORKSPACE_ID_KEY) == str(workspace_id)
