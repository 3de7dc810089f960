"""Validation of built-in kinds, worded as kube-apiserver words it (pkg/apis/core/validation,
pkg/apis/batch/validation, apimachinery's name and label validators).

``validate_builtin(obj)`` dispatches on apiVersion/kind and returns causes in the Status
shape (``{"reason", "message", "field"}``), empty when the object is valid.  It covers what
the portal and the cluster simulation rely on, not the whole of Kubernetes validation:

- metadata: names per kind (DNS-1123 subdomain; DNS-1123 label for Namespaces; DNS-1035
  label for Services), label keys and values, annotation keys and total size;
- pod specs (Pods and the templates of Jobs, Deployments, StatefulSets, ReplicaSets,
  DaemonSets): containers present, unique DNS-label names, images, resource names and
  quantities, integer extended resources (nvidia.com/gpu, nvidia.com/mig-*), extended
  resources not overcommitted (requests equal limits; limits required), requests <= limits,
  restartPolicy, tolerations, nodeSelector labels;
- Jobs: restartPolicy Never/OnFailure, non-negative parallelism/completions/backoffLimit,
  completionMode;
- ResourceQuota: resource names and non-negative quantities;
- PriorityClass: value range.

It also carries the checks of Kueue's validating webhook that the CRD schema cannot express
(``validate_kueue``): quotas of ClusterQueues and Cohorts must be non-negative and a
lendingLimit may not exceed the nominalQuota.
"""

from __future__ import annotations

import json
import re

from kubesim.api import pod_volumes, secrets
from kubesim.api.quantity import Quantity, QuantityError
from kubesim.api.schema import (
    duplicate,
    field_error,
    invalid,
    not_supported,
    required,
    too_long,
)

# -- names -------------------------------------------------------------------------------
_DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    "for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
QUALIFIED_NAME_FORMAT_MSG = (
    "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
    "subdomain prefix and '/' (e.g. 'example.com/MyName')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
IS_NEGATIVE_MSG = "must be greater than or equal to 0"
NOT_INTEGER_MSG = "must be an integer"
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def _max_len_msg(length: int) -> str:
    return f"must be no more than {length} characters"


def dns1123_label_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(_max_len_msg(63))
    if not _DNS1123_LABEL_RE.match(value):
        errs.append(DNS1123_LABEL_MSG)
    return errs


def dns1123_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append(_max_len_msg(253))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(DNS1123_SUBDOMAIN_MSG)
    return errs


def dns1035_label_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(_max_len_msg(63))
    if not _DNS1035_LABEL_RE.match(value):
        errs.append(DNS1035_LABEL_MSG)
    return errs


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: [prefix/]name, prefix a DNS subdomain, name <= 63 characters."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
        errs = []
    elif len(parts) == 2:
        prefix, name = parts
        errs = []
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain_errors(prefix))
    else:
        return [QUALIFIED_NAME_FORMAT_MSG]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len_msg(63))
    if name and not _QUALIFIED_NAME_RE.match(name):
        errs.append(QUALIFIED_NAME_MSG)
    return errs


def label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append(_max_len_msg(63))
    if not _LABEL_VALUE_RE.match(value):
        errs.append(LABEL_VALUE_MSG)
    return errs


# -- metadata -----------------------------------------------------------------------------
_LABEL_NAMED = {("", "Namespace")}
_DNS1035_NAMED = {("", "Service")}
_UNCHECKED_NAMES = {("", "Event"), ("events.k8s.io", "Event")}
# RBAC objects are named like URL path segments ("system:discovery" is a ClusterRole's name)
PATH_SEGMENT_NAMED = {
    ("rbac.authorization.k8s.io", kind)
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
}


def path_segment_name_errors(value: str) -> list[str]:
    """path.IsValidPathSegmentName: anything but ".", ".." and names with "/" or "%"."""
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in value]


def _group(api_version) -> str:
    if not isinstance(api_version, str):
        return ""
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _dict(value) -> dict:
    """The value when it is an object, else {} (type errors are the schema's to report)."""
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _text(value) -> str:
    """A string field; other JSON types are shown as their JSON text."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def validate_labels(labels, field: str) -> list[dict]:
    causes = []
    if not isinstance(labels, dict):
        return causes
    for key, value in labels.items():
        for message in qualified_name_errors(str(key)):
            causes.append(invalid(field, key, message))
        if not isinstance(value, str):
            causes.append(invalid(field, value, "label values must be strings"))
            continue
        for message in label_value_errors(value):
            causes.append(invalid(field, value, message))
    return causes


def validate_annotations(annotations, field: str) -> list[dict]:
    causes = []
    if not isinstance(annotations, dict):
        return causes
    total = 0
    for key, value in annotations.items():
        for message in qualified_name_errors(str(key).lower()):
            causes.append(invalid(field, key, message))
        total += len(str(key)) + len(str(value))
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def validate_metadata(obj: dict) -> list[dict]:
    meta = _dict(obj.get("metadata"))
    group, kind = _group(obj.get("apiVersion")), _text(obj.get("kind"))
    causes = []
    name = meta.get("name")
    if name and isinstance(name, str) and (group, kind) not in _UNCHECKED_NAMES:
        if (group, kind) in PATH_SEGMENT_NAMED:
            messages = path_segment_name_errors(name)
        elif (group, kind) in _LABEL_NAMED:
            messages = dns1123_label_errors(name)
        elif (group, kind) in _DNS1035_NAMED:
            messages = dns1035_label_errors(name)
        else:
            messages = dns1123_subdomain_errors(name)
        causes.extend(invalid("metadata.name", name, m) for m in messages)
    causes.extend(validate_labels(meta.get("labels"), "metadata.labels"))
    causes.extend(validate_annotations(meta.get("annotations"), "metadata.annotations"))
    return causes


# -- resources ------------------------------------------------------------------------------
_STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
_INTEGER_RESOURCES = {
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "services.nodeports",
    "services.loadbalancers",
}


def is_native_resource(name: str) -> bool:
    return "/" not in name or name.split("/", 1)[0].endswith("kubernetes.io")


def is_extended_resource(name: str) -> bool:
    """nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...: fully qualified, outside kubernetes.io."""
    if is_native_resource(name) or name.startswith("requests."):
        return False
    return not qualified_name_errors(f"requests.{name}")


def is_integer_resource(name: str) -> bool:
    return is_extended_resource(name) or name in _INTEGER_RESOURCES


def is_overcommit_allowed(name: str) -> bool:
    return is_native_resource(name) and not name.startswith("hugepages-")


def _parse(value, field: str, causes: list[dict]) -> Quantity | None:
    try:
        return Quantity.parse(value)
    except QuantityError as exc:
        causes.append(invalid(field, value, str(exc)))
        return None


def _quantity_value_errors(name: str, quantity: Quantity, field: str) -> list[dict]:
    causes = []
    if quantity.sign() < 0:
        causes.append(invalid(field, str(quantity), IS_NEGATIVE_MSG))
    if is_integer_resource(name) and not quantity.is_integer():
        causes.append(invalid(field, str(quantity), NOT_INTEGER_MSG))
    return causes


def _container_resource_name_errors(name: str, field: str) -> list[dict]:
    causes = [invalid(field, name, m) for m in qualified_name_errors(name)]
    if causes:
        return causes
    if "/" not in name:
        if name not in _STANDARD_CONTAINER_RESOURCES and not name.startswith("hugepages-"):
            causes.append(invalid(field, name, "must be a standard resource for containers"))
    elif is_native_resource(name):
        causes.append(invalid(field, name, "must be a standard resource for containers"))
    return causes


def validate_resource_requirements(resources, field: str) -> list[dict]:
    causes: list[dict] = []
    if not isinstance(resources, dict):
        return causes
    limits_field = f"{field}.limits"
    requests_field = f"{field}.requests"
    limits: dict[str, Quantity] = {}
    for name, value in _dict(resources.get("limits")).items():
        path = f"{limits_field}[{name}]"
        causes.extend(_container_resource_name_errors(name, path))
        quantity = _parse(value, path, causes)
        if quantity is not None:
            causes.extend(_quantity_value_errors(name, quantity, path))
            limits[name] = quantity
    for name, value in _dict(resources.get("requests")).items():
        path = f"{requests_field}[{name}]"
        causes.extend(_container_resource_name_errors(name, path))
        quantity = _parse(value, path, causes)
        if quantity is None:
            continue
        causes.extend(_quantity_value_errors(name, quantity, path))
        limit = limits.get(name)
        if limit is not None:
            if quantity != limit and not is_overcommit_allowed(name):
                causes.append(
                    invalid(
                        requests_field,
                        str(quantity),
                        f"must be equal to {name} limit of {limit}",
                    )
                )
            elif quantity > limit:
                causes.append(
                    invalid(
                        requests_field,
                        str(quantity),
                        f"must be less than or equal to {name} limit of {limit}",
                    )
                )
        elif not is_overcommit_allowed(name) and name not in _dict(resources.get("limits")):
            causes.append(
                required(limits_field, "Limit must be set for non overcommitable resources")
            )
    return causes


# -- pod specs ----------------------------------------------------------------------------
_RESTART_POLICIES = ["Always", "OnFailure", "Never"]
_TOLERATION_OPERATORS = ["Equal", "Exists"]
_TAINT_EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
_PULL_POLICIES = ["Always", "IfNotPresent", "Never"]


def validate_tolerations(tolerations, field: str) -> list[dict]:
    causes = []
    if not isinstance(tolerations, list):
        return causes
    for index, toleration in enumerate(tolerations):
        if not isinstance(toleration, dict):
            continue
        path = f"{field}[{index}]"
        key = _text(toleration.get("key"))
        operator = _text(toleration.get("operator"))
        value = _text(toleration.get("value"))
        effect = _text(toleration.get("effect"))
        if key:
            causes.extend(invalid(f"{path}.key", key, m) for m in qualified_name_errors(key))
        if not key and operator != "Exists":
            causes.append(
                invalid(
                    f"{path}.operator",
                    operator,
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                )
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            causes.append(
                invalid(
                    f"{path}.effect",
                    effect,
                    "effect must be 'NoExecute' when `tolerationSeconds` is set",
                )
            )
        if operator in ("", "Equal"):
            messages = label_value_errors(value)
            if messages:
                causes.append(invalid(f"{path}.operator", value, ";".join(messages)))
        elif operator == "Exists":
            if value:
                causes.append(
                    invalid(
                        f"{path}.operator", value, "value must be empty when `operator` is 'Exists'"
                    )
                )
        else:
            causes.append(not_supported(f"{path}.operator", operator, _TOLERATION_OPERATORS))
        if effect and effect not in _TAINT_EFFECTS:
            causes.append(not_supported(f"{path}.effect", effect, _TAINT_EFFECTS))
    return causes


def _validate_containers(containers, field: str, seen: set, causes: list[dict]) -> None:
    if not isinstance(containers, list):
        return
    for index, container in enumerate(containers):
        if not isinstance(container, dict):
            continue
        path = f"{field}[{index}]"
        name = _text(container.get("name"))
        if not name:
            causes.append(required(f"{path}.name"))
        else:
            causes.extend(invalid(f"{path}.name", name, m) for m in dns1123_label_errors(name))
            if name in seen:
                causes.append(duplicate(f"{path}.name", name))
            seen.add(name)
        if not container.get("image"):
            causes.append(required(f"{path}.image"))
        policy = _text(container.get("imagePullPolicy"))
        if policy and policy not in _PULL_POLICIES:
            causes.append(not_supported(f"{path}.imagePullPolicy", policy, _PULL_POLICIES))
        causes.extend(
            validate_resource_requirements(container.get("resources"), f"{path}.resources")
        )
        causes.extend(_validate_container_ports(container.get("ports"), f"{path}.ports"))
        env_names = container.get("env") or []
        for env_index, env in enumerate(env_names if isinstance(env_names, list) else []):
            if isinstance(env, dict) and not env.get("name"):
                causes.append(required(f"{path}.env[{env_index}].name"))


PORT_RANGE_MSG = "must be between 1 and 65535, inclusive"
_PROTOCOLS = ["SCTP", "TCP", "UDP"]


def _port_errors(value, field: str, *, required_value: bool) -> list[dict]:
    if value is None:
        return [required(field)] if required_value else []
    if isinstance(value, int) and not isinstance(value, bool) and not 1 <= value <= 65535:
        return [invalid(field, value, PORT_RANGE_MSG)]
    return []


def _validate_container_ports(ports, field: str) -> list[dict]:
    causes: list[dict] = []
    for index, port in enumerate(ports if isinstance(ports, list) else []):
        if not isinstance(port, dict):
            continue
        path = f"{field}[{index}]"
        causes.extend(
            _port_errors(port.get("containerPort"), f"{path}.containerPort", required_value=True)
        )
        causes.extend(_port_errors(port.get("hostPort"), f"{path}.hostPort", required_value=False))
        protocol = port.get("protocol")
        if protocol is not None and protocol not in _PROTOCOLS:
            causes.append(not_supported(f"{path}.protocol", protocol, _PROTOCOLS))
    return causes


def validate_pod_spec(spec, field: str) -> list[dict]:
    causes: list[dict] = []
    if not isinstance(spec, dict):
        causes.append(required(field))
        return causes
    containers = spec.get("containers")
    if not containers:
        causes.append(required(f"{field}.containers"))
    seen: set = set()
    _validate_containers(spec.get("initContainers"), f"{field}.initContainers", seen, causes)
    _validate_containers(containers, f"{field}.containers", seen, causes)
    policy = _text(spec.get("restartPolicy"))
    if policy and policy not in _RESTART_POLICIES:
        causes.append(not_supported(f"{field}.restartPolicy", policy, _RESTART_POLICIES))
    causes.extend(validate_tolerations(spec.get("tolerations"), f"{field}.tolerations"))
    causes.extend(validate_labels(spec.get("nodeSelector"), f"{field}.nodeSelector"))
    volumes = spec.get("volumes") or []
    volume_names: set = set()
    for index, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, dict):
            continue
        name = _text(volume.get("name"))
        path = f"{field}.volumes[{index}].name"
        if not name:
            causes.append(required(path))
            continue
        causes.extend(invalid(path, name, m) for m in dns1123_label_errors(name))
        if name in volume_names:
            causes.append(duplicate(path, name))
        volume_names.add(name)
    causes.extend(pod_volumes.validate_pod_volumes(spec, field))
    return causes


def validate_pod_template(template, field: str) -> list[dict]:
    if not isinstance(template, dict):
        return [required(field)]
    causes = []
    meta = _dict(template.get("metadata"))
    causes.extend(validate_labels(meta.get("labels"), f"{field}.metadata.labels"))
    causes.extend(validate_annotations(meta.get("annotations"), f"{field}.metadata.annotations"))
    causes.extend(validate_pod_spec(template.get("spec"), f"{field}.spec"))
    return causes


# -- kinds --------------------------------------------------------------------------------
def _non_negative(spec: dict, key: str, field: str) -> list[dict]:
    value = spec.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return [invalid(f"{field}.{key}", value, IS_NEGATIVE_MSG)]
    return []


def _validate_pod(obj: dict) -> list[dict]:
    return validate_pod_spec(obj.get("spec"), "spec")


def _validate_job(obj: dict) -> list[dict]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes = []
    for key in (
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ):
        causes.extend(_non_negative(spec, key, "spec"))
    mode = spec.get("completionMode")
    if mode is not None and mode not in ("NonIndexed", "Indexed"):
        causes.append(not_supported("spec.completionMode", mode, ["NonIndexed", "Indexed"]))
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(required("spec.completions", "when completion mode is Indexed"))
    template = spec.get("template")
    causes.extend(validate_pod_template(template, "spec.template"))
    policy = _text(_dict(_dict(template).get("spec")).get("restartPolicy")) or "Always"
    if policy not in ("OnFailure", "Never"):
        causes.append(
            not_supported("spec.template.spec.restartPolicy", policy, ["OnFailure", "Never"])
        )
    return causes


def _selector_matches(selector: dict, labels: dict) -> bool:
    for key, value in _dict(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expr in _list(selector.get("matchExpressions")):
        expr = _dict(expr)
        key, op, values = expr.get("key"), expr.get("operator"), _list(expr.get("values"))
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _with_claim_volumes(obj: dict, spec: dict):
    """A StatefulSet's containers mount its volumeClaimTemplates by name, which are not among the
    template's volumes (the controller adds them to each pod): count them as volumes, as
    upstream's "union of the given volumes and volumeClaims"."""
    template = spec.get("template")
    claims = spec.get("volumeClaimTemplates")
    if obj.get("kind") != "StatefulSet" or not isinstance(template, dict) or not claims:
        return template
    pod_spec = _dict(template.get("spec"))
    volumes = list(pod_spec.get("volumes") or [])
    have = {v.get("name") for v in volumes if isinstance(v, dict)}
    for claim in claims if isinstance(claims, list) else []:
        name = _dict(_dict(claim).get("metadata")).get("name")
        if isinstance(name, str) and name not in have:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": name}})
    return {**template, "spec": {**pod_spec, "volumes": volumes}}


def _validate_workload_controller(obj: dict) -> list[dict]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes = _non_negative(spec, "replicas", "spec")
    causes.extend(validate_pod_template(_with_claim_volumes(obj, spec), "spec.template"))
    selector = spec.get("selector")
    labels = _dict(_dict(_dict(spec.get("template")).get("metadata")).get("labels"))
    if not isinstance(selector, dict):
        causes.append(required("spec.selector"))
    elif not selector.get("matchLabels") and not selector.get("matchExpressions"):
        causes.append(
            invalid(
                "spec.selector",
                selector,
                f"empty selector is invalid for {str(obj.get('kind', '')).lower()}",
            )
        )
    elif not _selector_matches(selector, labels):
        causes.append(
            invalid(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        )
    if obj.get("kind") == "Deployment":
        strategy = _dict(spec.get("strategy"))
        kind = strategy.get("type")
        if kind is not None and kind not in ("Recreate", "RollingUpdate"):
            causes.append(not_supported("spec.strategy.type", kind, ["Recreate", "RollingUpdate"]))
    return causes


def _validate_replication_controller(obj: dict) -> list[dict]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes = _non_negative(spec, "replicas", "spec")
    causes.extend(validate_pod_template(spec.get("template"), "spec.template"))
    selector = _dict(spec.get("selector"))
    labels = _dict(_dict(_dict(spec.get("template")).get("metadata")).get("labels"))
    if selector and any(labels.get(k) != v for k, v in selector.items()):
        causes.append(
            invalid(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        )
    return causes


_SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]


def _validate_service(obj: dict) -> list[dict]:
    spec = _dict(obj.get("spec"))
    causes: list[dict] = []
    kind = spec.get("type")
    if kind is not None and kind not in _SERVICE_TYPES:
        causes.append(not_supported("spec.type", kind, _SERVICE_TYPES))
    ports = _list(spec.get("ports"))
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        causes.append(required("spec.ports"))
    names: set = set()
    for index, port in enumerate(ports):
        port = _dict(port)
        path = f"spec.ports[{index}]"
        causes.extend(_port_errors(port.get("port"), f"{path}.port", required_value=True))
        target = port.get("targetPort")
        if isinstance(target, int):
            causes.extend(_port_errors(target, f"{path}.targetPort", required_value=False))
        protocol = port.get("protocol")
        if protocol is not None and protocol not in _PROTOCOLS:
            causes.append(not_supported(f"{path}.protocol", protocol, _PROTOCOLS))
        node_port = port.get("nodePort")
        if isinstance(node_port, int) and not isinstance(node_port, bool):
            if not 1 <= node_port <= 65535:
                causes.append(invalid(f"{path}.nodePort", node_port, PORT_RANGE_MSG))
            elif not 30000 <= node_port <= 32767:
                causes.append(
                    invalid(
                        f"{path}.nodePort",
                        node_port,
                        "provided port is not in the valid range. "
                        "The range of valid ports is 30000-32767",
                    )
                )
        if len(ports) > 1 and not port.get("name"):
            causes.append(required(f"{path}.name"))
        name = port.get("name")
        if name:
            if name in names:
                causes.append(duplicate(f"{path}.name", name))
            names.add(name)
    return causes


_ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]


def _validate_pvc(obj: dict) -> list[dict]:
    spec = _dict(obj.get("spec"))
    causes: list[dict] = []
    modes = _list(spec.get("accessModes"))
    if not modes:
        causes.append(required("spec.accessModes", "at least 1 access mode is required"))
    for mode in modes:
        if mode not in _ACCESS_MODES:
            causes.append(not_supported("spec.accessModes", mode, _ACCESS_MODES))
    storage = _dict(_dict(spec.get("resources")).get("requests")).get("storage")
    if storage is None:
        causes.append(required("spec.resources[storage]"))
    return causes


def _validate_resource_quota(obj: dict) -> list[dict]:
    causes: list[dict] = []
    for section in ("spec", "status"):
        hard = _dict(_dict(obj.get(section)).get("hard"))
        for name, value in hard.items():
            path = f"{section}.hard[{name}]"
            causes.extend(invalid(path, name, m) for m in qualified_name_errors(name))
            quantity = _parse(value, path, causes)
            if quantity is not None:
                causes.extend(_quantity_value_errors(name, quantity, path))
    return causes


def _validate_priority_class(obj: dict) -> list[dict]:
    value = obj.get("value")
    name = _dict(obj.get("metadata")).get("name")
    name = name if isinstance(name, str) else ""
    big = isinstance(value, int) and not isinstance(value, bool) and value > 1_000_000_000
    if big and not name.startswith("system-"):
        return [invalid("value", value, "must be no greater than 1000000000")]
    return []


def _validate_node(obj: dict) -> list[dict]:
    causes: list[dict] = []
    status = _dict(obj.get("status"))
    for section in ("capacity", "allocatable"):
        for name, value in _dict(status.get(section)).items():
            path = f"status.{section}[{name}]"
            quantity = _parse(value, path, causes)
            if quantity is not None:
                causes.extend(_quantity_value_errors(name, quantity, path))
    return causes


# -- Kueue's validating webhook ------------------------------------------------------------
def validate_kueue(obj: dict) -> list[dict]:
    """Checks of Kueue's ClusterQueue/Cohort webhook that the CRD schema leaves out."""
    if obj.get("kind") not in ("ClusterQueue", "Cohort"):
        return []
    spec = _dict(obj.get("spec"))
    causes: list[dict] = []
    for g, group in enumerate(_list(spec.get("resourceGroups"))):
        for f, flavor in enumerate(_list(_dict(group).get("flavors"))):
            for r, resource in enumerate(_list(_dict(flavor).get("resources"))):
                if not isinstance(resource, dict):
                    continue
                base = f"spec.resourceGroups[{g}].flavors[{f}].resources[{r}]"
                nominal = None
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if resource.get(key) is None:
                        continue
                    try:
                        quantity = Quantity.parse(resource[key])
                    except QuantityError:
                        continue  # the schema's pattern already reports it
                    if key == "nominalQuota":
                        nominal = quantity
                    if quantity.sign() < 0:
                        causes.append(invalid(f"{base}.{key}", str(quantity), IS_NEGATIVE_MSG))
                    elif key == "lendingLimit" and nominal is not None and quantity > nominal:
                        causes.append(
                            invalid(
                                f"{base}.{key}",
                                str(quantity),
                                "must be less than or equal to the nominalQuota",
                            )
                        )
    return causes


_VALIDATORS = {
    ("", "Pod"): _validate_pod,
    ("batch", "Job"): _validate_job,
    ("apps", "Deployment"): _validate_workload_controller,
    ("apps", "StatefulSet"): _validate_workload_controller,
    ("apps", "ReplicaSet"): _validate_workload_controller,
    ("apps", "DaemonSet"): _validate_workload_controller,
    ("", "ReplicationController"): _validate_replication_controller,
    ("", "Service"): _validate_service,
    ("", "PersistentVolumeClaim"): _validate_pvc,
    ("", "Secret"): secrets.validate_secret,
    ("", "ResourceQuota"): _validate_resource_quota,
    ("scheduling.k8s.io", "PriorityClass"): _validate_priority_class,
    ("", "Node"): _validate_node,
    ("kueue.x-k8s.io", "ClusterQueue"): validate_kueue,
    ("kueue.x-k8s.io", "Cohort"): validate_kueue,
}


def validate_builtin(obj: dict) -> list[dict]:
    """Causes for a built-in object (or a Kueue ClusterQueue/Cohort); [] when valid."""
    if not isinstance(obj, dict):
        return [field_error("FieldValueInvalid", "<nil>", json.dumps(obj), "must be an object")]
    group = _group(obj.get("apiVersion"))
    kind = obj.get("kind")
    causes = validate_metadata(obj)
    validator = _VALIDATORS.get((group, kind)) if isinstance(kind, str) else None
    if validator is not None:
        causes.extend(validator(obj))
    return causes
