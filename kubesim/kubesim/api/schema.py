"""Structural OpenAPI v3 schemas of CustomResourceDefinitions: defaulting, pruning, validation.

``CompiledSchema`` turns a version's ``openAPIV3Schema`` into a tree of ``_Node`` objects once
(regexes compiled, CEL rules parsed, defaults and list keys precomputed) and then walks only
the object being written, so the cost follows the size of the object, not of the schema (the
Workload schema is ~1.4 MB of YAML).

Validation reproduces what kube-apiserver reports for custom resources:

1. OpenAPI value validation (kube-openapi): type, nullable, int-or-string, enum, pattern,
   format, min/max (exclusive), lengths, item and property counts, required;
2. ``x-kubernetes-list-type`` set/map uniqueness (FieldValueDuplicate);
3. ``x-kubernetes-validations`` CEL rules at their node, skipped (with the API server's
   "some validation rules were not checked" cause) when step 1 found a blocking error.

On update (``old`` given) unchanged subtrees are not re-validated (the API server's
validation ratcheting, on by default since 1.30) and transition rules get ``oldSelf``.

Causes are dicts ``{"reason", "message", "field"}`` worded as the API server words them
(see ``field_error``); ``message`` is the error body without the field path.
"""

from __future__ import annotations

import base64
import copy
import datetime
import json
import re
import uuid
from collections.abc import Callable

from kubesim.api import cel as _cel

_MISSING = _cel.MISSING

# -- field errors (k8s.io/apimachinery/pkg/util/validation/field) ---------------------------
_TYPE_WORDS = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueTooMany": "Too many",
    "FieldValueTooLong": "Too long",
    "FieldValueRequired": "Required value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueNotFound": "Not found",
    "InternalError": "Internal error",
}
_NO_VALUE = object()


def render_value(value) -> str:
    """A bad value as field.Error prints it (strings quoted, numbers bare, objects as JSON)."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def field_error(reason: str, field: str, value=_NO_VALUE, detail: str = "") -> dict:
    """One cause in the Status shape: {"reason", "message", "field"}."""
    words = _TYPE_WORDS.get(reason, "Invalid value")
    if (
        reason
        in (
            "FieldValueRequired",
            "FieldValueForbidden",
            "FieldValueTooLong",
            "InternalError",
        )
        or value is _NO_VALUE
    ):
        body = words
    else:
        body = f"{words}: {render_value(value)}"
    if detail:
        body = f"{body}: {detail}"
    return {"reason": reason, "message": body, "field": field}


def invalid(field: str, value, detail: str) -> dict:
    return field_error("FieldValueInvalid", field, value, detail)


def required(field: str, detail: str = "") -> dict:
    return field_error("FieldValueRequired", field, detail=detail)


def forbidden(field: str, detail: str) -> dict:
    return field_error("FieldValueForbidden", field, detail=detail)


def not_supported(field: str, value, supported: list) -> dict:
    shown = ", ".join(
        json.dumps(v, ensure_ascii=False) if isinstance(v, str) else render_value(v)
        for v in supported
    )
    return field_error("FieldValueNotSupported", field, value, f"supported values: {shown}")


def duplicate(field: str, value) -> dict:
    return field_error("FieldValueDuplicate", field, value)


def too_long(field: str, max_length: int) -> dict:
    unit = "byte" if max_length == 1 else "bytes"
    return field_error(
        "FieldValueTooLong", field, detail=f"may not be more than {max_length} {unit}"
    )


def too_many(field: str, actual: int, maximum: int) -> dict:
    unit = "item" if maximum == 1 else "items"
    return field_error("FieldValueTooMany", field, actual, f"must have at most {maximum} {unit}")


def format_path(segments) -> str:
    """Render path segments: str = field, int = list index, tuple ("key", k) = map key."""
    out = []
    for seg in segments:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif isinstance(seg, tuple):
            out.append(f"[{seg[1]}]")
        elif out:
            out.append("." + seg)
        else:
            out.append(seg)
    return "".join(out) if out else "<nil>"


# -- formats (the ones the API server checks for CRDs) --------------------------------------
_DATE_TIME_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:?\d{2})?$"
)
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HOSTNAME_RE = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
_MAC_RE = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+$")
_DURATION_RE = re.compile(r"^([+-]?(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h|d|w))+$")


def _valid_date_time(text: str) -> bool:
    if not _DATE_TIME_RE.match(text):
        return False
    try:
        datetime.date(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return 0 <= int(text[11:13]) < 24 and 0 <= int(text[14:16]) < 60


def _valid_date(text: str) -> bool:
    if not _DATE_RE.match(text):
        return False
    try:
        datetime.date(int(text[0:4]), int(text[5:7]), int(text[8:10]))
    except ValueError:
        return False
    return True


def _valid_ip(text: str, version: int | None = None) -> bool:
    import ipaddress

    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return version is None or address.version == version


def _valid_cidr(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return "/" in text


def _valid_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


def _valid_byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _valid_date_time,
    "datetime": _valid_date_time,
    "date": _valid_date,
    "hostname": lambda s: len(s) <= 255 and bool(_HOSTNAME_RE.match(s)),
    "ipv4": lambda s: _valid_ip(s, 4),
    "ipv6": lambda s: _valid_ip(s, 6),
    "cidr": _valid_cidr,
    "mac": lambda s: bool(_MAC_RE.match(s)),
    "uuid": _valid_uuid,
    "email": lambda s: bool(_EMAIL_RE.match(s)),
    "byte": _valid_byte,
    "duration": lambda s: bool(_DURATION_RE.match(s)),
    "uri": lambda s: ":" in s and " " not in s,
}


def _json_type(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type_ok(expected: str, value) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "string":
        return isinstance(value, str)
    if expected == "array":
        return isinstance(value, list)
    if expected == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if expected == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if expected == "number":
        return isinstance(value, (int, float))
    return True


def _number_text(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- the compiled tree -------------------------------------------------------------------
class _Node:
    __slots__ = (
        "additional",
        "all_of",
        "any_of",
        "checks",
        "default",
        "defaults_below",
        "embedded",
        "enum",
        "exclusive_maximum",
        "exclusive_minimum",
        "format",
        "has_default",
        "int_or_string",
        "items",
        "list_type",
        "map_keys",
        "max_items",
        "max_length",
        "max_properties",
        "maximum",
        "min_items",
        "min_length",
        "min_properties",
        "minimum",
        "multiple_of",
        "not_",
        "nullable",
        "one_of",
        "pattern",
        "pattern_text",
        "preserve_unknown",
        "properties",
        "required",
        "rules",
        "type",
        "unique_items",
    )


class CompiledSchema:
    """A CRD version's structural schema, compiled once and reused for every write."""

    def __init__(self, openapi_v3_schema: dict):
        self.source = openapi_v3_schema or {}
        self.unsupported_rules: list[dict] = []  # rules the CEL library cannot compile
        self.bad_patterns: list[str] = []
        self._memo: dict[int, _Node] = {}
        self.root = self._compile(self.source, ".")
        self._memo.clear()

    # -- compilation ------------------------------------------------------------------
    def _compile(self, schema: dict, where: str) -> _Node:
        memo = self._memo.get(id(schema))
        if memo is not None:
            return memo
        node = _Node()
        self._memo[id(schema)] = node
        get = schema.get
        node.type = get("type") or None
        node.nullable = bool(get("nullable"))
        node.int_or_string = bool(get("x-kubernetes-int-or-string"))
        node.preserve_unknown = bool(get("x-kubernetes-preserve-unknown-fields"))
        node.embedded = bool(get("x-kubernetes-embedded-resource"))
        props = get("properties")
        node.properties = (
            {name: self._compile(sub, f"{where}.{name}") for name, sub in props.items()}
            if isinstance(props, dict)
            else None
        )
        node.required = tuple(get("required") or ())
        additional = get("additionalProperties")
        if isinstance(additional, dict):
            node.additional = self._compile(additional, f"{where}[*]")
        else:
            node.additional = None
            if additional is True:  # any value allowed: keep unknown fields
                node.preserve_unknown = True
        items = get("items")
        node.items = self._compile(items, f"{where}[*]") if isinstance(items, dict) else None
        node.list_type = get("x-kubernetes-list-type")
        node.map_keys = tuple(get("x-kubernetes-list-map-keys") or ())
        node.enum = list(get("enum")) if get("enum") is not None else None
        node.pattern_text = get("pattern")
        node.pattern = None
        if node.pattern_text:
            try:
                node.pattern = re.compile(_go_regex(node.pattern_text))
            except re.error:
                self.bad_patterns.append(node.pattern_text)
        node.format = get("format") if get("format") in _FORMATS else None
        node.minimum = get("minimum")
        node.maximum = get("maximum")
        node.exclusive_minimum = bool(get("exclusiveMinimum"))
        node.exclusive_maximum = bool(get("exclusiveMaximum"))
        node.multiple_of = get("multipleOf")
        node.min_length = get("minLength")
        node.max_length = get("maxLength")
        node.min_items = get("minItems")
        node.max_items = get("maxItems")
        node.min_properties = get("minProperties")
        node.max_properties = get("maxProperties")
        node.unique_items = bool(get("uniqueItems"))
        rules = []
        for spec in get("x-kubernetes-validations") or ():
            compiled = _cel.compile_rule(spec)
            if compiled.compiled:
                rules.append(compiled)
            else:
                self.unsupported_rules.append(
                    {"path": where, "rule": compiled.rule, "error": compiled.error}
                )
        node.rules = tuple(rules)

        def branch(key):
            subs = get(key)
            return [self._compile(s, where) for s in subs] if isinstance(subs, list) else None

        any_of = branch("anyOf")
        if (
            node.int_or_string
            and any_of
            and all(sub.type in ("integer", "string") and not sub.properties for sub in any_of)
        ):
            any_of = None  # the usual int-or-string pair: the type check covers it
        node.any_of = any_of
        node.all_of = branch("allOf")
        node.one_of = branch("oneOf")
        node.not_ = self._compile(get("not"), where) if isinstance(get("not"), dict) else None
        node.has_default = "default" in schema
        node.default = schema.get("default")
        node.defaults_below = bool(
            any(p.has_default or p.defaults_below for p in (node.properties or {}).values())
            or (node.items is not None and (node.items.has_default or node.items.defaults_below))
            or (
                node.additional is not None
                and (node.additional.has_default or node.additional.defaults_below)
            )
            or any(p.nullable is False for p in (node.properties or {}).values())
        )
        node.checks = bool(
            node.enum is not None
            or node.pattern is not None
            or node.format
            or node.minimum is not None
            or node.maximum is not None
            or node.multiple_of is not None
            or node.min_length is not None
            or node.max_length is not None
            or node.min_items is not None
            or node.max_items is not None
            or node.min_properties is not None
            or node.max_properties is not None
            or node.unique_items
            or node.any_of
            or node.all_of
            or node.one_of
            or node.not_ is not None
        )
        return node

    # -- defaulting ---------------------------------------------------------------------
    def apply_defaults(self, obj: dict) -> None:
        """Apply schema defaults in place, as the API server does on create/update/read."""
        root = self.root
        if not isinstance(obj, dict) or not root.properties:
            return
        for name, sub in root.properties.items():
            if name in ("apiVersion", "kind", "metadata"):
                continue
            self._default_property(obj, name, sub)

    def _default_property(self, obj: dict, name: str, sub: _Node) -> None:
        if name not in obj:
            if sub.has_default:
                obj[name] = copy.deepcopy(sub.default)
            else:
                return
        elif obj[name] is None and not sub.nullable:
            # non-nullable nulls are dropped, or replaced by the default
            if sub.has_default:
                obj[name] = copy.deepcopy(sub.default)
            else:
                del obj[name]
                return
        self._default(sub, obj[name])

    def _default(self, node: _Node, value) -> None:
        if not node.defaults_below:
            return
        if isinstance(value, dict):
            if node.properties:
                for name, sub in node.properties.items():
                    self._default_property(value, name, sub)
            elif node.additional is not None:
                for key in list(value):
                    self._default_property(value, key, node.additional)
        elif isinstance(value, list) and node.items is not None:
            for item in value:
                self._default(node.items, item)

    # -- pruning ------------------------------------------------------------------------
    def prune(self, obj: dict) -> list[str]:
        """Drop fields the schema does not know, in place; returns the pruned paths.

        Top-level apiVersion, kind and metadata are never pruned.  (The list lets the
        server answer fieldValidation=Strict/Warn with 'unknown field "spec.x"'.)
        """
        pruned: list[str] = []
        if isinstance(obj, dict):
            self._prune(self.root, obj, [], pruned, top=True)
        return pruned

    def _prune(self, node: _Node, value, path: list, pruned: list, top: bool = False) -> None:
        if isinstance(value, dict):
            props = node.properties
            keep_meta = top or node.embedded
            if props is not None or (node.type == "object" and node.additional is None):
                props = props or {}
                for key in list(value):
                    sub = props.get(key)
                    if sub is None:
                        if keep_meta and key in ("apiVersion", "kind", "metadata"):
                            continue
                        if node.preserve_unknown:
                            continue
                        del value[key]
                        pruned.append(format_path([*path, key]))
                    elif not (top and key == "metadata"):
                        path.append(key)
                        self._prune(sub, value[key], path, pruned)
                        path.pop()
            elif node.additional is not None:
                for key, item in value.items():
                    path.append(("key", key))
                    self._prune(node.additional, item, path, pruned)
                    path.pop()
        elif isinstance(value, list) and node.items is not None:
            for index, item in enumerate(value):
                path.append(index)
                self._prune(node.items, item, path, pruned)
                path.pop()

    # -- validation ---------------------------------------------------------------------
    def validate(self, obj: dict, old: dict | None = None) -> list[dict]:
        """Validate a (defaulted, pruned) object; returns the causes, empty when valid.

        ``old`` is the stored object on update: unchanged subtrees are not re-checked and
        transition rules (those using oldSelf) run against it.
        """
        run = _Run()
        self._validate_root(obj, _MISSING if old is None else old, run)
        errors = run.errors + run.list_errors
        if run.rules:
            if run.blocking:
                errors.append(
                    invalid(
                        "<nil>",
                        None,
                        "some validation rules were not checked because the object was "
                        "invalid; correct the existing errors to complete validation",
                    )
                )
            else:
                for node, value, old_value, path in run.rules:
                    errors.extend(_rule_errors(node, value, old_value, path))
        return errors

    def _validate_root(self, obj, old, run: _Run) -> None:
        root = self.root
        if not isinstance(obj, dict):
            run.type_error([], "object", obj)
            return
        path: list = []
        props = root.properties or {}
        for name in root.required:
            if name not in obj and name not in ("apiVersion", "kind", "metadata"):
                run.errors.append(required(name))
                run.blocking = True
        for name, value in obj.items():
            if name in ("apiVersion", "kind"):
                continue
            sub = props.get(name)
            if name == "metadata":
                if sub is not None and sub.properties and isinstance(value, dict):
                    # CRDs may only constrain metadata.name / generateName
                    for field in ("name", "generateName"):
                        if field in value and field in sub.properties:
                            path[:] = ["metadata", field]
                            self._check(sub.properties[field], value[field], path, _MISSING, run)
                continue
            if sub is None:
                if root.additional is not None:
                    sub = root.additional
                else:
                    continue
            old_value = old.get(name, _MISSING) if isinstance(old, dict) else _MISSING
            path[:] = [name]
            self._check(sub, value, path, old_value, run)
        if root.rules:
            self._queue_rules(root, obj, old, [], run)

    def _queue_rules(self, node: _Node, value, old, path: list, run: _Run) -> None:
        run.rules.append((node, value, old, tuple(path)))

    def _check(self, node: _Node, value, path: list, old, run: _Run) -> None:
        if old is not _MISSING and value == old and type(value) is type(old):
            return  # ratcheting: an unchanged value is not re-validated
        if value is None:
            if node.nullable:
                return
            if node.type or node.int_or_string:
                run.type_error(path, node, value)
            return
        expected = node.type
        if node.int_or_string:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                run.type_error(path, node, value)
                return
        elif expected is not None and not _type_ok(expected, value):
            run.type_error(path, node, value)
            return
        if node.checks:
            self._value_checks(node, value, path, run)
        if isinstance(value, dict):
            props = node.properties
            if node.required:
                for name in node.required:
                    if name not in value:
                        run.errors.append(required(format_path([*path, name])))
                        run.blocking = True
            if props is not None:
                old_is_dict = isinstance(old, dict)
                for name, item in value.items():
                    sub = props.get(name)
                    if sub is None:
                        continue
                    path.append(name)
                    self._check(
                        sub, item, path, old.get(name, _MISSING) if old_is_dict else _MISSING, run
                    )
                    path.pop()
            elif node.additional is not None:
                old_is_dict = isinstance(old, dict)
                sub = node.additional
                for key, item in value.items():
                    path.append(("key", key))
                    self._check(
                        sub, item, path, old.get(key, _MISSING) if old_is_dict else _MISSING, run
                    )
                    path.pop()
        elif isinstance(value, list):
            if node.list_type in ("set", "map"):
                self._list_type_checks(node, value, path, run)
            sub = node.items
            if sub is not None:
                old_items = None
                if node.list_type == "map" and node.map_keys and isinstance(old, list):
                    old_items = {}
                    for item in old:
                        if isinstance(item, dict):
                            old_items[_map_key(item, node.map_keys)] = item
                for index, item in enumerate(value):
                    old_item = _MISSING
                    if old_items is not None and isinstance(item, dict):
                        old_item = old_items.get(_map_key(item, node.map_keys), _MISSING)
                    path.append(index)
                    self._check(sub, item, path, old_item, run)
                    path.pop()
        if node.rules:
            self._queue_rules(node, value, old, path, run)

    def _list_type_checks(self, node: _Node, value: list, path: list, run: _Run) -> None:
        seen = set()
        for index, item in enumerate(value):
            if node.list_type == "map" and node.map_keys:
                if not isinstance(item, dict):
                    continue
                key = _map_key(item, node.map_keys)
                shown = {k: item.get(k) for k in node.map_keys if k in item}
            else:
                key = json.dumps(item, sort_keys=True, separators=(",", ":"))
                shown = item
            if key in seen:
                run.list_errors.append(duplicate(format_path([*path, index]), shown))
            else:
                seen.add(key)

    def _value_checks(self, node: _Node, value, path: list, run: _Run) -> None:
        errors = run.errors

        def where() -> str:
            return format_path(path)

        if node.enum is not None and not _in_enum(value, node.enum):
            errors.append(not_supported(where(), value, node.enum))
            run.blocking = True
        if isinstance(value, str):
            if node.max_length is not None and len(value) > node.max_length:
                errors.append(too_long(where(), node.max_length))
                run.blocking = True
            if node.min_length is not None and len(value) < node.min_length:
                p = where()
                errors.append(
                    invalid(
                        p, value, f"{p} in body should be at least {node.min_length} chars long"
                    )
                )
            if node.pattern is not None and not node.pattern.search(value):
                p = where()
                errors.append(invalid(p, value, f"{p} in body should match '{node.pattern_text}'"))
            if node.format and not _FORMATS[node.format](value):
                p = where()
                errors.append(
                    field_error(
                        "FieldValueTypeInvalid",
                        p,
                        value,
                        f"{p} in body must be of type {node.format}: {json.dumps(value)}",
                    )
                )
                run.blocking = True
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if node.minimum is not None and (
                value < node.minimum or (node.exclusive_minimum and value == node.minimum)
            ):
                p = where()
                words = "greater than" if node.exclusive_minimum else "greater than or equal to"
                errors.append(
                    invalid(p, value, f"{p} in body should be {words} {_number_text(node.minimum)}")
                )
            if node.maximum is not None and (
                value > node.maximum or (node.exclusive_maximum and value == node.maximum)
            ):
                p = where()
                words = "less than" if node.exclusive_maximum else "less than or equal to"
                errors.append(
                    invalid(p, value, f"{p} in body should be {words} {_number_text(node.maximum)}")
                )
            if node.multiple_of:
                quotient = value / node.multiple_of
                if quotient != int(quotient):
                    p = where()
                    errors.append(
                        invalid(
                            p,
                            value,
                            f"{p} in body should be a multiple of {_number_text(node.multiple_of)}",
                        )
                    )
        elif isinstance(value, list):
            if node.max_items is not None and len(value) > node.max_items:
                errors.append(too_many(where(), len(value), node.max_items))
                run.blocking = True
            if node.min_items is not None and len(value) < node.min_items:
                p = where()
                errors.append(
                    invalid(
                        p, len(value), f"{p} in body should have at least {node.min_items} items"
                    )
                )
            if node.unique_items:
                seen = set()
                for item in value:
                    key = json.dumps(item, sort_keys=True)
                    if key in seen:
                        p = where()
                        errors.append(
                            invalid(p, value, f"{p} in body shouldn't contain duplicates")
                        )
                        break
                    seen.add(key)
        elif isinstance(value, dict):
            if node.max_properties is not None and len(value) > node.max_properties:
                errors.append(too_many(where(), len(value), node.max_properties))
                run.blocking = True
            if node.min_properties is not None and len(value) < node.min_properties:
                p = where()
                errors.append(
                    invalid(
                        p,
                        len(value),
                        f"{p} in body should have at least {node.min_properties} properties",
                    )
                )
        if node.all_of:
            for sub in node.all_of:
                self._check(sub, value, path, _MISSING, run)
        if node.any_of and not any(self._passes(sub, value, path) for sub in node.any_of):
            p = where()
            errors.append(
                invalid(p, value, f"{p} in body must validate at least one schema (anyOf)")
            )
        if node.one_of:
            passing = sum(1 for sub in node.one_of if self._passes(sub, value, path))
            if passing != 1:
                p = where()
                errors.append(
                    invalid(p, value, f"{p} in body must validate one and only one schema (oneOf)")
                )
        if node.not_ is not None and self._passes(node.not_, value, path):
            p = where()
            errors.append(invalid(p, value, f"{p} in body must not validate the schema (not)"))

    def _passes(self, node: _Node, value, path: list) -> bool:
        trial = _Run()
        self._check(node, value, list(path), _MISSING, trial)
        return not trial.errors and not trial.list_errors


_INLINE_FLAGS_RE = re.compile(r"\(\?([imsU]+)\)")


def _go_regex(pattern: str) -> str:
    """RE2 allows inline flags anywhere ("^(?i)[a-z]"); Python wants them scoped there."""
    match = _INLINE_FLAGS_RE.search(pattern)
    if match is None or match.start() == 0:
        return pattern
    flags = match.group(1).replace("U", "")
    rest = pattern[match.end() :]
    return (
        f"{pattern[: match.start()]}(?{flags}:{rest})" if flags else pattern[: match.start()] + rest
    )


def _in_enum(value, enum: list) -> bool:
    # JSON semantics: true is not 1, 1 and 1.0 are the same number
    for allowed in enum:
        if value == allowed and isinstance(value, bool) == isinstance(allowed, bool):
            return True
    return False


def _map_key(item: dict, keys: tuple) -> tuple:
    return tuple(json.dumps(item.get(k), sort_keys=True) for k in keys)


class _Run:
    """Errors and queued CEL rules of one validate() call."""

    __slots__ = ("blocking", "errors", "list_errors", "rules")

    def __init__(self):
        self.errors: list[dict] = []
        self.list_errors: list[dict] = []
        self.rules: list = []
        self.blocking = False

    def type_error(self, path: list, node, value) -> None:
        if isinstance(node, _Node):
            expected = "integer,string" if node.int_or_string else (node.type or "object")
        else:
            expected = node
        p = format_path(path)
        actual = _json_type(value)
        self.errors.append(
            field_error(
                "FieldValueTypeInvalid",
                p,
                actual,
                f"{p} in body must be of type {expected}: {json.dumps(actual)}",
            )
        )
        self.blocking = True


def _rule_path(path: tuple, field_path: str | None) -> str:
    segments = list(path)
    if field_path:
        # ".spec.x", ".a['b.c']" -> field names
        for part in re.findall(
            r"\.([A-Za-z0-9_$-]+)|\[['\"]([^'\"]+)['\"]\]|\[(\d+)\]", field_path
        ):
            if part[0] or part[1]:
                segments.append(part[0] or part[1])
            else:
                segments.append(int(part[2]))
    return format_path(segments)


def _rule_errors(node: _Node, value, old, path: tuple) -> list[dict]:
    errors = []
    node_type = node.type or ""
    for compiled, detail in _cel.check_rules(node.rules, value, old):
        field = _rule_path(path, compiled.field_path)
        reason = compiled.reason
        if reason == "FieldValueForbidden":
            errors.append(forbidden(field, detail))
        elif reason == "FieldValueRequired":
            errors.append(required(field, detail))
        elif reason == "FieldValueDuplicate":
            errors.append(duplicate(field, node_type))
        else:
            errors.append(invalid(field, node_type, detail))
    return errors
