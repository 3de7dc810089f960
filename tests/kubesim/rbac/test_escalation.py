"""RBAC's escalation check: roles only with rules one holds, bindings only to roles one holds (or
may `bind`), as kube-apiserver's RBAC registry refuses them."""

from __future__ import annotations

import uuid

import pytest
from kubesim.api.auth.escalation import compact_descriptions, missing_rules

from tests.kubesim.rbac.conftest import grant, sa_subject

pytestmark = [pytest.mark.kubesim, pytest.mark.timeout(300)]
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.mark.parametrize(
    ("owner", "wanted", "missing"),
    [
        # everything covers everything
        (
            [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            [{"verbs": ["get"], "apiGroups": ["batch"], "resources": ["jobs/status"]}],
            [],
        ),
        # verbs one by one: only the one not held is missing
        (
            [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
            [{"verbs": ["get", "delete"], "apiGroups": [""], "resources": ["pods"]}],
            [{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}],
        ),
        # */log covers pods/log, not pods
        (
            [{"verbs": ["get"], "apiGroups": [""], "resources": ["*/log"]}],
            [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods/log", "pods"]}],
            [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
        ),
        # a named rule covers only those names, never all of them
        (
            [
                {
                    "verbs": ["get"],
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["a"],
                }
            ],
            [
                {
                    "verbs": ["get"],
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["a", "b"],
                },
                {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]},
            ],
            [
                {
                    "verbs": ["get"],
                    "apiGroups": [""],
                    "resources": ["secrets"],
                    "resourceNames": ["b"],
                },
                {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]},
            ],
        ),
        (
            [{"verbs": ["get"], "nonResourceURLs": ["/metrics/*"]}],
            [{"verbs": ["get"], "nonResourceURLs": ["/metrics/slis", "/healthz"]}],
            [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
        ),
    ],
)
def test_what_the_owner_does_not_hold_is_missing(owner, wanted, missing):
    assert missing_rules(owner, wanted) == missing


def test_missing_rules_are_listed_as_upstream_lists_them():
    missing = missing_rules(
        [],
        [
            {"verbs": ["create", "delete"], "apiGroups": ["batch"], "resources": ["jobs"]},
            {"verbs": ["get"], "nonResourceURLs": ["/metrics"]},
        ],
    )
    assert compact_descriptions(missing) == [
        '{APIGroups:["batch"], Resources:["jobs"], Verbs:["create" "delete"]}',
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}',
    ]


@pytest.fixture
def delegate(kubesim_rbac, runner):
    """The runner may manage Roles and RoleBindings in its namespace and read pods there."""
    grant(
        kubesim_rbac,
        runner.namespace,
        "delegate",
        [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["roles", "rolebindings"],
                "verbs": ["create", "update", "patch", "get"],
            },
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        ],
        [sa_subject(runner)],
    )
    return runner


def _role(rules, name="granted"):
    return {"metadata": {"name": name}, "rules": rules}


def test_a_role_may_hold_only_rules_its_creator_holds(delegate):
    ns = delegate.namespace
    path = f"{RBAC}/namespaces/{ns}/roles"
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    assert delegate.request("POST", path, _role(pods))[0] == 201
    secrets = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]
    status, body = delegate.request("POST", path, _role(secrets, "more"))
    assert (status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == (
        f'roles.rbac.authorization.k8s.io "more" is forbidden: user "{delegate.username}" '
        f'(groups=["system:serviceaccounts" "system:serviceaccounts:{ns}" '
        f'"system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}'
    )
    # and not by updating a role it may update either
    status, _ = delegate.request(
        "PATCH",
        f"{path}/granted",
        {"rules": secrets},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert status == 403


def test_binding_a_role_needs_its_rules_or_the_bind_verb(kubesim_rbac, delegate):
    ns = delegate.namespace
    path = f"{RBAC}/namespaces/{ns}/rolebindings"
    binding = {
        "metadata": {"name": "edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "someone"}],
    }
    status, body = delegate.request("POST", path, binding)
    assert status == 403
    assert body["message"].startswith(
        f'rolebindings.rbac.authorization.k8s.io "edit" is forbidden: user "{delegate.username}"'
    )
    grant(
        kubesim_rbac,
        ns,
        f"bind-edit-{uuid.uuid4().hex[:6]}",
        [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "resourceNames": ["edit"],
                "verbs": ["bind"],
            }
        ],
        [sa_subject(delegate)],
    )
    assert delegate.request("POST", path, binding)[0] == 201
    # a role it holds every rule of needs no bind verb
    pods = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    assert (
        delegate.request("POST", f"{RBAC}/namespaces/{ns}/roles", _role(pods, "lister"))[0] == 201
    )
    lister = {
        "metadata": {"name": "lister"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lister"},
        "subjects": [{"kind": "User", "name": "someone"}],
    }
    assert delegate.request("POST", path, lister)[0] == 201


def test_an_aggregation_rule_takes_cluster_admin(kubesim_rbac, runner):
    name = f"gather-{uuid.uuid4().hex[:6]}"
    grant(
        kubesim_rbac,
        None,
        f"role-writer-{name}",
        [
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "verbs": ["create"],
            }
        ],
        [sa_subject(runner)],
    )
    status, body = runner.request(
        "POST",
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": name},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]},
        },
    )
    assert (status, body["message"]) == (
        403,
        f'clusterroles.rbac.authorization.k8s.io "{name}" is forbidden: must have '
        f"cluster-admin privileges to use the aggregationRule",
    )
