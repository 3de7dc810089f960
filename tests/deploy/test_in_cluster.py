"""In-cluster mode outside a pod: PORTAL_KUBE_IN_CLUSTER with the token, the CA and the API
server given by PORTAL_KUBE_TOKEN_FILE, PORTAL_KUBE_CA_FILE and PORTAL_KUBE_HOST, against a
kubesim that enforces RBAC. The portal then is exactly its service account: what the roles grant
works, anything else is a 403 naming the permission."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.kubesim]


@pytest.fixture
def in_cluster(kubesim_rbac, settings, tmp_path):
    """The portal's client configured in-cluster as the ServiceAccount reader/portal, which may
    list namespaces and nothing else."""
    from portal.kube.client import reset_api_client
    from tests.deploy.conftest import kubectl, to_yaml

    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "reader"}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "portal", "namespace": "reader"},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "reader-namespaces"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "reader-namespaces"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "reader-namespaces",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "portal", "namespace": "reader"}],
        },
    ]
    kubectl("apply", "-f", "-", stdin=to_yaml(objects), kubeconfig=kubesim_rbac.kubeconfig)
    token = tmp_path / "token"
    token.write_text(kubesim_rbac.service_account_token("reader", "portal"))
    settings.PORTAL_KUBE_IN_CLUSTER = True
    settings.PORTAL_KUBE_TOKEN_FILE = str(token)
    settings.PORTAL_KUBE_CA_FILE = str(kubesim_rbac.ca_file)
    settings.PORTAL_KUBE_HOST = kubesim_rbac.url
    settings.KUBECONFIG = str(tmp_path / "no-kubeconfig")  # in-cluster must not need one
    reset_api_client()
    yield kubesim_rbac
    reset_api_client()


def test_the_service_account_does_what_its_role_grants(in_cluster):
    from portal.kube import apply as kube

    names = {n["metadata"]["name"] for n in kube.list_objects("v1", "Namespace")}
    assert {"reader", "kube-system"} <= names


def test_anything_else_is_a_403_naming_the_missing_permission(in_cluster):
    from portal.kube import apply as kube
    from portal.kube.apply import PermanentKubeError

    with pytest.raises(PermanentKubeError) as refused:
        kube.get("v1", "Secret", "anything", "kube-system")
    assert refused.value.status == 403
    assert refused.value.message == (
        'secrets "anything" is forbidden: User "system:serviceaccount:reader:portal" cannot get '
        'resource "secrets" in API group "" in the namespace "kube-system"'
    )


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("https://10.0.0.1:6443", ("10.0.0.1", "6443")),
        ("10.0.0.1:6443", ("10.0.0.1", "6443")),
        ("https://kubernetes.default.svc", ("kubernetes.default.svc", "443")),
        ("https://[fd00::1]:6443", ("fd00::1", "6443")),
    ],
)
def test_the_host_override_becomes_the_service_variables(host, expected):
    from portal.kube.client import _service_environ

    environ = _service_environ(host)
    assert (environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"]) == expected


def test_a_plain_http_host_is_refused(settings):
    from django.core.exceptions import ImproperlyConfigured

    from portal.kube.client import _service_environ

    with pytest.raises(ImproperlyConfigured, match="PORTAL_KUBE_HOST"):
        _service_environ("http://10.0.0.1:8080")


def test_a_missing_token_file_says_so(settings, tmp_path):
    from kubernetes.config.config_exception import ConfigException

    from portal.kube.client import build_api_client

    settings.PORTAL_KUBE_IN_CLUSTER = True
    settings.PORTAL_KUBE_TOKEN_FILE = str(tmp_path / "absent")
    settings.PORTAL_KUBE_HOST = "https://127.0.0.1:6443"
    with pytest.raises(ConfigException, match="token file does not exist"):
        build_api_client()


@pytest.mark.parametrize(
    ("status", "message", "denial"),
    [
        (
            403,
            'jobs.batch "gp-job-1" is forbidden: User "system:serviceaccount:gpu-portal:gpu-portal"'
            ' cannot patch resource "jobs" in API group "batch" in the namespace "gp-a"',
            True,
        ),
        # a terminating namespace and an admission webhook also answer 403: not a permission
        (
            403,
            'jobs.batch "gp-job-1" is forbidden: unable to create new content in namespace gp-a '
            "because it is being terminated",
            False,
        ),
        (403, 'admission webhook "vjob.kb.io" denied the request: forbidden image', False),
        (422, 'Job.batch "gp-job-1" is invalid: spec.parallelism: Invalid value', False),
    ],
)
def test_a_permission_refusal_is_told_apart(status, message, denial):
    from portal.kube.apply import PermanentKubeError, is_rbac_denial

    assert is_rbac_denial(PermanentKubeError(message, status=status)) is denial
