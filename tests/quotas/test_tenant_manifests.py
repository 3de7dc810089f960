"""quotas/manifests.py: what a project namespace gets besides its quota (pure): the NetworkPolicy
isolating it from the other tenants and the RoleBinding giving the portal its tenant role there."""

from dataclasses import replace

import pytest

from quotas import manifests as qm

ALPHA = qm.ProjectSpec(
    slug="alpha",
    namespace="gp-alpha",
    department_slug="research",
    quotas=(qm.QuotaAmount("h100", "gpu", 2, 4),),
)
H100 = qm.PoolSpec(
    slug="h100",
    node_labels={},
    mig_profiles=(),
    total_gpus=8,
    default_cpu="8",
    default_memory="64Gi",
)
MODEL = qm.QuotaModel(
    pools=(H100,), departments=(qm.DepartmentSpec("research"),), projects=(ALPHA,)
)


def _kinds(access: qm.TenantAccess) -> list[str]:
    model = replace(MODEL, tenant=access)
    return [
        o["kind"]
        for o in qm.desired_quota_objects(model)
        if o["metadata"].get("namespace") == "gp-alpha" or o["kind"] == "Namespace"
    ]


@pytest.mark.parametrize(
    ("access", "expected"),
    [
        (qm.TenantAccess(), ["Namespace", "NetworkPolicy", "LocalQueue", "ResourceQuota"]),
        (
            qm.TenantAccess(network_policy=False),
            ["Namespace", "LocalQueue", "ResourceQuota"],
        ),
        (
            qm.TenantAccess(role="gpu-portal-tenant"),
            ["Namespace", "RoleBinding", "NetworkPolicy", "LocalQueue", "ResourceQuota"],
        ),
        (
            qm.TenantAccess(network_policy=False, role="gpu-portal-tenant"),
            ["Namespace", "RoleBinding", "LocalQueue", "ResourceQuota"],
        ),
    ],
)
def test_what_a_project_namespace_holds_and_in_which_order(access, expected):
    # The RoleBinding comes right after the namespace: everything after it is written with it.
    assert _kinds(access) == expected


def _peers(policy):
    (rule,) = policy["spec"]["ingress"]
    return rule["from"]


def _admits(policy, *, same_namespace: bool, namespace_labels: dict[str, str]) -> bool:
    """Whether one of the policy's peers matches a source pod (a small selector evaluator for
    the shapes the policy uses: empty podSelector, matchLabels, NotIn)."""
    for peer in _peers(policy):
        if "podSelector" in peer and "namespaceSelector" not in peer:
            if same_namespace and peer["podSelector"] == {}:
                return True
            continue
        selector = peer["namespaceSelector"]
        labels_ok = all(
            namespace_labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()
        )
        for expression in selector.get("matchExpressions", []):
            value = namespace_labels.get(expression["key"])
            assert expression["operator"] == "NotIn"
            labels_ok = labels_ok and value not in expression["values"]
        if labels_ok:
            return True
    return False


TENANT = {"kubernetes.io/metadata.name": "gp-beta", "app.kubernetes.io/managed-by": "gpu-portal"}


@pytest.mark.parametrize(
    ("source", "same_namespace", "labels", "admitted"),
    [
        ("a pod of the same project (a gang's ranks)", True, {}, True),
        ("the portal's namespace", False, {"kubernetes.io/metadata.name": "gpu-portal"}, True),
        ("another project's namespace", False, TENANT, False),
        (
            "an orphaned project's namespace",
            False,
            {**TENANT, "gpu-portal.io/orphaned": "true"},
            False,
        ),
        ("the ingress controller", False, {"kubernetes.io/metadata.name": "ingress-nginx"}, True),
        ("monitoring", False, {"kubernetes.io/metadata.name": "monitoring"}, True),
        (
            "a namespace another tool manages",
            False,
            {"kubernetes.io/metadata.name": "argo", "app.kubernetes.io/managed-by": "Helm"},
            True,
        ),
    ],
)
def test_the_network_policy_denies_other_tenants_only(source, same_namespace, labels, admitted):
    policy = qm.network_policy(ALPHA, "gpu-portal")
    assert _admits(policy, same_namespace=same_namespace, namespace_labels=labels) is admitted, (
        source
    )


def test_the_network_policy_selects_every_pod_of_the_namespace_for_ingress_only():
    policy = qm.network_policy(ALPHA, "gpu-portal")
    assert policy["metadata"]["namespace"] == "gp-alpha"
    assert policy["metadata"]["name"] == qm.NETWORK_POLICY_NAME
    assert policy["spec"]["podSelector"] == {}
    # Egress stays open: images, datasets and the API server are outside the namespace.
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    labels = policy["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "gpu-portal"
    assert labels["gpu-portal.io/owner-kind"] == "project"


def test_another_portal_namespace_is_the_one_admitted():
    policy = qm.network_policy(ALPHA, "platform-tools")
    assert _admits(
        policy,
        same_namespace=False,
        namespace_labels={"kubernetes.io/metadata.name": "platform-tools"},
    )


def test_the_role_binding_grants_the_portal_its_tenant_role_in_that_namespace_only():
    access = qm.TenantAccess(role="gpu-portal-tenant", portal_namespace="ops", service_account="gp")
    binding = qm.tenant_role_binding(ALPHA, access)
    assert binding["metadata"]["namespace"] == "gp-alpha"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "gpu-portal-tenant",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gp", "namespace": "ops"}]
    assert binding["metadata"]["labels"]["gpu-portal.io/owner-kind"] == "project"


def test_role_bindings_are_listed_as_owned_only_while_they_are_written():
    assert qm.ROLE_BINDING_KIND not in qm.owned_kinds(qm.TenantAccess())
    assert qm.ROLE_BINDING_KIND in qm.owned_kinds(qm.TenantAccess(role="gpu-portal-tenant"))
    # NetworkPolicies always: switching them off deletes the ones the portal made.
    assert ("networking.k8s.io/v1", "NetworkPolicy") in qm.owned_kinds(qm.TenantAccess())
