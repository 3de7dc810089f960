"""The default ClusterRoles and ClusterRoleBindings kube-apiserver creates at start (the subset a
GPU cluster's users meet): cluster-admin; the user-facing admin/edit/view, aggregated from the
system:aggregate-to-* roles; and the system:* roles that let every authenticated user discover the
API and ask what it may do."""

from __future__ import annotations

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
_LABELS = {"kubernetes.io/bootstrapping": "rbac-defaults"}
_ANNOTATIONS = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"


def _rule(groups: list[str], resources: list[str], verbs: list[str], names=None) -> dict:
    rule: dict = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _urls(urls: list[str], verbs: list[str]) -> dict:
    return {"nonResourceURLs": urls, "verbs": verbs}


def _cluster_role(name: str, rules=None, *, labels=None, aggregate_from: str = "") -> dict:
    role: dict = {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRole",
        "metadata": {
            "name": name,
            "labels": {**_LABELS, **(labels or {})},
            "annotations": dict(_ANNOTATIONS),
        },
    }
    if aggregate_from:
        role["aggregationRule"] = {
            "clusterRoleSelectors": [{"matchLabels": {AGGREGATE_TO + aggregate_from: "true"}}]
        }
    role["rules"] = rules or []
    return role


def _binding(name: str, role: str, groups: list[str]) -> dict:
    return {
        "apiVersion": RBAC_API_VERSION,
        "kind": "ClusterRoleBinding",
        "metadata": {
            "name": name,
            "labels": dict(_LABELS),
            "annotations": dict(_ANNOTATIONS),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
            for group in groups
        ],
    }


def cluster_roles() -> list[dict]:
    return [
        _cluster_role(
            "cluster-admin",
            [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])],
        ),
        _cluster_role("admin", aggregate_from="admin"),
        _cluster_role("edit", labels={AGGREGATE_TO + "admin": "true"}, aggregate_from="edit"),
        _cluster_role("view", labels={AGGREGATE_TO + "edit": "true"}, aggregate_from="view"),
        _cluster_role(
            "system:aggregate-to-admin",
            [
                _rule(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
                _rule(["rbac.authorization.k8s.io"], ["rolebindings", "roles"], [*_WRITE, *_READ]),
            ],
            labels={AGGREGATE_TO + "admin": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-edit",
            [
                _rule(
                    [""],
                    [
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                    _READ,
                ),
                _rule([""], ["serviceaccounts"], ["impersonate"]),
                _rule(
                    [""],
                    ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
                    _WRITE,
                ),
                _rule([""], ["pods/eviction"], ["create"]),
                _rule(
                    [""],
                    [
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                    _WRITE,
                ),
                _rule([""], ["serviceaccounts/token"], ["create"]),
                _rule(
                    ["apps"],
                    [
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                    _WRITE,
                ),
                _rule(["autoscaling"], ["horizontalpodautoscalers"], _WRITE),
                _rule(["batch"], ["cronjobs", "jobs"], _WRITE),
                _rule(["policy"], ["poddisruptionbudgets"], _WRITE),
                _rule(["networking.k8s.io"], ["ingresses", "networkpolicies"], _WRITE),
                _rule(["coordination.k8s.io"], ["leases"], [*_WRITE, *_READ]),
            ],
            labels={AGGREGATE_TO + "edit": "true"},
        ),
        _cluster_role(
            "system:aggregate-to-view",
            [
                _rule(
                    [""],
                    [
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                    _READ,
                ),
                _rule(
                    [""],
                    [
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                    _READ,
                ),
                _rule([""], ["namespaces"], _READ),
                _rule(["discovery.k8s.io"], ["endpointslices"], _READ),
                _rule(
                    ["apps"],
                    [
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                    _READ,
                ),
                _rule(
                    ["autoscaling"],
                    ["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
                    _READ,
                ),
                _rule(["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], _READ),
                _rule(["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"], _READ),
                _rule(
                    ["networking.k8s.io"],
                    ["ingresses", "ingresses/status", "networkpolicies"],
                    _READ,
                ),
            ],
            labels={AGGREGATE_TO + "view": "true"},
        ),
        _cluster_role(
            "system:discovery",
            [
                _urls(
                    [
                        "/api",
                        "/api/*",
                        "/apis",
                        "/apis/*",
                        "/healthz",
                        "/livez",
                        "/openapi",
                        "/openapi/*",
                        "/readyz",
                        "/version",
                        "/version/",
                    ],
                    ["get"],
                )
            ],
        ),
        _cluster_role(
            "system:basic-user",
            [
                _rule(
                    ["authorization.k8s.io"],
                    ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    ["create"],
                ),
                _rule(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"]),
            ],
        ),
        _cluster_role(
            "system:public-info-viewer",
            [_urls(["/healthz", "/livez", "/readyz", "/version", "/version/"], ["get"])],
        ),
        _cluster_role(
            "system:service-account-issuer-discovery",
            [_urls(["/.well-known/openid-configuration", "/openid/v1/jwks"], ["get"])],
        ),
        _cluster_role(
            "system:auth-delegator",
            [
                _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
                _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
            ],
        ),
        _cluster_role(
            "system:monitoring",
            [
                _urls(
                    [
                        "/healthz",
                        "/healthz/*",
                        "/livez",
                        "/livez/*",
                        "/metrics",
                        "/metrics/slis",
                        "/readyz",
                        "/readyz/*",
                    ],
                    ["get"],
                )
            ],
        ),
    ]


def cluster_role_bindings() -> list[dict]:
    return [
        _binding("cluster-admin", "cluster-admin", ["system:masters"]),
        _binding("system:discovery", "system:discovery", ["system:authenticated"]),
        _binding("system:basic-user", "system:basic-user", ["system:authenticated"]),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            ["system:authenticated", "system:unauthenticated"],
        ),
        _binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            ["system:serviceaccounts"],
        ),
        _binding("system:monitoring", "system:monitoring", ["system:monitoring"]),
    ]


def objects() -> list[dict]:
    return [*cluster_roles(), *cluster_role_bindings()]
