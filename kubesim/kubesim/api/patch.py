"""Patch verbs of the simulated API server: JSON merge patch, JSON patch and strategic merge patch.

Pure functions over plain dicts in the Kubernetes JSON shape; no I/O. The server maps
`PatchError` to a Status object with `error.code` (400 for a malformed patch, 422 for one that
does not apply to the object), as kube-apiserver does.

Strategic merge patch follows k8s.io/apimachinery's strategicpatch package: the patch strategy
and merge key of each field come from the Go struct tags of the built-in types (tabulated below
for the fields that matter), lists without a merge strategy are replaced whole, maps are merged
recursively, and the directives `$patch`, `$retainKeys`, `$deleteFromPrimitiveList/<field>` and
`$setElementOrder/<field>` are honoured.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import jsonpointer

__all__ = [
    "STRATEGIC_UNSUPPORTED_MESSAGE",
    "PatchError",
    "json_merge_patch",
    "json_patch",
    "strategic_merge_patch",
    "strategic_supported",
]


class PatchError(ValueError):
    """A patch that cannot be applied. `code` is the HTTP status kube-apiserver answers with."""

    def __init__(self, message: str, code: int = 422):
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = "BadRequest" if code == 400 else "Invalid"

    def __str__(self) -> str:
        return self.message


# The 415 answer kube-apiserver gives to a strategic merge patch of a custom resource.
STRATEGIC_UNSUPPORTED_MESSAGE = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)

# API groups compiled into kube-apiserver: strategic merge patch works for their kinds only.
_BUILTIN_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)


def api_group(api_version: str) -> str:
    """ "apps/v1" -> "apps"; "v1" -> "" (the core group)."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def strategic_supported(api_version: str, kind: str) -> bool:
    """True for built-in kinds; custom resources answer 415 to strategic merge patch."""
    return api_group(api_version or "") in _BUILTIN_GROUPS and bool(kind)


# --------------------------------------------------------------------------- JSON merge patch


def json_merge_patch(original: dict, patch: Any) -> dict:
    """RFC 7386: objects merge recursively, null deletes a member, anything else replaces."""
    if not isinstance(patch, dict):
        raise PatchError("a merge patch must be a JSON object", code=400)
    result = _merge_patch_value(copy.deepcopy(original), patch)
    return result


def _merge_patch_value(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge_patch_value(target.get(key), value)
    return target


# --------------------------------------------------------------------------- JSON patch

_JSON_PATCH_OPS = ("add", "remove", "replace", "move", "copy", "test")


def json_patch(original: dict, ops: Any) -> dict:
    """RFC 6902. A malformed operation list answers 400, an operation that fails 422."""
    if not isinstance(ops, list):
        raise PatchError(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch", code=400
        )
    for op in ops:
        if not isinstance(op, dict):
            raise PatchError("each JSON patch operation must be an object", code=400)
        name = op.get("op")
        if name not in _JSON_PATCH_OPS:
            raise PatchError(f"Unexpected kind: {name}", code=400)
        if not isinstance(op.get("path"), str):
            raise PatchError(f"{name} operation is missing the path", code=400)
        if name in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"{name} operation is missing the value", code=400)
        if name in ("move", "copy") and not isinstance(op.get("from"), str):
            raise PatchError(f"{name} operation is missing from", code=400)
    doc = copy.deepcopy(original)
    for op in ops:
        try:
            doc = jsonpatch.JsonPatch([op]).apply(doc, in_place=True)
        except jsonpatch.JsonPatchTestFailed:
            raise PatchError(f"testing value {op['path']} failed: test failed") from None
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            # Worded as kube-apiserver's json-patch library words it (never echo the document).
            where = op.get("from") if op["op"] in ("move", "copy") else op["path"]
            text = str(exc)
            why = (
                "invalid index referenced"
                if "list" in text or "index" in text.lower()
                else "missing value"
            )
            raise PatchError(
                f'{op["op"]} operation does not apply: doc is missing path: "{where}": {why}'
            ) from None
    if not isinstance(doc, dict):
        raise PatchError("the patched document is not a JSON object", code=400)
    return doc


# --------------------------------------------------------------------------- strategic merge


@dataclass(frozen=True)
class _Field:
    """Patch metadata of one struct field, as its Go struct tag gives it."""

    strategy: str | None = None  # "merge" | "replace" | None (maps merge, lists are replaced)
    merge_key: str | None = None
    item: dict[str, _Field] = field(default_factory=dict)  # fields of the element/value type


def _merge_list(key: str | None = None, item: dict[str, _Field] | None = None) -> _Field:
    return _Field("merge", key, item or {})


def _struct(fields: dict[str, _Field]) -> _Field:
    return _Field(None, None, fields)


_OBJECT_META = {
    "ownerReferences": _merge_list("uid"),
    "finalizers": _merge_list(),  # primitive list with merge strategy: a set
}
_CONTAINER = {
    "env": _merge_list("name"),
    "ports": _merge_list("containerPort"),
    "volumeMounts": _merge_list("mountPath"),
    "volumeDevices": _merge_list("devicePath"),
    # envFrom, args, command, resizePolicy: no strategy, replaced whole
}
_POD_SPEC = {
    "containers": _merge_list("name", _CONTAINER),
    "initContainers": _merge_list("name", _CONTAINER),
    "ephemeralContainers": _merge_list("name", _CONTAINER),
    "volumes": _merge_list("name"),  # merge,retainKeys
    "imagePullSecrets": _merge_list("name"),
    "hostAliases": _merge_list("ip"),
    "topologySpreadConstraints": _merge_list("topologyKey"),
    "schedulingGates": _merge_list("name"),
    "resourceClaims": _merge_list("name"),
    # tolerations, readinessGates: no patch strategy in k8s, replaced whole
}
_POD_STATUS = {
    "conditions": _merge_list("type"),
    "podIPs": _merge_list("ip"),
    "hostIPs": _merge_list("ip"),
    "resourceClaimStatuses": _merge_list("name"),
}
_CONDITIONS_STATUS = {"conditions": _merge_list("type")}
_POD_TEMPLATE = {"metadata": _struct(_OBJECT_META), "spec": _struct(_POD_SPEC)}
_WORKLOAD = {
    "spec": _struct({"template": _struct(_POD_TEMPLATE)}),
    "status": _struct(_CONDITIONS_STATUS),
}

# Top-level field tables per (group, kind); every kind also gets `metadata`.
_KINDS: dict[tuple[str, str], dict[str, _Field]] = {
    ("", "Pod"): {"spec": _struct(_POD_SPEC), "status": _struct(_POD_STATUS)},
    ("", "PodTemplate"): {"template": _struct(_POD_TEMPLATE)},
    ("", "ReplicationController"): _WORKLOAD,
    ("apps", "Deployment"): _WORKLOAD,
    ("apps", "ReplicaSet"): _WORKLOAD,
    ("apps", "StatefulSet"): _WORKLOAD,
    ("apps", "DaemonSet"): _WORKLOAD,
    ("batch", "Job"): _WORKLOAD,
    ("batch", "CronJob"): {
        "spec": _struct({"jobTemplate": _struct({"spec": _struct(_WORKLOAD["spec"].item)})}),
    },
    ("", "Node"): {
        # spec.taints has no patch strategy: replaced whole
        "status": _struct({"conditions": _merge_list("type"), "addresses": _merge_list("type")}),
    },
    ("", "Namespace"): {"status": _struct(_CONDITIONS_STATUS)},
    ("", "Service"): {
        "spec": _struct({"ports": _merge_list("port")}),
        "status": _struct(_CONDITIONS_STATUS),
    },
    ("", "ServiceAccount"): {"secrets": _merge_list("name")},
}


def _kind_fields(obj: dict) -> dict[str, _Field]:
    group = api_group(str(obj.get("apiVersion") or ""))
    fields = dict(_KINDS.get((group, str(obj.get("kind") or "")), {}))
    fields["metadata"] = _struct(_OBJECT_META)
    return fields


_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PREFIX = "$deleteFromPrimitiveList/"
_ORDER_PREFIX = "$setElementOrder/"


def strategic_merge_patch(original: dict, patch: Any) -> dict:
    """Apply a strategic merge patch to a built-in object (kind taken from `original`)."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object", code=400)
    fields = _kind_fields(original if original.get("kind") else patch)
    result = _smp_map(copy.deepcopy(original), copy.deepcopy(patch), fields)
    return result


def _smp_map(original: dict | None, patch: dict, fields: dict[str, _Field]) -> dict:
    if _DIRECTIVE in patch:
        directive = patch.pop(_DIRECTIVE)
        if directive == "replace":
            return _strip_directives(patch)
        if directive == "delete":
            return {}
        if directive != "merge":  # "merge" is the default; accepted as an explicit no-op
            raise PatchError(f"Unknown patch type: {directive} in map: {patch}", code=400)
    if original is None:
        original = {}

    if _RETAIN_KEYS in patch:
        retain = patch.pop(_RETAIN_KEYS)
        if not isinstance(retain, list):
            raise PatchError("invalid patch format of retainKeys", code=400)
        for key, value in patch.items():
            if value is None or key.startswith((_DELETE_PREFIX, _ORDER_PREFIX)):
                continue
            if key not in retain:
                raise PatchError("invalid patch format of retainKeys", code=400)
        for key in list(original):
            if key not in retain:
                del original[key]

    # $setElementOrder lists: merge the list they order now, then impose the order.
    for key in [k for k in patch if k.startswith(_ORDER_PREFIX)]:
        order = patch.pop(key)
        name = key[len(_ORDER_PREFIX) :]
        if not isinstance(order, list):
            raise PatchError("invalid patch format of setElementOrder list", code=400)
        meta = fields.get(name, _Field())
        if name in patch:
            patch_list = patch.pop(name)
            if not isinstance(patch_list, list):
                raise PatchError(f"{name}: a list was expected", code=400)
            if isinstance(original.get(name), list):
                merged = _smp_list(original[name], patch_list, meta, order=order)
            else:
                merged = _smp_list([], patch_list, meta, order=order)
        elif isinstance(original.get(name), list):
            merged = _smp_list(original[name], [], meta, order=order)
        else:
            continue
        original[name] = merged

    # $deleteFromPrimitiveList before additions, so a value both removed and added ends up added.
    for key in [k for k in patch if k.startswith(_DELETE_PREFIX)]:
        to_delete = patch.pop(key)
        name = key[len(_DELETE_PREFIX) :]
        if not isinstance(to_delete, list):
            raise PatchError("invalid patch format of primitive list", code=400)
        if isinstance(original.get(name), list):
            original[name] = [v for v in original[name] if v not in to_delete]

    for key, value in patch.items():
        if value is None:
            original.pop(key, None)
            continue
        meta = fields.get(key, _Field())
        current = original.get(key)
        if key not in original:
            # Not in the original: take the patch value (directives are resolved, not stored).
            if isinstance(value, dict):
                original[key] = _smp_value_into_empty(value, meta)
            elif isinstance(value, list):
                original[key] = _smp_list([], value, meta)
            else:
                original[key] = value
            continue
        if isinstance(current, dict) and isinstance(value, dict):
            if meta.strategy == "replace":
                original[key] = _strip_directives(value)
            else:
                original[key] = _smp_map(current, value, meta.item)
        elif isinstance(current, list) and isinstance(value, list):
            original[key] = _smp_list(current, value, meta)
        else:
            original[key] = _strip_directives(value)
    return original


def _smp_value_into_empty(value: dict, meta: _Field) -> dict:
    result = _smp_map({}, value, meta.item)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not (
                k in (_DIRECTIVE, _RETAIN_KEYS) or k.startswith((_DELETE_PREFIX, _ORDER_PREFIX))
            )
        }
    if isinstance(value, list):
        return [
            _strip_directives(v) for v in value if not (isinstance(v, dict) and _DIRECTIVE in v)
        ]
    return value


def _smp_list(original: list, patch: list, meta: _Field, order: list | None = None) -> list:
    if meta.strategy != "merge":
        return _strip_directives(patch)
    if any(isinstance(v, list) for v in [*original, *patch]):
        raise PatchError("lists of lists are not supported")
    is_maps = any(isinstance(v, dict) for v in [*original, *patch])
    if not is_maps:
        merged: list = []
        for value in [*original, *patch]:
            if value not in merged:
                merged.append(value)
        return _normalize_order(merged, order if order is not None else patch, original, None)
    key = meta.merge_key
    if not key:
        raise PatchError("cannot merge lists without merge key")
    for item in [*original, *patch]:
        if not isinstance(item, dict):
            raise PatchError(f"list element {item!r} is not a map", code=400)
    merged = [copy.deepcopy(v) for v in original]
    plain: list[dict] = []
    replace = False
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            if key not in item:
                raise PatchError(f"map: {_go_map(item)} does not contain declared merge key: {key}")
            merged = [v for v in merged if v.get(key) != item[key]]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise PatchError("merging lists cannot yet be specified in the patch", code=400)
        else:
            raise PatchError(f"Unknown patch type: {directive} in map: {item}", code=400)
    if replace:
        return [_strip_directives(v) for v in plain]
    for item in plain:
        if key not in item:
            raise PatchError(f"map: {_go_map(item)} does not contain declared merge key: {key}")
        for index, existing in enumerate(merged):
            if existing.get(key) == item[key]:
                merged[index] = _smp_map(existing, item, meta.item)
                break
        else:
            merged.append(_smp_map({}, item, meta.item))
    order_ref = order if order is not None else plain
    for item in order_ref:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}", code=400)
    return _normalize_order(merged, order_ref, original, key)


def _normalize_order(merged: list, patch_order: list, server_order: list, key: str | None) -> list:
    """Order as strategicpatch does: patch items in patch order, server-only items in live order,
    interleaved so that a server-only item goes before a patch item it preceded in the live list."""

    def ident(item: Any) -> Any:
        return item.get(key) if key is not None and isinstance(item, dict) else item

    def position(items: list, item: Any) -> int:
        target = ident(item)
        for index, candidate in enumerate(items):
            if ident(candidate) == target:
                return index
        return -1

    in_patch = [v for v in merged if position(patch_order, v) >= 0]
    server_only = [v for v in merged if position(patch_order, v) < 0]
    in_patch.sort(key=lambda v: position(patch_order, v))
    server_only.sort(
        key=lambda v: position(server_order, v) if position(server_order, v) >= 0 else len(merged)
    )
    result = []
    i = j = 0
    while i < len(server_only) or j < len(in_patch):
        if j >= len(in_patch):
            result.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            result.append(in_patch[j])
            j += 1
        else:
            left = position(server_order, server_only[i])
            right = position(server_order, in_patch[j])
            if left >= 0 and right >= 0 and left < right:
                result.append(server_only[i])
                i += 1
            else:
                result.append(in_patch[j])
                j += 1
    return result


def _go_map(item: dict) -> str:
    """Go's fmt rendering of a map, as the apimachinery error messages print it."""
    inner = " ".join(f"{k}:{v}" for k, v in sorted(item.items()))
    return f"map[{inner}]"
