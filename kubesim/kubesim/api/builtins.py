"""Registry entries for the built-in kinds kubesim serves (no controllers for most of them)."""

from __future__ import annotations

from kubesim.api.registry import Registry, ResourceType

_ALL = ["all"]

# (group, version, kind, plural, singular, namespaced, short names, categories, subresources)
_BUILTINS: list[tuple] = [
    ("", "v1", "Namespace", "namespaces", "namespace", False, ["ns"], [], {"status"}),
    ("", "v1", "Node", "nodes", "node", False, ["no"], [], {"status", "proxy"}),
    (
        "",
        "v1",
        "Pod",
        "pods",
        "pod",
        True,
        ["po"],
        _ALL,
        {"status", "log", "proxy", "binding", "eviction"},
    ),
    ("", "v1", "Event", "events", "event", True, ["ev"], [], set()),
    ("", "v1", "Service", "services", "service", True, ["svc"], _ALL, {"status", "proxy"}),
    ("", "v1", "Endpoints", "endpoints", "endpoints", True, ["ep"], [], set()),
    ("", "v1", "ConfigMap", "configmaps", "configmap", True, ["cm"], [], set()),
    ("", "v1", "Secret", "secrets", "secret", True, [], [], set()),
    ("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", True, ["quota"], [], {"status"}),
    ("", "v1", "LimitRange", "limitranges", "limitrange", True, ["limits"], [], set()),
    ("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", True, ["sa"], [], {"token"}),
    (
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        "replicationcontroller",
        True,
        ["rc"],
        _ALL,
        {"status", "scale"},
    ),
    ("", "v1", "PodTemplate", "podtemplates", "podtemplate", True, [], [], set()),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        "persistentvolume",
        False,
        ["pv"],
        [],
        {"status"},
    ),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        True,
        ["pvc"],
        [],
        {"status"},
    ),
    ("events.k8s.io", "v1", "Event", "events", "event", True, ["ev"], [], set()),
    # Dynamic Resource Allocation (GA in 1.34; kubesim.controllers.dra allocates the claims)
    ("resource.k8s.io", "v1", "DeviceClass", "deviceclasses", "deviceclass", False, [], [], set()),
    (
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        "resourceslice",
        False,
        [],
        [],
        set(),
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        "resourceclaim",
        True,
        [],
        [],
        {"status"},
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        "resourceclaimtemplate",
        True,
        [],
        [],
        set(),
    ),
    ("batch", "v1", "Job", "jobs", "job", True, [], _ALL, {"status"}),
    ("batch", "v1", "CronJob", "cronjobs", "cronjob", True, ["cj"], _ALL, {"status"}),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        "deployment",
        True,
        ["deploy"],
        _ALL,
        {"status", "scale"},
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        "statefulset",
        True,
        ["sts"],
        _ALL,
        {"status", "scale"},
    ),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        "replicaset",
        True,
        ["rs"],
        _ALL,
        {"status", "scale"},
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", "daemonset", True, ["ds"], _ALL, {"status"}),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        "priorityclass",
        False,
        ["pc"],
        [],
        set(),
    ),
    ("coordination.k8s.io", "v1", "Lease", "leases", "lease", True, [], [], set()),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        "controllerrevision",
        True,
        [],
        [],
        set(),
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", True, [], [], set()),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        "rolebinding",
        True,
        [],
        [],
        set(),
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        "clusterrole",
        False,
        [],
        [],
        set(),
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
        False,
        [],
        [],
        set(),
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        "apiservices",
        "apiservice",
        False,
        [],
        ["api-extensions"],
        {"status"},
    ),
    ("node.k8s.io", "v1", "RuntimeClass", "runtimeclasses", "runtimeclass", False, [], [], set()),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        "storageclass",
        False,
        ["sc"],
        [],
        set(),
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        True,
        ["pdb"],
        [],
        {"status"},
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        "endpointslice",
        True,
        [],
        [],
        set(),
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        "customresourcedefinition",
        False,
        ["crd", "crds"],
        ["api-extensions"],
        {"status"},
    ),
]

# Kinds that installing the portal itself uses (deploy/): stored, validated against the upstream
# schema, served to kubectl; no controller acts on them (no autoscaling, no ingress, no network
# enforcement, no admission policies).
_BUILTINS += [
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        "networkpolicy",
        True,
        ["netpol"],
        [],
        set(),
    ),
    ("networking.k8s.io", "v1", "Ingress", "ingresses", "ingress", True, ["ing"], [], {"status"}),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        "ingressclass",
        False,
        [],
        [],
        set(),
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        True,
        ["hpa"],
        _ALL,
        {"status"},
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        "validatingadmissionpolicy",
        False,
        [],
        ["api-extensions"],
        {"status"},
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        "validatingadmissionpolicybinding",
        False,
        [],
        ["api-extensions"],
        set(),
    ),
]

_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def minimal_openapi_schema(kind: str) -> dict:
    """A permissive structural schema: the shape kubectl needs, no field-level detail."""
    properties: dict = {
        "apiVersion": {
            "type": "string",
            "description": "APIVersion defines the versioned schema of this object.",
        },
        "kind": {
            "type": "string",
            "description": "Kind is a string value representing the "
            "REST resource this object represents.",
        },
        "metadata": {
            "type": "object",
            "description": "Standard object's metadata.",
            "x-kubernetes-preserve-unknown-fields": True,
        },
    }
    if kind in ("ConfigMap", "Secret"):
        properties["data"] = {"type": "object", "additionalProperties": {"type": "string"}}
        if kind == "ConfigMap":
            properties["binaryData"] = {
                "type": "object",
                "additionalProperties": {"type": "string"},
            }
        else:
            properties["stringData"] = {
                "type": "object",
                "additionalProperties": {"type": "string"},
            }
            properties["type"] = {"type": "string"}
        properties["immutable"] = {"type": "boolean"}
    elif kind == "Event":
        for field in ("involvedObject", "source", "series", "related", "regarding"):
            properties[field] = dict(_OBJECT)
        for field in (
            "reason",
            "message",
            "type",
            "action",
            "reportingComponent",
            "reportingInstance",
            "reportingController",
            "note",
            "firstTimestamp",
            "lastTimestamp",
            "eventTime",
        ):
            properties[field] = {"type": "string"}
        properties["count"] = {"type": "integer", "format": "int32"}
    elif kind == "Endpoints":
        properties["subsets"] = {"type": "array", "items": dict(_OBJECT)}
    elif kind == "ServiceAccount":
        properties["secrets"] = {"type": "array", "items": dict(_OBJECT)}
        properties["imagePullSecrets"] = {"type": "array", "items": dict(_OBJECT)}
        properties["automountServiceAccountToken"] = {"type": "boolean"}
    elif kind == "PriorityClass":
        properties["value"] = {"type": "integer", "format": "int32"}
        properties["globalDefault"] = {"type": "boolean"}
        properties["description"] = {"type": "string"}
        properties["preemptionPolicy"] = {"type": "string"}
    else:
        properties["spec"] = dict(_OBJECT)
        properties["status"] = dict(_OBJECT)
    return {
        "type": "object",
        "description": f"{kind} (kubesim built-in).",
        "properties": properties,
    }


# events.k8s.io/v1 Event is a second view of core/v1 Event, as on a real cluster
EVENT_FIELDS_V1_TO_CORE = {
    "regarding": "involvedObject",
    "note": "message",
    "reportingController": "reportingComponent",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
}
EVENT_FIELDS_CORE_TO_V1 = {core: v1 for v1, core in EVENT_FIELDS_V1_TO_CORE.items()}


def events_v1_to_core(obj: dict) -> dict:
    out = {EVENT_FIELDS_V1_TO_CORE.get(k, k): v for k, v in obj.items()}
    out["apiVersion"] = "v1"
    return out


def core_to_events_v1(obj: dict) -> dict:
    out = {EVENT_FIELDS_CORE_TO_V1.get(k, k): v for k, v in obj.items()}
    out["apiVersion"] = "events.k8s.io/v1"
    return out


def builtin_types() -> list[ResourceType]:
    types = []
    for group, version, kind, plural, singular, namespaced, short, cats, subs in _BUILTINS:
        types.append(
            ResourceType(
                group=group,
                kind=kind,
                plural=plural,
                singular=singular,
                namespaced=namespaced,
                versions=[version],
                storage_version=version,
                short_names=list(short),
                categories=list(cats),
                subresources=set(subs),
                schemas={version: None},
                printer_columns={},
                selectable_fields={},
                is_crd=False,
                openapi_schemas={version: minimal_openapi_schema(kind)},
                storage_key=("", "events") if (group, kind) == ("events.k8s.io", "Event") else None,
            )
        )
    return types


def register_builtins(registry: Registry) -> None:
    for rtype in builtin_types():
        registry.add(rtype)
