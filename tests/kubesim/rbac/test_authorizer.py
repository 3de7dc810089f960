"""The RBAC authorizer without a server: request attributes from URLs, rules matched as
kube-apiserver matches them, bindings resolved per namespace, and the 403 message."""

from __future__ import annotations

import pytest
from kubesim.api.auth import bootstrap
from kubesim.api.auth.aggregation import aggregate_rules
from kubesim.api.auth.rbac import RBACAuthorizer, forbidden_error
from kubesim.api.auth.requestinfo import Attributes, request_attributes
from kubesim.api.auth.user import (
    ANONYMOUS_USER,
    UserInfo,
    service_account_user,
)

RBAC = "rbac.authorization.k8s.io/v1"
RUNNER = service_account_user("team-a", "runner")
OTHER_SA = service_account_user("team-b", "runner")
ALICE = UserInfo("alice", ("researchers", "system:authenticated"))


def _role(name, rules, namespace=None, kind="Role", labels=None, aggregation=None):
    meta = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    role = {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules}
    if aggregation:
        role["aggregationRule"] = {"clusterRoleSelectors": aggregation}
    return role


def _binding(name, role_kind, role_name, subjects, namespace=None):
    meta = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": RBAC,
        "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": subjects,
    }


def _sa(name, namespace=None):
    subject = {"kind": "ServiceAccount", "name": name}
    if namespace:
        subject["namespace"] = namespace
    return subject


POLICY = [
    *bootstrap.objects(),
    # team-a's runner: pods and their logs in team-a, one named ConfigMap, jobs via a ClusterRole
    _role(
        "runner",
        [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": ["settings"],
                "verbs": ["get", "update"],
            },
        ],
        namespace="team-a",
    ),
    _binding("runner", "Role", "runner", [_sa("runner")], namespace="team-a"),
    _role(
        "job-writer",
        [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete"]}],
        kind="ClusterRole",
    ),
    _binding("runner-jobs", "ClusterRole", "job-writer", [_sa("runner", "team-a")], "team-a"),
    # cluster-wide: nodes read-only, scale of anything, and a metrics URL prefix
    _role(
        "node-reader",
        [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["*"], "resources": ["*/scale"], "verbs": ["get"]},
            {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]},
        ],
        kind="ClusterRole",
    ),
    _binding("runner-nodes", "ClusterRole", "node-reader", [_sa("runner", "team-a")]),
    # alice through her group: everything in group kueue.x-k8s.io, any verb, in team-b
    _role(
        "queue-admin",
        [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["*"], "verbs": ["*"]}],
        kind="ClusterRole",
    ),
    _binding(
        "researchers",
        "ClusterRole",
        "queue-admin",
        [{"kind": "Group", "name": "researchers"}],
        namespace="team-b",
    ),
    # a binding to a role that does not exist
    _binding("dangling", "Role", "missing", [{"kind": "User", "name": "alice"}], "team-c"),
]


def _attrs(user, verb, resource, namespace="", name="", subresource="", group=""):
    return Attributes(
        user=user,
        verb=verb,
        resource_request=True,
        api_group=group,
        namespace=namespace,
        resource=resource,
        subresource=subresource,
        name=name,
    )


@pytest.fixture(scope="module")
def authorizer():
    return RBACAuthorizer.from_objects(POLICY)


RESOURCE_CASES = [
    # (user, verb, group, resource, subresource, namespace, name, allowed)
    (RUNNER, "list", "", "pods", "", "team-a", "", True),
    (RUNNER, "get", "", "pods", "", "team-a", "p1", True),
    (RUNNER, "delete", "", "pods", "", "team-a", "p1", False),
    (RUNNER, "list", "", "pods", "", "team-b", "", False),
    (RUNNER, "list", "", "pods", "", "", "", False),  # all namespaces needs a cluster binding
    (RUNNER, "get", "", "pods", "log", "team-a", "p1", True),
    (RUNNER, "get", "", "pods", "exec", "team-a", "p1", False),
    (RUNNER, "create", "", "pods", "proxy", "team-a", "p1", False),
    (RUNNER, "get", "", "configmaps", "", "team-a", "settings", True),
    (RUNNER, "update", "", "configmaps", "", "team-a", "settings", True),
    (RUNNER, "get", "", "configmaps", "", "team-a", "other", False),
    (RUNNER, "list", "", "configmaps", "", "team-a", "", False),  # resourceNames need a name
    (RUNNER, "create", "batch", "jobs", "", "team-a", "", True),
    (RUNNER, "create", "batch", "jobs", "", "team-b", "", False),
    (RUNNER, "create", "", "jobs", "", "team-a", "", False),  # wrong API group
    (RUNNER, "get", "", "nodes", "", "", "gpu-1", True),
    (RUNNER, "patch", "", "nodes", "", "", "gpu-1", False),
    (RUNNER, "watch", "", "nodes", "", "", "", True),
    (RUNNER, "get", "apps", "deployments", "scale", "team-b", "web", True),  # */scale
    (RUNNER, "get", "apps", "deployments", "", "team-b", "web", False),
    (RUNNER, "get", "apps", "deployments", "status", "team-b", "web", False),
    (RUNNER, "create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", "", True),
    (OTHER_SA, "list", "", "pods", "", "team-a", "", False),  # same name, other namespace
    (OTHER_SA, "get", "", "nodes", "", "", "", False),
    (ALICE, "delete", "kueue.x-k8s.io", "localqueues", "", "team-b", "q", True),
    (ALICE, "deletecollection", "kueue.x-k8s.io", "workloads", "status", "team-b", "", True),
    (ALICE, "get", "kueue.x-k8s.io", "localqueues", "", "team-a", "q", False),
    (ALICE, "get", "kueue.x-k8s.io", "clusterqueues", "", "", "q", False),
    (ALICE, "get", "batch", "jobs", "", "team-b", "j", False),
    (
        ANONYMOUS_USER,
        "create",
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "",
        "",
        "",
        False,
    ),
]


@pytest.mark.parametrize(
    ("user", "verb", "group", "resource", "subresource", "namespace", "name", "allowed"),
    RESOURCE_CASES,
)
def test_resource_requests(
    authorizer, user, verb, group, resource, subresource, namespace, name, allowed
):
    attrs = _attrs(user, verb, resource, namespace, name, subresource, group)
    assert authorizer.authorize(attrs).allowed is allowed


NON_RESOURCE_CASES = [
    (RUNNER, "get", "/healthz", True),
    (RUNNER, "get", "/version", True),
    (RUNNER, "get", "/apis/batch/v1", True),
    (RUNNER, "get", "/openapi/v3/apis/batch/v1", True),
    (RUNNER, "post", "/healthz", False),
    (RUNNER, "get", "/metrics", True),
    (RUNNER, "get", "/metrics/slis", False),  # exact URL, not a prefix
    (RUNNER, "get", "/debug/pprof/heap", True),  # "/debug/*" is a prefix
    (RUNNER, "get", "/kubesim/faults", False),
    (OTHER_SA, "get", "/metrics", False),
    (ANONYMOUS_USER, "get", "/healthz", True),
    (ANONYMOUS_USER, "get", "/version", True),
    (ANONYMOUS_USER, "get", "/api", False),  # discovery is for authenticated users only
]


@pytest.mark.parametrize(("user", "verb", "path", "allowed"), NON_RESOURCE_CASES)
def test_non_resource_requests(authorizer, user, verb, path, allowed):
    attrs = Attributes(user=user, verb=verb, resource_request=False, path=path)
    assert authorizer.authorize(attrs).allowed is allowed


def test_an_allowed_request_names_the_binding_that_allowed_it(authorizer):
    decision = authorizer.authorize(_attrs(RUNNER, "get", "pods", "team-a", "p1", "log"))
    assert decision.reason == (
        'RBAC: allowed by RoleBinding "runner/team-a" of Role "runner" to '
        'ServiceAccount "runner/team-a"'
    )
    decision = authorizer.authorize(_attrs(RUNNER, "get", "nodes", name="gpu-1"))
    assert decision.reason == (
        'RBAC: allowed by ClusterRoleBinding "runner-nodes" of ClusterRole "node-reader" to '
        'ServiceAccount "runner/team-a"'
    )


def test_a_binding_to_a_missing_role_is_reported_in_the_denial(authorizer):
    decision = authorizer.authorize(_attrs(ALICE, "list", "pods", "team-c"))
    assert not decision.allowed
    assert decision.reason == 'RBAC: role.rbac.authorization.k8s.io "missing" not found'


def test_writes_change_the_answers_they_concern_and_no_others():
    authorizer = RBACAuthorizer.from_objects(POLICY)
    wanted = _attrs(RUNNER, "list", "secrets", "team-a")
    pods = _attrs(RUNNER, "list", "pods", "team-a")
    nodes = _attrs(RUNNER, "get", "nodes", name="gpu-1")
    assert not authorizer.authorize(wanted).allowed
    assert authorizer.authorize(pods).allowed
    role = _role(
        "secrets",
        [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}],
        namespace="team-a",
    )
    binding = _binding("secrets", "Role", "secrets", [_sa("runner")], namespace="team-a")
    authorizer.changed("ADDED", role)
    assert not authorizer.authorize(wanted).allowed  # a role alone grants nothing
    authorizer.changed("ADDED", binding)
    assert authorizer.authorize(wanted).allowed
    assert authorizer.authorize(pods).allowed
    authorizer.changed("DELETED", role)
    decision = authorizer.authorize(wanted)
    assert not decision.allowed
    assert decision.reason == 'RBAC: role.rbac.authorization.k8s.io "secrets" not found'
    # a ClusterRole's rules change wherever it is bound
    assert authorizer.authorize(nodes).allowed
    authorizer.changed("MODIFIED", _role("node-reader", [], kind="ClusterRole"))
    assert not authorizer.authorize(nodes).allowed


def test_a_reload_reads_the_policy_again():
    objects = list(POLICY)
    authorizer = RBACAuthorizer(lambda: objects)
    wanted = _attrs(RUNNER, "list", "pods", "team-a")
    assert authorizer.authorize(wanted).allowed
    objects.remove(next(o for o in objects if o["metadata"]["name"] == "runner"))
    assert authorizer.authorize(wanted).allowed  # cached until told
    authorizer.invalidate()
    assert not authorizer.authorize(wanted).allowed


def test_rules_for_lists_what_a_user_may_do_in_a_namespace(authorizer):
    resource_rules, non_resource_rules, error = authorizer.rules_for(RUNNER, "team-a")
    assert error == ""
    assert {
        "verbs": ["get", "update"],
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": ["settings"],
    } in resource_rules
    assert {"verbs": ["create", "delete"], "apiGroups": ["batch"], "resources": ["jobs"]} in (
        resource_rules
    )
    assert {"verbs": ["get"], "nonResourceURLs": ["/metrics", "/debug/*"]} in non_resource_rules
    team_b = authorizer.rules_for(RUNNER, "team-b")[0]
    assert not any(rule["resources"] == ["configmaps"] for rule in team_b)


URL_CASES = [
    # (method, path, query, verb, group, namespace, resource, subresource, name)
    ("GET", "/api/v1/namespaces/a/pods", {}, "list", "", "a", "pods", "", ""),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "true"}, "watch", "", "a", "pods", "", ""),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "0"}, "list", "", "a", "pods", "", ""),
    ("GET", "/api/v1/watch/namespaces/a/pods/p", {}, "watch", "", "a", "pods", "", "p"),
    ("GET", "/api/v1/pods", {}, "list", "", "", "pods", "", ""),
    (
        "GET",
        "/api/v1/namespaces/a/configmaps",
        {"fieldSelector": "metadata.name=cm"},
        "list",
        "",
        "a",
        "configmaps",
        "",
        "cm",
    ),
    ("GET", "/api/v1/namespaces/a/pods/p/log", {}, "get", "", "a", "pods", "log", "p"),
    (
        "GET",
        "/api/v1/namespaces/a/pods/p:9400/proxy/metrics",
        {},
        "get",
        "",
        "a",
        "pods",
        "proxy",
        "p:9400",
    ),
    (
        "POST",
        "/api/v1/namespaces/a/serviceaccounts/s/token",
        {},
        "create",
        "",
        "a",
        "serviceaccounts",
        "token",
        "s",
    ),
    ("POST", "/apis/batch/v1/namespaces/a/jobs", {}, "create", "batch", "a", "jobs", "", ""),
    ("PATCH", "/apis/batch/v1/namespaces/a/jobs/j", {}, "patch", "batch", "a", "jobs", "", "j"),
    (
        "PUT",
        "/apis/batch/v1/namespaces/a/jobs/j/status",
        {},
        "update",
        "batch",
        "a",
        "jobs",
        "status",
        "j",
    ),
    ("DELETE", "/apis/batch/v1/namespaces/a/jobs/j", {}, "delete", "batch", "a", "jobs", "", "j"),
    (
        "DELETE",
        "/apis/batch/v1/namespaces/a/jobs",
        {},
        "deletecollection",
        "batch",
        "a",
        "jobs",
        "",
        "",
    ),
    # a namespace is its own namespace; its status and finalize are its subresources
    ("GET", "/api/v1/namespaces/a", {}, "get", "", "a", "namespaces", "", "a"),
    ("PUT", "/api/v1/namespaces/a/finalize", {}, "update", "", "a", "namespaces", "finalize", "a"),
    ("GET", "/api/v1/namespaces", {}, "list", "", "", "namespaces", "", ""),
    ("GET", "/api/v1/nodes/n1/proxy/metrics", {}, "get", "", "", "nodes", "proxy", "n1"),
    (
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {},
        "create",
        "authorization.k8s.io",
        "",
        "selfsubjectaccessreviews",
        "",
        "",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "query", "verb", "group", "namespace", "resource", "subresource", "name"),
    URL_CASES,
)
def test_request_attributes_of_resource_urls(
    method, path, query, verb, group, namespace, resource, subresource, name
):
    attrs = request_attributes(RUNNER, method, path, query)
    assert attrs.resource_request
    assert (
        attrs.verb,
        attrs.api_group,
        attrs.namespace,
        attrs.resource,
        attrs.subresource,
        attrs.name,
    ) == (verb, group, namespace, resource, subresource, name)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/"),
        ("GET", "/healthz"),
        ("GET", "/api"),
        ("GET", "/api/v1"),
        ("GET", "/apis"),
        ("GET", "/apis/batch"),
        ("GET", "/apis/batch/v1"),
        ("GET", "/openapi/v3/apis/batch/v1"),
        ("POST", "/kubesim/faults"),
    ],
)
def test_request_attributes_of_non_resource_urls(method, path):
    attrs = request_attributes(RUNNER, method, path, {})
    assert not attrs.resource_request
    assert (attrs.verb, attrs.path) == (method.lower(), path)


FORBIDDEN_CASES = [
    (
        _attrs(RUNNER, "list", "pods", "team-b"),
        'pods is forbidden: User "system:serviceaccount:team-a:runner" cannot list resource '
        '"pods" in API group "" in the namespace "team-b"',
        {"kind": "pods"},
    ),
    (
        _attrs(RUNNER, "patch", "nodes", name="gpu-1"),
        'nodes "gpu-1" is forbidden: User "system:serviceaccount:team-a:runner" cannot patch '
        'resource "nodes" in API group "" at the cluster scope',
        {"name": "gpu-1", "kind": "nodes"},
    ),
    (
        _attrs(RUNNER, "get", "pods", "team-b", "p1", "log"),
        'pods "p1" is forbidden: User "system:serviceaccount:team-a:runner" cannot get '
        'resource "pods/log" in API group "" in the namespace "team-b"',
        {"name": "p1", "kind": "pods"},
    ),
    (
        _attrs(RUNNER, "create", "jobs", "team-b", group="batch"),
        'jobs.batch is forbidden: User "system:serviceaccount:team-a:runner" cannot create '
        'resource "jobs" in API group "batch" in the namespace "team-b"',
        {"group": "batch", "kind": "jobs"},
    ),
    (
        Attributes(user=ANONYMOUS_USER, verb="get", resource_request=False, path="/api"),
        'forbidden: User "system:anonymous" cannot get path "/api"',
        {},
    ),
]


@pytest.mark.parametrize(("attrs", "message", "details"), FORBIDDEN_CASES)
def test_forbidden_status_is_worded_as_kube_apiserver_words_it(attrs, message, details):
    status = forbidden_error(attrs).status()
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


def test_aggregated_rules_come_from_the_matching_roles_once_each_in_name_order():
    labelled = {"example.com/aggregate-to-monitoring": "true"}
    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    nodes = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    roles = [
        _role("b-nodes", [nodes, pods], kind="ClusterRole", labels=labelled),
        _role("a-pods", [pods], kind="ClusterRole", labels=labelled),
        _role("unlabelled", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
    ]
    monitoring = _role(
        "monitoring",
        [],
        kind="ClusterRole",
        aggregation=[{"matchLabels": labelled}],
        labels=labelled,  # a role does not aggregate itself
    )
    assert aggregate_rules(monitoring, [*roles, monitoring]) == [pods, nodes]


def test_bootstrap_edit_and_admin_include_view():
    roles = bootstrap.cluster_roles()
    by_name = {role["metadata"]["name"]: role for role in roles}
    # aggregate in dependency order as the controller settles: view, then edit, then admin
    for name in ("view", "edit", "admin"):
        by_name[name]["rules"] = aggregate_rules(by_name[name], list(by_name.values()))
    authorizer = RBACAuthorizer.from_objects(
        [
            *by_name.values(),
            _binding("admins", "ClusterRole", "admin", [_sa("runner")], namespace="team-a"),
        ]
    )
    for verb, resource, group in (
        ("get", "pods", ""),  # from view
        ("create", "jobs", "batch"),  # from edit
        ("create", "rolebindings", "rbac.authorization.k8s.io"),  # admin's own
    ):
        assert authorizer.authorize(_attrs(RUNNER, verb, resource, "team-a", group=group)).allowed
    assert not authorizer.authorize(_attrs(RUNNER, "get", "nodes", name="n")).allowed
