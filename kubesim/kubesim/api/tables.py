"""Table responses (Accept: application/json;as=Table;v=v1;g=meta.k8s.io), as `kubectl get` asks.

CRDs use their additionalPrinterColumns (JSONPath cells, dates as ages); built-in kinds get the
columns kube-apiserver prints for them.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from kubesim.api.registry import ResourceType
from kubesim.clock import parse_rfc3339

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "priority": 0,
    "description": "Name must be unique within a namespace. Is required when creating "
    "resources, although some resources may allow a client to request the generation of an "
    "appropriate name automatically. Name is primarily intended for creation idempotence and "
    "configuration definition. Cannot be updated.",
}


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60 * 2:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        sec = s % 60
        return f"{minutes}m{sec}s" if sec else f"{minutes}m"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        m = minutes % 60
        return f"{hours}h{m}m" if m else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d{h}h" if h else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: str | None, now: datetime.datetime) -> str:
    if not timestamp:
        return "<unknown>"
    try:
        then = parse_rfc3339(timestamp)
    except ValueError:
        return "<unknown>"
    return human_duration((now - then).total_seconds())


# --- a small JSONPath evaluator (the subset printer columns use) ----------------------------
_TOKEN = re.compile(
    r"\.([A-Za-z0-9_\-$/]+)|\[(\d+|\*)\]|\[\?\(@\.([A-Za-z0-9_.\-]+)\s*(==|!=)\s*"
    r"['\"]([^'\"]*)['\"]\)\]|\['([^']+)'\]"
)


def jsonpath(obj, path: str) -> list:
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    if path.startswith("$"):
        path = path[1:]
    nodes = [obj]
    pos = 0
    while pos < len(path):
        match = _TOKEN.match(path, pos)
        if not match:
            return []
        pos = match.end()
        field, index, filter_key, filter_op, filter_value, quoted = match.groups()
        field = field or quoted
        nxt = []
        for node in nodes:
            if field is not None:
                if isinstance(node, dict) and field in node:
                    nxt.append(node[field])
            elif index is not None:
                if isinstance(node, list):
                    if index == "*":
                        nxt.extend(node)
                    elif int(index) < len(node):
                        nxt.append(node[int(index)])
            elif isinstance(node, list):
                for item in node:
                    value = item
                    for part in filter_key.split("."):
                        value = value.get(part) if isinstance(value, dict) else None
                    matched = (str(value) == filter_value) == (filter_op == "==")
                    if matched and (value is not None or filter_op == "!="):
                        nxt.append(item)
        nodes = nxt
    return nodes


def _cell(values: list, type_: str, now: datetime.datetime):
    if not values:
        return None
    if type_ == "date":
        value = values[0]
        return age(value, now) if isinstance(value, str) else None
    if len(values) > 1:
        return ",".join(_text(v) for v in values)
    value = values[0]
    if type_ == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if type_ == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, dict | list):
        import orjson

        return orjson.dumps(value).decode()
    return _text(value)


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        import orjson

        return orjson.dumps(value).decode()
    return str(value)


# --- built-in kinds -------------------------------------------------------------------------
def _c(name: str, type_: str = "string", priority: int = 0, fmt: str = "") -> dict:
    column = {"name": name, "type": type_, "format": fmt, "description": name, "priority": priority}
    return column


def _ready_containers(pod: dict) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(pod: dict) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode", 0) != 0:
            return "Init:" + ((state["terminated"].get("reason")) or "Error")
        if "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            return "Init:" + state["waiting"]["reason"]
    for cs in reversed(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated", {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif "terminated" in state:
            term = state["terminated"]
            reason = (
                f"Signal:{term['signal']}"
                if term.get("signal")
                else f"ExitCode:{term.get('exitCode', 0)}"
            )
    if (pod.get("spec") or {}).get("schedulingGates") and status.get("phase") == "Pending":
        reason = "SchedulingGated"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Terminating"
    return reason


def _restarts(pod: dict) -> int:
    return sum(
        int(s.get("restartCount", 0))
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


def _node_status(node: dict) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    status = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if ready is None:
        status = "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    return status


def _node_roles(node: dict) -> str:
    roles = sorted(
        key.split("/", 1)[1]
        for key in (node["metadata"].get("labels") or {})
        if key.startswith("node-role.kubernetes.io/")
    )
    return ",".join(roles) or "<none>"


def _address(node: dict, kind: str) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == kind:
            return address.get("address", "")
    return "<none>"


def _ports(svc: dict) -> str:
    parts = []
    for port in (svc.get("spec") or {}).get("ports") or []:
        text = f"{port.get('port')}"
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        parts.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(parts) or "<none>"


def _involved(event: dict) -> str:
    ref = event.get("involvedObject") or event.get("regarding") or {}
    return f"{(ref.get('kind') or '').lower()}/{ref.get('name', '')}"


def _event_time(event: dict) -> str | None:
    return (
        event.get("lastTimestamp")
        or (event.get("series") or {}).get("lastObservedTime")
        or event.get("eventTime")
        or event.get("deprecatedLastTimestamp")
        or event.get("metadata", {}).get("creationTimestamp")
    )


def _quota_pairs(quota: dict, prefix: str) -> str:
    hard = (quota.get("status") or {}).get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = (quota.get("status") or {}).get("used") or {}
    parts = []
    for key in sorted(hard):
        is_limit = key.startswith("limits.")
        if (prefix == "limits") != is_limit:
            continue
        parts.append(f"{key}: {used.get(key, '0')}/{hard[key]}")
    return ", ".join(parts)


def _job_status(job: dict) -> str:
    """The STATUS column of `kubectl get jobs`, conditions checked in kube-apiserver's order."""
    true = {
        c.get("type")
        for c in (job.get("status") or {}).get("conditions") or []
        if c.get("status") == "True"
    }
    if "Complete" in true:
        return "Complete"
    if "Failed" in true:
        return "Failed"
    if job.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    if "Suspended" in true:
        return "Suspended"
    if "FailureTarget" in true:
        return "FailureTarget"
    if "SuccessCriteriaMet" in true:
        return "SuccessCriteriaMet"
    return "Running"


def _job_duration(job: dict, now: datetime.datetime) -> str:
    status = job.get("status") or {}
    start = status.get("startTime")
    if not start:
        return ""
    end = status.get("completionTime")
    end_dt = parse_rfc3339(end) if end else now
    return human_duration((end_dt - parse_rfc3339(start)).total_seconds())


def _g(obj: dict, *path, default=None):
    node = obj
    for part in path:
        if not isinstance(node, dict):
            return default
        node = node.get(part)
    return default if node is None else node


Row = Callable[[dict, datetime.datetime], list]
_BUILTIN_TABLES: dict[tuple[str, str], tuple[list[dict], Row]] = {
    ("", "Pod"): (
        [
            _c("Ready"),
            _c("Status"),
            _c("Restarts", "string"),
            _c("Age"),
            _c("IP", priority=1),
            _c("Node", priority=1),
            _c("Nominated Node", priority=1),
            _c("Readiness Gates", priority=1),
        ],
        lambda o, now: [
            _ready_containers(o),
            _pod_status(o),
            str(_restarts(o)),
            age(o["metadata"].get("creationTimestamp"), now),
            _g(o, "status", "podIP", default="<none>"),
            _g(o, "spec", "nodeName", default="<none>"),
            _g(o, "status", "nominatedNodeName", default="<none>"),
            "<none>",
        ],
    ),
    ("", "Namespace"): (
        [_c("Status"), _c("Age")],
        lambda o, now: [
            _g(o, "status", "phase", default=""),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "Node"): (
        [
            _c("Status"),
            _c("Roles"),
            _c("Age"),
            _c("Version"),
            _c("Internal-IP", priority=1),
            _c("External-IP", priority=1),
            _c("OS-Image", priority=1),
            _c("Kernel-Version", priority=1),
            _c("Container-Runtime", priority=1),
        ],
        lambda o, now: [
            _node_status(o),
            _node_roles(o),
            age(o["metadata"].get("creationTimestamp"), now),
            _g(o, "status", "nodeInfo", "kubeletVersion", default=""),
            _address(o, "InternalIP"),
            _address(o, "ExternalIP"),
            _g(o, "status", "nodeInfo", "osImage", default="<unknown>"),
            _g(o, "status", "nodeInfo", "kernelVersion", default="<unknown>"),
            _g(o, "status", "nodeInfo", "containerRuntimeVersion", default="<unknown>"),
        ],
    ),
    ("", "Event"): (
        [
            _c("Last Seen"),
            _c("Type"),
            _c("Reason"),
            _c("Object"),
            _c("Subobject", priority=1),
            _c("Source", priority=1),
            _c("Message"),
            _c("First Seen", priority=1),
            _c("Count", "integer", priority=1),
            _c("Name", priority=1),
        ],
        lambda o, now: [
            age(_event_time(o), now),
            o.get("type", ""),
            o.get("reason", ""),
            _involved(o),
            _g(o, "involvedObject", "fieldPath", default=""),
            _g(o, "source", "component", default=o.get("reportingComponent", "")),
            o.get("message", ""),
            age(
                o.get("firstTimestamp")
                or o.get("eventTime")
                or o["metadata"].get("creationTimestamp"),
                now,
            ),
            int(o.get("count") or 1),
            o["metadata"]["name"],
        ],
    ),
    ("events.k8s.io", "Event"): (
        [
            _c("Last Seen"),
            _c("Type"),
            _c("Reason"),
            _c("Object"),
            _c("Message"),
            _c("Name", priority=1),
        ],
        lambda o, now: [
            age(_event_time(o), now),
            o.get("type", ""),
            o.get("reason", ""),
            _involved(o),
            o.get("note", ""),
            o["metadata"]["name"],
        ],
    ),
    ("", "Service"): (
        [
            _c("Type"),
            _c("Cluster-IP"),
            _c("External-IP"),
            _c("Port(s)"),
            _c("Age"),
            _c("Selector", priority=1),
        ],
        lambda o, now: [
            _g(o, "spec", "type", default="ClusterIP"),
            _g(o, "spec", "clusterIP", default="<none>"),
            ",".join(_g(o, "spec", "externalIPs", default=[])) or "<none>",
            _ports(o),
            age(o["metadata"].get("creationTimestamp"), now),
            ",".join(f"{k}={v}" for k, v in sorted(_g(o, "spec", "selector", default={}).items()))
            or "<none>",
        ],
    ),
    ("", "Endpoints"): (
        [_c("Endpoints"), _c("Age")],
        lambda o, now: [
            ",".join(
                f"{a.get('ip')}:{p.get('port')}"
                for s in o.get("subsets") or []
                for a in s.get("addresses") or []
                for p in s.get("ports") or [{}]
            )
            or "<none>",
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "ConfigMap"): (
        [_c("Data", "integer"), _c("Age")],
        lambda o, now: [
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "Secret"): (
        [_c("Type"), _c("Data", "integer"), _c("Age")],
        lambda o, now: [
            o.get("type", "Opaque"),
            len(o.get("data") or {}),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "ResourceQuota"): (
        [_c("Age"), _c("Request"), _c("Limit")],
        lambda o, now: [
            age(o["metadata"].get("creationTimestamp"), now),
            _quota_pairs(o, "requests"),
            _quota_pairs(o, "limits"),
        ],
    ),
    ("", "LimitRange"): (
        [_c("Created At", "date")],
        lambda o, now: [o["metadata"].get("creationTimestamp")],
    ),
    ("", "ServiceAccount"): (
        [_c("Secrets", "integer"), _c("Age")],
        lambda o, now: [
            len(o.get("secrets") or []),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "PersistentVolumeClaim"): (
        [
            _c("Status"),
            _c("Volume"),
            _c("Capacity"),
            _c("Access Modes"),
            _c("StorageClass"),
            _c("Age"),
        ],
        lambda o, now: [
            _g(o, "status", "phase", default="Pending"),
            _g(o, "spec", "volumeName", default=""),
            _g(o, "status", "capacity", "storage", default=""),
            ",".join(_g(o, "spec", "accessModes", default=[])),
            _g(o, "spec", "storageClassName", default="<unset>"),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("batch", "Job"): (
        [
            _c("Status"),
            _c("Completions"),
            _c("Duration"),
            _c("Age"),
            _c("Containers", priority=1),
            _c("Images", priority=1),
            _c("Selector", priority=1),
        ],
        lambda o, now: [
            _job_status(o),
            f"{_g(o, 'status', 'succeeded', default=0)}/{_g(o, 'spec', 'completions', default=1)}",
            _job_duration(o, now),
            age(o["metadata"].get("creationTimestamp"), now),
            ",".join(
                c.get("name", "")
                for c in _g(o, "spec", "template", "spec", "containers", default=[])
            ),
            ",".join(
                c.get("image", "")
                for c in _g(o, "spec", "template", "spec", "containers", default=[])
            ),
            ",".join(
                f"{k}={v}"
                for k, v in sorted(_g(o, "spec", "selector", "matchLabels", default={}).items())
            ),
        ],
    ),
    ("batch", "CronJob"): (
        [
            _c("Schedule"),
            _c("Timezone"),
            _c("Suspend"),
            _c("Active", "integer"),
            _c("Last Schedule"),
            _c("Age"),
        ],
        lambda o, now: [
            _g(o, "spec", "schedule", default=""),
            _g(o, "spec", "timeZone", default="<none>"),
            _text(_g(o, "spec", "suspend", default=False)),
            len(_g(o, "status", "active", default=[])),
            age(_g(o, "status", "lastScheduleTime"), now)
            if _g(o, "status", "lastScheduleTime")
            else "<none>",
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("apps", "Deployment"): (
        [_c("Ready"), _c("Up-to-date", "integer"), _c("Available", "integer"), _c("Age")],
        lambda o, now: [
            f"{_g(o, 'status', 'readyReplicas', default=0)}/{_g(o, 'spec', 'replicas', default=1)}",
            _g(o, "status", "updatedReplicas", default=0),
            _g(o, "status", "availableReplicas", default=0),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("apps", "StatefulSet"): (
        [_c("Ready"), _c("Age")],
        lambda o, now: [
            f"{_g(o, 'status', 'readyReplicas', default=0)}/{_g(o, 'spec', 'replicas', default=1)}",
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("apps", "ReplicaSet"): (
        [_c("Desired", "integer"), _c("Current", "integer"), _c("Ready", "integer"), _c("Age")],
        lambda o, now: [
            _g(o, "spec", "replicas", default=1),
            _g(o, "status", "replicas", default=0),
            _g(o, "status", "readyReplicas", default=0),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("apps", "DaemonSet"): (
        [
            _c("Desired", "integer"),
            _c("Current", "integer"),
            _c("Ready", "integer"),
            _c("Up-to-date", "integer"),
            _c("Available", "integer"),
            _c("Node Selector"),
            _c("Age"),
        ],
        lambda o, now: [
            _g(o, "status", "desiredNumberScheduled", default=0),
            _g(o, "status", "currentNumberScheduled", default=0),
            _g(o, "status", "numberReady", default=0),
            _g(o, "status", "updatedNumberScheduled", default=0),
            _g(o, "status", "numberAvailable", default=0),
            ",".join(
                f"{k}={v}"
                for k, v in sorted(
                    _g(o, "spec", "template", "spec", "nodeSelector", default={}).items()
                )
            )
            or "<none>",
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("scheduling.k8s.io", "PriorityClass"): (
        [
            _c("Value", "integer"),
            _c("Global-Default", "boolean"),
            _c("Age"),
            _c("Preemption Policy"),
        ],
        lambda o, now: [
            o.get("value", 0),
            bool(o.get("globalDefault", False)),
            age(o["metadata"].get("creationTimestamp"), now),
            o.get("preemptionPolicy", "PreemptLowerPriority"),
        ],
    ),
    ("coordination.k8s.io", "Lease"): (
        [_c("Holder"), _c("Age")],
        lambda o, now: [
            _g(o, "spec", "holderIdentity", default=""),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "PersistentVolume"): (
        [
            _c("Capacity"),
            _c("Access Modes"),
            _c("Reclaim Policy"),
            _c("Status"),
            _c("Claim"),
            _c("StorageClass"),
            _c("VolumeAttributesClass"),
            _c("Reason"),
            _c("Age"),
        ],
        lambda o, now: [
            _g(o, "spec", "capacity", "storage", default=""),
            ",".join(_g(o, "spec", "accessModes", default=[])),
            _g(o, "spec", "persistentVolumeReclaimPolicy", default=""),
            _g(o, "status", "phase", default="Pending"),
            (
                f"{_g(o, 'spec', 'claimRef', 'namespace')}/{_g(o, 'spec', 'claimRef', 'name')}"
                if _g(o, "spec", "claimRef")
                else ""
            ),
            _g(o, "spec", "storageClassName", default=""),
            "<unset>",
            _g(o, "status", "reason", default=""),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("", "ReplicationController"): (
        [_c("Desired", "integer"), _c("Current", "integer"), _c("Ready", "integer"), _c("Age")],
        lambda o, now: [
            _g(o, "spec", "replicas", default=1),
            _g(o, "status", "replicas", default=0),
            _g(o, "status", "readyReplicas", default=0),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("policy", "PodDisruptionBudget"): (
        [
            _c("Min Available"),
            _c("Max Unavailable"),
            _c("Allowed Disruptions", "integer"),
            _c("Age"),
        ],
        lambda o, now: [
            str(_g(o, "spec", "minAvailable", default="N/A")),
            str(_g(o, "spec", "maxUnavailable", default="N/A")),
            _g(o, "status", "disruptionsAllowed", default=0),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("storage.k8s.io", "StorageClass"): (
        [
            _c("Provisioner"),
            _c("ReclaimPolicy"),
            _c("VolumeBindingMode"),
            _c("AllowVolumeExpansion", "boolean"),
            _c("Age"),
        ],
        lambda o, now: [
            o.get("provisioner", ""),
            o.get("reclaimPolicy", "Delete"),
            o.get("volumeBindingMode", "Immediate"),
            bool(o.get("allowVolumeExpansion", False)),
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("node.k8s.io", "RuntimeClass"): (
        [_c("Handler"), _c("Age")],
        lambda o, now: [o.get("handler", ""), age(o["metadata"].get("creationTimestamp"), now)],
    ),
    ("rbac.authorization.k8s.io", "RoleBinding"): (
        [_c("Role"), _c("Age")],
        lambda o, now: [
            f"{_g(o, 'roleRef', 'kind', default='')}/{_g(o, 'roleRef', 'name', default='')}",
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): (
        [_c("Role"), _c("Age")],
        lambda o, now: [
            f"{_g(o, 'roleRef', 'kind', default='')}/{_g(o, 'roleRef', 'name', default='')}",
            age(o["metadata"].get("creationTimestamp"), now),
        ],
    ),
    ("rbac.authorization.k8s.io", "ClusterRole"): (
        [_c("Created At", "date")],
        lambda o, now: [o["metadata"].get("creationTimestamp")],
    ),
    ("rbac.authorization.k8s.io", "Role"): (
        [_c("Created At", "date")],
        lambda o, now: [o["metadata"].get("creationTimestamp")],
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"): (
        [_c("Created At", "date")],
        lambda o, now: [o["metadata"].get("creationTimestamp")],
    ),
}

_DEFAULT_TABLE: tuple[list[dict], Row] = (
    [_c("Age")],
    lambda o, now: [age(o["metadata"].get("creationTimestamp"), now)],
)


def columns_and_row(rtype: ResourceType, version: str) -> tuple[list[dict], Row]:
    if rtype.is_crd:
        printer = rtype.printer_columns.get(version) or []
        if not printer:
            return [_c("Age", "date")], _DEFAULT_TABLE[1]
        definitions = [
            {
                "name": col["name"],
                "type": col.get("type", "string"),
                "format": col.get("format", ""),
                "description": col.get("description", ""),
                "priority": int(col.get("priority", 0)),
            }
            for col in printer
        ]

        def crd_row(obj: dict, now: datetime.datetime) -> list:
            return [
                _cell(jsonpath(obj, col["jsonPath"]), col.get("type", "string"), now)
                for col in printer
            ]

        return definitions, crd_row
    return _BUILTIN_TABLES.get((rtype.group, rtype.kind), _DEFAULT_TABLE)


def partial_metadata(obj: dict) -> dict:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


_NAME_NOT_FIRST = {("", "Event"), ("events.k8s.io", "Event")}


def build_table(
    rtype: ResourceType,
    version: str,
    objects: list[dict],
    *,
    now: datetime.datetime,
    include_object: str = "Metadata",
    list_metadata: dict | None = None,
    with_definitions: bool = True,
) -> dict:
    definitions, row = columns_and_row(rtype, version)
    # events lead with "Last Seen" (their name is a priority-1 column at the end)
    name_first = (rtype.group, rtype.kind) not in _NAME_NOT_FIRST
    rows = []
    for obj in objects:
        cells = row(obj, now)
        entry: dict = {"cells": [obj["metadata"].get("name", ""), *cells] if name_first else cells}
        if include_object == "Object":
            entry["object"] = obj
        elif include_object != "None":
            entry["object"] = partial_metadata(obj)
        rows.append(entry)
    table: dict = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata or {},
        "columnDefinitions": (
            ([NAME_COLUMN, *definitions] if name_first else definitions)
            if with_definitions
            else None
        ),
        "rows": rows,
    }
    return table
