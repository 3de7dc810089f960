import uuid

import pytest
from kubernetes import client


@pytest.fixture
def admin(kubesim_rbac):
    api_client = kubesim_rbac.api_client()
    yield api_client
    api_client.close()


class Account:
    """A ServiceAccount of the test's own namespace, its token, and clients that use the token."""

    def __init__(self, server, namespace: str, name: str):
        self.server = server
        self.namespace = namespace
        self.name = name
        self.username = f"system:serviceaccount:{namespace}:{name}"
        self.token = server.service_account_token(namespace, name)
        self.api_client = server.api_client(token=self.token)

    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    def request(self, method: str, path: str, body: dict | None = None, **kwargs):
        return self.server.request(method, path, body, token=self.token, **kwargs)


@pytest.fixture
def runner(kubesim_rbac):
    """The ServiceAccount `runner` of a fresh namespace (no permissions beyond the defaults)."""
    account = Account(kubesim_rbac, f"t-{uuid.uuid4().hex[:10]}", "runner")
    yield account
    account.api_client.close()


def grant(server, namespace: str | None, name: str, rules: list[dict], subjects: list[dict]):
    """A Role (ClusterRole when namespace is None) with `rules` and its binding to `subjects`."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    scope = f"{rbac}/namespaces/{namespace}" if namespace else rbac
    role_kind = "Role" if namespace else "ClusterRole"
    for path, body in (
        (f"{scope}/{role_kind.lower()}s", {"metadata": {"name": name}, "rules": rules}),
        (
            f"{scope}/{role_kind.lower()}bindings",
            {
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": role_kind,
                    "name": name,
                },
                "subjects": subjects,
            },
        ),
    ):
        status, data = server.request("POST", path, body)
        assert status == 201, data


def sa_subject(account: Account) -> dict:
    return {"kind": "ServiceAccount", "name": account.name, "namespace": account.namespace}
