"""The Service in front of a workspace's pod. Pure.

It carries the labels of the job it serves, so the jobs sweep removes it (provably ours) if
the workspace's own stop did not; the selector is that job's pods.
"""

from typing import Any

from jobs.manifests import job_selector
from portal.kube import labels as L

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
