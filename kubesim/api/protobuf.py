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
SCHEMAS: dict[tuple[str, str], dict] = {
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


def _message(raw: bytes, schema: dict) -> dict:
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
            obj[name] = int(value) if isinstance(value, int) else 0
        elif kind == "B":
            obj[name] = base64.b64encode(value).decode()
        elif kind == "rs":
            obj.setdefault(name, []).append(value.decode())
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
