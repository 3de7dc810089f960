"""Credentials tests: the personas' namespaces in the session's API-only kubesim, where the
portal writes the Secrets."""

import pytest


def point_at_kubesim(server, settings, namespaces=("gp-alpha", "gp-beta")) -> None:
    """Point the portal at `server` and make the projects' namespaces (the quota sync's job)."""
    from portal.kube import apply as kube
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(server.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    for name in namespaces:
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


@pytest.fixture
def kube(personas, kubesim_api, settings):
    point_at_kubesim(kubesim_api, settings)
    return personas


def read_secret(namespace: str, name: str):
    from portal.kube import apply as kube

    return kube.get("v1", "Secret", name, namespace)


def decoded(secret) -> dict[str, str]:
    import base64

    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
