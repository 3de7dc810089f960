"""The Secret that holds a credential's values. Pure: values in, a manifest out.

Deterministic names (gp-cred-<credential>) and the portal's labels, so the reconciler and
delete only ever touch Secrets the portal wrote. `data` is base64 as the API stores it (not
stringData, which server-side apply would keep as a separate field).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from credentials.registry import auth_key
from portal.kube import labels as L

SECRET_PREFIX = "gp-cred-"  # noqa: S105 - a name prefix, not a password
CREDENTIAL_KEY = "gpu-portal.io/credential"
OWNER_KIND = "credential"
OPAQUE = "Opaque"
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_KEY = ".dockerconfigjson"


def secret_name(credential_name: str) -> str:
    return f"{SECRET_PREFIX}{credential_name}"


def credential_labels(project_slug: str, credential_name: str) -> dict[str, str]:
    return L.managed_labels(
        **{
            L.PROJECT_KEY: project_slug,
            L.OWNER_KIND_KEY: OWNER_KIND,
            CREDENTIAL_KEY: credential_name,
        }
    )


def is_portal_secret(obj: dict[str, Any] | None, project_slug: str, credential_name: str) -> bool:
    """Whether a Secret read from the cluster is the one the portal wrote for this credential."""
    if not obj:
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(
        labels.get(k) == v for k, v in credential_labels(project_slug, credential_name).items()
    )


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def decode_data(obj: dict[str, Any]) -> dict[str, str]:
    """The Secret's values as text (for merging a partial replacement; never stored)."""
    return {
        key: base64.b64decode(value).decode("utf-8", errors="replace")
        for key, value in (obj.get("data") or {}).items()
    }


def _secret(
    namespace: str, project_slug: str, name: str, type_: str, data: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(name),
            "namespace": namespace,
            "labels": credential_labels(project_slug, name),
        },
        "type": type_,
        "data": {key: _b64(value) for key, value in sorted(data.items())},
    }


def opaque_secret(
    *, namespace: str, project_slug: str, name: str, values: dict[str, str]
) -> dict[str, Any]:
    return _secret(namespace, project_slug, name, OPAQUE, values)


def docker_config_json(*, server: str, username: str, token: str) -> str:
    auth = base64.b64encode(f"{username}:{token}".encode()).decode()
    entry = {"username": username, "password": token, "auth": auth}
    return json.dumps({"auths": {auth_key(server): entry}}, sort_keys=True)


def registry_secret(
    *, namespace: str, project_slug: str, name: str, server: str, username: str, token: str
) -> dict[str, Any]:
    config = docker_config_json(server=server, username=username, token=token)
    return _secret(namespace, project_slug, name, DOCKER_CONFIG_JSON, {DOCKER_CONFIG_KEY: config})
