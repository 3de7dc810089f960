"""Decoding of Kubernetes protobuf request bodies for a few simple built-in kinds.

kubectl's imperative generators (`kubectl create namespace/configmap/secret/serviceaccount`)
use the typed clientset, which sends protobuf. kubesim answers in JSON (which those clients
accept) and decodes just these kinds' bodies; any other protobuf body is a 415, as a server
without that media type would answer.

Wire format: the 4-byte magic "k8s\\0", then a runtime.Unknown message
{1: TypeMeta {1: apiVersion, 2: kind}, 2: raw object bytes, 3: contentEncoding, 4: contentType}.
"""

from __future__ import annotations

import base64

MAGIC = b"k8s\x00"

# field number -> (JSON name, type); types: s (string), b (bool), i (varint), B (bytes as base64),
# ms (map<string,string>), mB (map<string,bytes>), rs (repeated string), and
# ("m", SCHEMA) / ("rm", SCHEMA) for a (repeated) nested message.
_OWNER_REFERENCE = {
    1: ("kind", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
    6: ("controller", "b"),
    7: ("blockOwnerDeletion", "b"),
}
_OBJECT_META = {
    1: ("name", "s"),
    2: ("generateName", "s"),
    3: ("namespace", "s"),
    5: ("uid", "s"),
    6: ("resourceVersion", "s"),
    7: ("generation", "i"),
    11: ("labels", "ms"),
    12: ("annotations", "ms"),
    13: ("ownerReferences", ("rm", _OWNER_REFERENCE)),
    14: ("finalizers", "rs"),
}
_OBJECT_REFERENCE = {
    1: ("kind", "s"),
    2: ("namespace", "s"),
    3: ("name", "s"),
    4: ("uid", "s"),
    5: ("apiVersion", "s"),
    6: ("resourceVersion", "s"),
    7: ("fieldPath", "s"),
}
# field numbers as in the upstream generated.proto files (k8s.io/api, apimachinery)
_LABEL_SELECTOR = {
    1: ("matchLabels", "ms"),
    2: ("matchExpressions", ("rm", {1: ("key", "s"), 2: ("operator", "s"), 3: ("values", "rs")})),
}
_CONTAINER = {
    1: ("name", "s"),
    2: ("image", "s"),
    3: ("command", "rs"),
    4: ("args", "rs"),
    5: ("workingDir", "s"),
    6: (
        "ports",
        (
            "rm",
            {
                1: ("name", "s"),
                2: ("hostPort", "i"),
                3: ("containerPort", "i"),
                4: ("protocol", "s"),
                5: ("hostIP", "s"),
            },
        ),
    ),
    7: ("env", ("rm", {1: ("name", "s"), 2: ("value", "s")})),
    8: ("resources", ("m", {1: ("limits", "mQ"), 2: ("requests", "mQ")})),
    14: ("imagePullPolicy", "s"),
    16: ("stdin", "b"),
    17: ("stdinOnce", "b"),
    18: ("tty", "b"),
}
_POD_SPEC = {
    2: ("containers", ("rm", _CONTAINER)),
    3: ("restartPolicy", "s"),
    4: ("terminationGracePeriodSeconds", "i"),
    5: ("activeDeadlineSeconds", "i"),
    6: ("dnsPolicy", "s"),
    7: ("nodeSelector", "ms"),
    8: ("serviceAccountName", "s"),
    10: ("nodeName", "s"),
    19: ("schedulerName", "s"),
    20: ("initContainers", ("rm", _CONTAINER)),
    24: ("priorityClassName", "s"),
    29: ("runtimeClassName", "s"),
}
_POD_TEMPLATE = {1: ("metadata", ("m", _OBJECT_META)), 2: ("spec", ("m", _POD_SPEC))}
_JOB_SPEC = {
    1: ("parallelism", "i"),
    2: ("completions", "i"),
    3: ("activeDeadlineSeconds", "i"),
    4: ("selector", ("m", _LABEL_SELECTOR)),
    5: ("manualSelector", "b"),
    6: ("template", ("m", _POD_TEMPLATE)),
    7: ("backoffLimit", "i"),
    8: ("ttlSecondsAfterFinished", "i"),
    9: ("completionMode", "s"),
    10: ("suspend", "b"),
}
_DELETE_OPTIONS = {
    1: ("gracePeriodSeconds", "i"),
    2: ("preconditions", ("m", {1: ("uid", "s"), 2: ("resourceVersion", "s")})),
    3: ("orphanDependents", "b"),
    4: ("propagationPolicy", "s"),
    5: ("dryRun", "rs"),
}
_RESOURCE_ATTRIBUTES = {
    1: ("namespace", "s"),
    2: ("verb", "s"),
    3: ("group", "s"),
    4: ("version", "s"),
    5: ("resource", "s"),
    6: ("subresource", "s"),
    7: ("name", "s"),
}
_ACCESS_REVIEW = {
    1: ("metadata", ("m", _OBJECT_META)),
    2: (
        "spec",
        (
            "m",
            {
                1: ("resourceAttributes", ("m", _RESOURCE_ATTRIBUTES)),
                2: ("nonResourceAttributes", ("m", {1: ("path", "s"), 2: ("verb", "s")})),
                3: ("user", "s"),
                4: ("groups", "rs"),
                6: ("uid", "s"),
            },
        ),
    ),
}
_POLICY_RULE = {
    1: ("verbs", "rs"),
    2: ("apiGroups", "rs"),
    3: ("resources", "rs"),
    4: ("resourceNames", "rs"),
    5: ("nonResourceURLs", "rs"),
}
_ROLE = {1: ("metadata", ("m", _OBJECT_META)), 2: ("rules", ("rm", _POLICY_RULE))}
_BINDING = {
    1: ("metadata", ("m", _OBJECT_META)),
    2: (
        "subjects",
        ("rm", {1: ("kind", "s"), 2: ("apiGroup", "s"), 3: ("name", "s"), 4: ("namespace", "s")}),
    ),
    3: ("roleRef", ("m", {1: ("apiGroup", "s"), 2: ("kind", "s"), 3: ("name", "s")})),
}
SCHEMAS: dict[tuple[str, str], dict] = {
    ("v1", "ResourceQuota"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("spec", ("m", {1: ("hard", "mQ"), 2: ("scopes", "rs")})),
    },
    ("v1", "DeleteOptions"): _DELETE_OPTIONS,
    ("meta.k8s.io/v1", "DeleteOptions"): _DELETE_OPTIONS,
    ("policy/v1", "Eviction"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("deleteOptions", ("m", _DELETE_OPTIONS)),
    },
    ("policy/v1", "PodDisruptionBudget"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: (
            "spec",
            (
                "m",
                {
                    1: ("minAvailable", "ios"),
                    2: ("selector", ("m", _LABEL_SELECTOR)),
                    3: ("maxUnavailable", "ios"),
                    4: ("unhealthyPodEvictionPolicy", "s"),
                },
            ),
        ),
    },
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _ACCESS_REVIEW,
    ("authorization.k8s.io/v1", "SubjectAccessReview"): _ACCESS_REVIEW,
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"): _ACCESS_REVIEW,
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("spec", ("m", {1: ("namespace", "s")})),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: ("metadata", ("m", _OBJECT_META))},
    ("authentication.k8s.io/v1", "TokenRequest"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: (
            "spec",
            (
                "m",
                {
                    1: ("audiences", "rs"),
                    3: (
                        "boundObjectRef",
                        (
                            "m",
                            {
                                1: ("kind", "s"),
                                2: ("apiVersion", "s"),
                                3: ("name", "s"),
                                4: ("uid", "s"),
                            },
                        ),
                    ),
                    4: ("expirationSeconds", "i"),
                },
            ),
        ),
    },
    ("scheduling.k8s.io/v1", "PriorityClass"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("value", "i"),
        3: ("globalDefault", "b"),
        4: ("description", "s"),
        5: ("preemptionPolicy", "s"),
    },
    ("rbac.authorization.k8s.io/v1", "Role"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): _ROLE,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): _BINDING,
    ("apps/v1", "Deployment"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: (
            "spec",
            (
                "m",
                {
                    1: ("replicas", "i"),
                    2: ("selector", ("m", _LABEL_SELECTOR)),
                    3: ("template", ("m", _POD_TEMPLATE)),
                    5: ("minReadySeconds", "i"),
                    6: ("revisionHistoryLimit", "i"),
                    7: ("paused", "b"),
                    9: ("progressDeadlineSeconds", "i"),
                },
            ),
        ),
    },
    ("batch/v1", "Job"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("spec", ("m", _JOB_SPEC)),
    },
    ("batch/v1", "CronJob"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: (
            "spec",
            (
                "m",
                {
                    1: ("schedule", "s"),
                    2: ("startingDeadlineSeconds", "i"),
                    3: ("concurrencyPolicy", "s"),
                    4: ("suspend", "b"),
                    5: (
                        "jobTemplate",
                        (
                            "m",
                            {1: ("metadata", ("m", _OBJECT_META)), 2: ("spec", ("m", _JOB_SPEC))},
                        ),
                    ),
                    6: ("successfulJobsHistoryLimit", "i"),
                    7: ("failedJobsHistoryLimit", "i"),
                    8: ("timeZone", "s"),
                },
            ),
        ),
    },
    ("v1", "Service"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: (
            "spec",
            (
                "m",
                {
                    1: (
                        "ports",
                        (
                            "rm",
                            {
                                1: ("name", "s"),
                                2: ("protocol", "s"),
                                3: ("port", "i"),
                                4: ("targetPort", "ios"),
                                5: ("nodePort", "i"),
                            },
                        ),
                    ),
                    2: ("selector", "ms"),
                    3: ("clusterIP", "s"),
                    4: ("type", "s"),
                    10: ("externalName", "s"),
                },
            ),
        ),
    },
    ("v1", "Namespace"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("spec", ("m", {1: ("finalizers", "rs")})),
    },
    ("v1", "ConfigMap"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("data", "ms"),
        3: ("binaryData", "mB"),
        4: ("immutable", "b"),
    },
    ("v1", "Secret"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("data", "mB"),
        3: ("type", "s"),
        4: ("stringData", "ms"),
        5: ("immutable", "b"),
    },
    ("v1", "ServiceAccount"): {
        1: ("metadata", ("m", _OBJECT_META)),
        2: ("secrets", ("rm", _OBJECT_REFERENCE)),
        3: ("imagePullSecrets", ("rm", {1: ("name", "s")})),
        4: ("automountServiceAccountToken", "b"),
    },
}


def _signed(value: int) -> int:
    """A varint as a (two's complement) signed 64-bit integer."""
    return value - (1 << 64) if value >= 1 << 63 else value


class ProtobufError(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError("truncated field")
            out.append((number, data[pos : pos + length]))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


def _map_entry(raw: bytes) -> tuple[str, bytes]:
    key, value = "", b""
    for number, item in fields(raw):
        if number == 1 and isinstance(item, bytes):
            key = item.decode()
        elif number == 2 and isinstance(item, bytes):
            value = item
    return key, value


# Go's protobuf marshals every non-pointer scalar, zero or not, where JSON omits it (omitempty);
# zero scalars are dropped except for these pointer fields, whose 0/false is meaningful.
_KEEP_ZERO = {
    "replicas",
    "parallelism",
    "completions",
    "backoffLimit",
    "suspend",
    "gracePeriodSeconds",
    "value",
    "expirationSeconds",
    "containerPort",
    "port",
}


def _message(raw: bytes, schema: dict) -> dict:
    obj = _message_with_zeros(raw, schema)
    for key in [k for k, v in obj.items() if v in ("", 0, False) and v is not None]:
        if key not in _KEEP_ZERO or obj[key] == "":
            del obj[key]
    return obj


def _message_with_zeros(raw: bytes, schema: dict) -> dict:
    obj: dict = {}
    for number, value in fields(raw):
        spec = schema.get(number)
        if spec is None:
            continue
        name, kind = spec
        if kind == "s":
            obj[name] = value.decode() if isinstance(value, bytes) else str(value)
        elif kind == "b":
            obj[name] = bool(value)
        elif kind == "i":
            obj[name] = _signed(value) if isinstance(value, int) else 0
        elif kind == "B":
            obj[name] = base64.b64encode(value).decode()
        elif kind == "rs":
            obj.setdefault(name, []).append(value.decode())
        elif kind == "mQ":  # map<string, resource.Quantity {1: string}>
            key, item = _map_entry(value)
            quantity = ""
            for sub, text in fields(item):
                if sub == 1 and isinstance(text, bytes):
                    quantity = text.decode()
            obj.setdefault(name, {})[key] = quantity
        elif kind == "ios":  # intstr.IntOrString {1: type, 2: intVal, 3: strVal}
            parts = dict(fields(value))
            obj[name] = (
                parts[3].decode()
                if parts.get(1) == 1 and isinstance(parts.get(3), bytes)
                else _signed(parts.get(2, 0))
            )
        elif kind in ("ms", "mB"):
            key, item = _map_entry(value)
            obj.setdefault(name, {})[key] = (
                item.decode() if kind == "ms" else base64.b64encode(item).decode()
            )
        elif kind[0] == "m":
            obj[name] = _message(value, kind[1])
        elif kind[0] == "rm":
            obj.setdefault(name, []).append(_message(value, kind[1]))
    return obj


def decode(body: bytes) -> dict:
    """A JSON-shaped object from a Kubernetes protobuf body (ProtobufError if not decodable)."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            for sub, item in fields(value):
                if sub == 1 and isinstance(item, bytes):
                    api_version = item.decode()
                elif sub == 2 and isinstance(item, bytes):
                    kind = item.decode()
        elif number == 2 and isinstance(value, bytes):
            raw = value
    schema = SCHEMAS.get((api_version, kind))
    if schema is None:
        raise ProtobufError(f"protobuf bodies of {api_version} {kind} are not supported")
    obj = _message(raw, schema)
    obj["apiVersion"] = api_version
    obj["kind"] = kind
    return obj


def decode_body(raw: bytes, content_type: str) -> dict:
    """A request body as JSON-shaped data: protobuf when it carries the magic, else JSON/YAML
    (ProtobufError / ValueError when it cannot be read)."""
    if raw.startswith(MAGIC) or "protobuf" in content_type:
        return decode(raw)
    import orjson

    if "yaml" in content_type:
        import yaml

        return yaml.safe_load(raw) or {}
    return orjson.loads(raw)
