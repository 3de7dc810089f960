"""deploy/'s RBAC: least privilege, proven against an API server that enforces it.

Static: no rule holds "*". Against kubesim with --rbac: `kubectl auth can-i` as the portal's
service account answers a table of (verb, resource, namespace) the way the roles intend (the
writes reach project namespaces only, through the RoleBinding the quota sync writes there; no
Secret anywhere else; nodes read-only), and every (verb, resource) a rule lists is really granted.
"""

from __future__ import annotations

import pytest

from tests.deploy.conftest import PORTAL_NAMESPACE, kubectl, render, to_yaml

SA = f"system:serviceaccount:{PORTAL_NAMESPACE}:gpu-portal"
RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
TENANT = "gp-alpha"  # a project namespace the sync has written
OTHER = "team-infra"  # a namespace that is not the portal's business


def rbac_objects() -> list[dict]:
    return [o for o in render("external") if o["kind"] in RBAC_KINDS]


def _role(kind: str, name: str) -> dict:
    return next(o for o in rbac_objects() if o["kind"] == kind and o["metadata"]["name"] == name)


def test_no_rule_uses_a_wildcard():
    rules = [(o["metadata"]["name"], r) for o in rbac_objects() for r in o.get("rules", [])]
    assert len(rules) > 20
    for name, rule in rules:
        for field in ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs"):
            for value in rule.get(field, []):
                assert "*" not in value, f"{name}: {field} {value!r}"
        assert "nonResourceURLs" not in rule, name  # discovery comes with system:discovery


def test_the_portal_cannot_grant_itself_more():
    """No rule lets the portal write roles, escalate, impersonate, or bind another role."""
    for obj in rbac_objects():
        for rule in obj.get("rules", []):
            resources = set(rule.get("resources", []))
            verbs = set(rule.get("verbs", []))
            assert not {"roles", "clusterroles", "clusterrolebindings"} & resources or verbs == {
                "bind"
            }, rule
            assert "escalate" not in verbs
            assert "impersonate" not in verbs
            if "bind" in verbs:
                assert rule["resourceNames"] == ["gpu-portal-tenant"]


def test_the_tenant_role_is_bound_nowhere_by_the_manifests():
    """Only the quota sync binds it, one project namespace at a time."""
    for obj in rbac_objects():
        if obj["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert obj["roleRef"]["name"] != "gpu-portal-tenant", obj["metadata"]["name"]


# ------------------------------------------------------------------ against kubesim --rbac
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """kubesim enforcing RBAC, with its simulated cluster (which serves Kueue's visibility API
    and has the exporters' namespace), deploy/'s roles, the portal's namespace and service
    account, and one project namespace holding the RoleBinding exactly as the quota sync builds
    it."""
    from kubesim.testing import KubesimProcess

    with KubesimProcess(rbac=True, workdir=tmp_path_factory.mktemp("ks-rbac")) as server:
        _install(server)
        yield server


def _install(server) -> None:
    from quotas import manifests as qm

    found = {(o["kind"], o["metadata"]["name"]): o for o in render("external")}
    project = qm.ProjectSpec(slug="alpha", namespace=TENANT, department_slug="research")
    access = qm.TenantAccess(role="gpu-portal-tenant", portal_namespace=PORTAL_NAMESPACE)
    objects = [
        found[("Namespace", PORTAL_NAMESPACE)],
        found[("ServiceAccount", "gpu-portal")],
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHER}},
        qm.namespace(project),
        *rbac_objects(),
        qm.tenant_role_binding(project, access),
    ]
    kubectl("apply", "-f", "-", stdin=to_yaml(objects), kubeconfig=server.kubeconfig)


def can_i(server, *args: str) -> bool:
    done = kubectl("auth", "can-i", f"--as={SA}", *args, kubeconfig=server.kubeconfig, check=False)
    assert done.stdout.strip() in ("yes", "no"), done.stderr
    return done.returncode == 0


# (what the portal does or must never do, kubectl auth can-i arguments, allowed)
CAN_I = [
    # jobs: written into project namespaces only
    ("submit a job", ["patch", "jobs.batch", "-n", TENANT], True),
    ("create it by apply", ["create", "jobs.batch", "-n", TENANT], True),
    ("no job created elsewhere", ["create", "jobs.batch", "-n", OTHER], False),
    ("cancel a job", ["delete", "jobs.batch", "-n", TENANT], True),
    ("a Volcano gang", ["patch", "jobs.batch.volcano.sh", "-n", TENANT], True),
    ("a gang's Service", ["patch", "services", "-n", TENANT], True),
    ("no job in another namespace", ["patch", "jobs.batch", "-n", OTHER], False),
    ("no job in kube-system", ["patch", "jobs.batch", "-n", "kube-system"], False),
    ("no pod of its own", ["create", "pods", "-n", TENANT], False),
    ("no exec into pods", ["create", "pods", "--subresource=exec", "-n", TENANT], False),
    ("job status, everywhere", ["watch", "jobs.batch", "--all-namespaces"], True),
    ("no Workload written", ["patch", "workloads.kueue.x-k8s.io", "-n", TENANT], False),
    # Secrets: a project's credentials, nothing else
    ("a credential's Secret", ["patch", "secrets", "-n", TENANT], True),
    ("read it back", ["get", "secrets", "-n", TENANT], True),
    ("no list of a project's Secrets", ["list", "secrets", "-n", TENANT], False),
    ("no Secret in another namespace", ["get", "secrets", "-n", OTHER], False),
    ("no Secret in kube-system", ["get", "secrets", "-n", "kube-system"], False),
    ("no Secret of its own namespace", ["get", "secrets", "-n", PORTAL_NAMESPACE], False),
    ("no Secret cluster-wide", ["list", "secrets", "--all-namespaces"], False),
    # pods, logs, metrics
    ("pods everywhere (watcher)", ["watch", "pods", "--all-namespaces"], True),
    ("a job's logs", ["get", "pods", "--subresource=log", "-n", TENANT], True),
    ("no logs elsewhere", ["get", "pods", "--subresource=log", "-n", OTHER], False),
    ("dcgm-exporter via proxy", ["get", "pods", "--subresource=proxy", "-n", "gpu-operator"], True),
    ("no proxy to tenants' pods", ["get", "pods", "--subresource=proxy", "-n", TENANT], False),
    ("events (timeline)", ["watch", "events", "--all-namespaces"], True),
    # nodes: read, never changed
    ("the cluster page", ["list", "nodes"], True),
    ("no node patch", ["patch", "nodes"], False),
    ("no cordon/drain", ["update", "nodes"], False),
    ("no node delete", ["delete", "nodes"], False),
    ("no eviction", ["create", "pods", "--subresource=eviction", "-n", TENANT], False),
    # quota objects
    ("project namespaces", ["patch", "namespaces"], True),
    ("staff delete an orphan", ["delete", "namespaces"], True),
    ("ClusterQueues", ["patch", "clusterqueues.kueue.x-k8s.io"], True),
    ("their usage", ["watch", "clusterqueues.kueue.x-k8s.io"], True),
    ("LocalQueue in a project", ["patch", "localqueues.kueue.x-k8s.io", "-n", TENANT], True),
    ("no LocalQueue elsewhere", ["patch", "localqueues.kueue.x-k8s.io", "-n", OTHER], False),
    ("ResourceQuota in a project", ["patch", "resourcequotas", "-n", TENANT], True),
    ("no ResourceQuota elsewhere", ["patch", "resourcequotas", "-n", OTHER], False),
    ("NetworkPolicy in a project", ["patch", "networkpolicies", "-n", TENANT], True),
    ("no NetworkPolicy elsewhere", ["patch", "networkpolicies", "-n", OTHER], False),
    ("Volcano queues", ["patch", "queues.scheduling.volcano.sh"], True),
    ("PriorityClasses", ["patch", "priorityclasses"], True),
    ("Cohorts", ["patch", "cohorts.kueue.x-k8s.io"], True),
    (
        "queue positions",
        [
            "get",
            "clusterqueues.visibility.kueue.x-k8s.io",
            "--subresource=pendingworkloads",
        ],
        True,
    ),
    # volumes
    ("a claim in a project", ["patch", "persistentvolumeclaims", "-n", TENANT], True),
    ("no claim elsewhere", ["patch", "persistentvolumeclaims", "-n", OTHER], False),
    ("an NFS volume's PV", ["patch", "persistentvolumes"], True),
    # leader election: its own Lease only
    ("create the Lease", ["create", "leases", "-n", PORTAL_NAMESPACE], True),
    ("renew it", ["update", "leases/gpu-portal-watcher", "-n", PORTAL_NAMESPACE], True),
    ("no other Lease", ["update", "leases/kube-scheduler", "-n", PORTAL_NAMESPACE], False),
    ("no Lease elsewhere", ["update", "leases/gpu-portal-watcher", "-n", "kube-system"], False),
    # RBAC: bind its tenant role, nothing more
    ("bind the tenant role", ["patch", "rolebindings", "-n", TENANT], True),
    ("bind only that role", ["bind", "clusterroles/gpu-portal-tenant"], True),
    ("not cluster-admin", ["bind", "clusterroles/cluster-admin"], False),
    ("no escalate", ["escalate", "clusterroles"], False),
    ("no ClusterRoleBinding", ["create", "clusterrolebindings"], False),
    ("no role edits", ["patch", "clusterroles"], False),
    ("no impersonation", ["impersonate", "serviceaccounts", "-n", TENANT], False),
    # its own installation
    ("no change to its Deployments", ["patch", "deployments", "-n", PORTAL_NAMESPACE], False),
    ("no ConfigMaps", ["get", "configmaps", "-n", PORTAL_NAMESPACE], False),
    # everything
    ("not everything", ["*", "*"], False),
    ("not everything in a project", ["*", "*", "-n", TENANT], False),
]


@pytest.mark.parametrize(("what", "args", "allowed"), CAN_I, ids=[c[0] for c in CAN_I])
def test_kubectl_auth_can_i_as_the_portal(cluster, what, args, allowed):
    assert can_i(cluster, *args) is allowed, f"{what}: kubectl auth can-i {' '.join(args)}"


def _resource_args(group: str, resource: str) -> list[str]:
    name, _, sub = resource.partition("/")
    qualified = f"{name}.{group}" if group else name
    return [qualified, f"--subresource={sub}"] if sub else [qualified]


def test_every_verb_a_rule_lists_is_granted_where_it_is_bound(cluster):
    """The can-i answers match the roles: each (verb, resource) of the ClusterRole cluster-wide,
    of the tenant role in a project namespace (and not in another), of each Role in its own
    namespace."""
    checks: list[tuple[list[str], bool]] = []
    for obj in rbac_objects():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        name = obj["metadata"]["name"]
        for rule in obj["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        names = rule.get("resourceNames") or [""]
                        for resource_name in names:
                            args = _resource_args(group, resource)
                            if resource_name:
                                args[0] += f"/{resource_name}"
                            if name == "gpu-portal":
                                checks.append(([verb, *args, "--all-namespaces"], True))
                            elif name == "gpu-portal-tenant":
                                checks.append(([verb, *args, "-n", TENANT], True))
                            else:
                                ns = obj["metadata"]["namespace"]
                                checks.append(([verb, *args, "-n", ns], True))
    assert len(checks) > 50
    wrong = [args for args, allowed in checks if can_i(cluster, *args) is not allowed]
    assert wrong == []


def test_the_tenant_role_reaches_no_namespace_without_the_sync_s_binding(cluster):
    tenant = _role("ClusterRole", "gpu-portal-tenant")
    main = _role("ClusterRole", "gpu-portal")
    cluster_wide = {
        (g, r, v)
        for rule in main["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    for rule in tenant["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    if (group, resource, verb) in cluster_wide:
                        continue  # e.g. reads the ClusterRole grants anyway
                    args = _resource_args(group, resource)
                    assert not can_i(cluster, verb, *args, "-n", OTHER), (verb, args)


@pytest.mark.parametrize(
    "page", ["deploy/README.md", "docs/operations/install-kubernetes.md"], ids=["readme", "docs"]
)
def test_every_rule_is_listed_with_the_feature_that_needs_it(page):
    from tests.deploy.conftest import REPO

    rows = [
        line for line in (REPO / page).read_text().splitlines() if line.startswith("| `gpu-portal")
    ]
    for obj in rbac_objects():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        role = obj["metadata"]["name"]
        for rule in obj["rules"]:
            group = rule["apiGroups"][0] or "core"
            matches = [
                row
                for row in rows
                if row.startswith(f"| `{role}`")
                and f"| {group} |" in row
                and all(f"`{r}`" in row for r in rule["resources"])
                and row.split("|")[4].strip() == ", ".join(rule["verbs"])
            ]
            assert len(matches) == 1, f"{page}: {role} {group} {rule}"
            assert matches[0].split("|")[5].strip(), "the feature that needs it"
