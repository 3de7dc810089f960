"""Server-side apply and managedFields, as kube-apiserver computes them (structured-merge-diff).

Pure functions over plain dicts; no I/O. The model, simplified but faithful on what clients see:

- A *field set* is a set of paths; each path is a tuple of path elements written as in
  `metadata.managedFields[].fieldsV1`: `f:<field or map key>`, `k:{"name":"x"}` (an item of an
  associative list, keyed by its list-map keys), `v:<json>` (a member of a set list), `i:<n>`.
- Apply: the applier owns exactly the fields of its applied configuration (leaves, list items,
  set members, atomic lists and maps); the configuration is merged into the live object (maps
  recursively, associative lists per key, sets as unions, atomic lists replaced); fields the
  applier owned before but left out now are removed unless another manager owns them; a field
  the applier changes that another manager owns is a conflict unless `force`, which moves the
  ownership to the applier.
- Update (create, update, patch): the manager owns what it changed; the others lose it.

Which lists are associative comes from `list_map_keys(path)` (the CRD's
x-kubernetes-list-type/-list-map-keys, or `builtin_list_map_keys` for built-in kinds), where
`path` is the tuple of field names from the object root, list items transparent:
("spec", "template", "spec", "containers", "env"). It answers a list of key field names for a
map list, `[]` for a set, and None (or "atomic") for an atomic list; for a map-typed field
"atomic" means x-kubernetes-map-type: atomic. metadata.finalizers (set) and
metadata.ownerReferences (map by uid) are handled here for every kind.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

from kubesim.api.patch import PatchError, api_group, strategic_supported

__all__ = [
    "ApplyConflict",
    "ListMapKeys",
    "builtin_list_map_keys",
    "field_path_string",
    "fields_v1_to_paths",
    "paths_to_fields_v1",
    "schema_list_map_keys",
    "semantically_equal",
    "server_side_apply",
    "update_managed_fields",
]

Path = tuple[str, ...]
ListMapKeys = Callable[[tuple], "list[str] | str | None"]

# Fields the field manager never tracks (k8s fieldmanager's stripMeta set).
_STRIPPED_METADATA = (
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
)

# --------------------------------------------------------------------------- conflicts


class ApplyConflict(Exception):
    """Apply changed fields another manager owns (HTTP 409, reason Conflict)."""

    def __init__(self, conflicts: list[tuple[dict, Path]]):
        # conflicts: (manager entry identity, path) pairs, in kube-apiserver's order.
        self._items = conflicts
        self.conflicts: list[tuple[str, str]] = [
            (identity["manager"], field_path_string(path)) for identity, path in conflicts
        ]
        super().__init__(self.message())

    def message(self) -> str:
        items = self._items
        if len(items) == 1:
            identity, path = items[0]
            return (
                f"Apply failed with 1 conflict: conflict with {_print_manager(identity)}: "
                f"{field_path_string(path)}"
            )
        by_manager: dict[str, list[Path]] = {}
        printed: dict[str, str] = {}
        for identity, path in items:
            ident = _identity_json(identity)
            by_manager.setdefault(ident, []).append(path)
            printed[ident] = _print_manager(identity)
        lines = []
        for ident in sorted(by_manager):
            lines.append(f"conflicts with {printed[ident]}:")
            lines.extend(f"- {field_path_string(path)}" for path in by_manager[ident])
        return f"Apply failed with {len(items)} conflicts: " + "\n".join(lines)

    def causes(self) -> list[dict]:
        """The Status details.causes kube-apiserver sends with the 409."""
        return [
            {
                "reason": "FieldManagerConflict",
                "message": f"conflict with {_print_manager(identity)}",
                "field": field_path_string(path),
            }
            for identity, path in self._items
        ]


def _identity(entry: dict) -> dict:
    """The part of a managedFields entry that names its manager (time and fields excluded;
    appliers are one manager whatever apiVersion they apply with)."""
    ident = {"manager": entry.get("manager", ""), "operation": entry.get("operation", "")}
    if entry.get("operation") != "Apply":
        ident["apiVersion"] = entry.get("apiVersion", "")
    if entry.get("subresource"):
        ident["subresource"] = entry["subresource"]
    return ident


def _identity_json(identity: dict) -> str:
    return json.dumps(identity, separators=(",", ":"))


def _identity_key(entry: dict) -> tuple:
    ident = _identity(entry)
    return (
        ident["manager"],
        ident["operation"],
        ident.get("apiVersion", ""),
        ident.get("subresource", ""),
    )


def _print_manager(identity: dict) -> str:
    text = json.dumps(identity.get("manager", ""))
    if identity.get("subresource"):
        text = f"{text} with subresource {json.dumps(identity['subresource'])}"
    if identity.get("operation") == "Update":
        text = f"{text} using {identity.get('apiVersion', '')}"
    return text


# --------------------------------------------------------------------------- paths


def _field_pe(name: str) -> str:
    return "f:" + name


def _value_pe(value: Any) -> str:
    return "v:" + json.dumps(value, separators=(",", ":"), sort_keys=True)


def field_path_string(path: Iterable[str]) -> str:
    """Render a path as structured-merge-diff does: .spec.containers[name="a"].image."""
    out = []
    for pe in path:
        tag, text = pe[:1], pe[2:]
        if tag == "f":
            out.append("." + text)
        elif tag == "k":
            key = json.loads(text)
            out.append(
                "["
                + ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in key.items())
                + "]"
            )
        elif tag == "v":
            out.append("[=" + text + "]")
        else:
            out.append("[" + text + "]")
    return "".join(out)


_PE_RANK = {"f": 0, "k": 1, "v": 2, "i": 3}


def _path_sort_key(path: Path) -> tuple:
    return tuple((_PE_RANK.get(pe[:1], 4), pe[2:]) for pe in path)


def paths_to_fields_v1(paths: Iterable[Path]) -> dict:
    """Encode a field set in the FieldsV1 format (`.` marks a node that is itself a member)."""
    members = set(paths)
    root: dict = {}
    for path in sorted(members, key=_path_sort_key):
        node = root
        for pe in path:
            node = node.setdefault(pe, {})

    def finish(node: dict, prefix: Path) -> dict:
        out: dict = {}
        if node and prefix in members:
            out["."] = {}
        for pe in sorted(node, key=lambda p: (_PE_RANK.get(p[:1], 4), p[2:])):
            out[pe] = finish(node[pe], (*prefix, pe))
        return out

    return finish(root, ())


def fields_v1_to_paths(fields: dict | None) -> set[Path]:
    out: set[Path] = set()

    def walk(node: dict, prefix: Path) -> None:
        for pe, child in node.items():
            if pe == ".":
                out.add(prefix)
                continue
            path = (*prefix, pe)
            if isinstance(child, dict) and child:
                walk(child, path)
            else:
                out.add(path)

    if isinstance(fields, dict):
        walk(fields, ())
    return out


# --------------------------------------------------------------------------- built-in list types

_CONTAINER_LISTS: dict[tuple, Any] = {
    ("env",): ["name"],
    # the key selectors of env sources are +structType=atomic
    ("env", "valueFrom", "configMapKeyRef"): "atomic",
    ("env", "valueFrom", "secretKeyRef"): "atomic",
    ("env", "valueFrom", "fieldRef"): "atomic",
    ("env", "valueFrom", "resourceFieldRef"): "atomic",
    ("ports",): ["containerPort", "protocol"],
    ("volumeMounts",): ["mountPath"],
    ("volumeDevices",): ["devicePath"],
}
_POD_SPEC_LISTS: dict[tuple, Any] = {
    ("volumes",): ["name"],
    ("imagePullSecrets",): ["name"],
    ("hostAliases",): ["ip"],
    ("topologySpreadConstraints",): ["topologyKey", "whenUnsatisfiable"],
    ("schedulingGates",): ["name"],
    ("resourceClaims",): ["name"],
    # tolerations, readinessGates, args, command, envFrom: atomic
    ("nodeSelector",): "atomic",  # +mapType=atomic
    ("topologySpreadConstraints", "labelSelector"): "atomic",
}
for _containers in ("containers", "initContainers", "ephemeralContainers"):
    _POD_SPEC_LISTS[(_containers,)] = ["name"]
    for _sub, _keys in _CONTAINER_LISTS.items():
        _POD_SPEC_LISTS[(_containers, *_sub)] = _keys

_POD_STATUS_LISTS = {
    ("conditions",): ["type"],
    ("podIPs",): ["ip"],
    ("hostIPs",): ["ip"],
    ("resourceClaimStatuses",): ["name"],
}


def _prefixed(prefix: tuple, table: dict) -> dict:
    return {(*prefix, *path): keys for path, keys in table.items()}


def _workload_lists(template_prefix: tuple, *, conditions: Any = ("type",)) -> dict:
    table = _prefixed((*template_prefix, "spec"), _POD_SPEC_LISTS)
    table[("status", "conditions")] = list(conditions) if conditions else None
    table[("spec", "selector")] = "atomic"  # metav1.LabelSelector is +structType=atomic
    return table


_BUILTIN_LISTS: dict[tuple[str, str], dict[tuple, Any]] = {
    ("", "Pod"): {
        **_prefixed(("spec",), _POD_SPEC_LISTS),
        **_prefixed(("status",), _POD_STATUS_LISTS),
    },
    ("", "PodTemplate"): _prefixed(("template", "spec"), _POD_SPEC_LISTS),
    ("", "ReplicationController"): _workload_lists(("spec", "template")),
    ("apps", "Deployment"): _workload_lists(("spec", "template")),
    ("apps", "ReplicaSet"): _workload_lists(("spec", "template")),
    ("apps", "StatefulSet"): _workload_lists(("spec", "template")),
    ("apps", "DaemonSet"): _workload_lists(("spec", "template")),
    # Job status conditions are +listType=atomic in batch/v1.
    ("batch", "Job"): _workload_lists(("spec", "template"), conditions=None),
    ("batch", "CronJob"): {
        **_prefixed(("spec", "jobTemplate", "spec", "template", "spec"), _POD_SPEC_LISTS),
        ("spec", "jobTemplate", "spec", "selector"): "atomic",
    },
    ("", "Node"): {
        ("status", "conditions"): ["type"],
        ("status", "addresses"): ["type"],
        # spec.taints, status.images: atomic
    },
    ("", "Namespace"): {("status", "conditions"): ["type"]},
    ("", "Service"): {
        ("spec", "ports"): ["port", "protocol"],
        ("spec", "selector"): "atomic",
        ("status", "conditions"): ["type"],
    },
    ("", "ServiceAccount"): {("secrets",): ["name"]},
}

# Key fields with a schema default, used when an item omits them (ports are keyed with TCP).
_KEY_DEFAULTS = {("ports", "protocol"): "TCP"}


def builtin_list_map_keys(api_version: str, kind: str) -> ListMapKeys:
    """The list types of a built-in kind (as its OpenAPI x-kubernetes-list-type says)."""
    table = _BUILTIN_LISTS.get((api_group(api_version or ""), kind or ""), {})

    def lookup(path: tuple) -> list[str] | str | None:
        return table.get(tuple(path))

    return lookup


def schema_list_map_keys(schema: dict | None) -> ListMapKeys:
    """list_map_keys for a CRD version from its openAPIV3Schema (x-kubernetes-list-type,
    x-kubernetes-list-map-keys, x-kubernetes-map-type); lists without a list type are atomic."""
    cache: dict[tuple, Any] = {}

    def through_items(node: dict) -> dict:
        while isinstance(node, dict) and node.get("type") == "array":
            node = node.get("items") or {}
        return node

    def lookup(path: tuple) -> list[str] | str | None:
        path = tuple(path)
        if path in cache:
            return cache[path]
        node: Any = schema or {}
        for name in path:
            node = through_items(node)
            props = node.get("properties") or {}
            if name in props:
                node = props[name]
            elif isinstance(node.get("additionalProperties"), dict):
                node = node["additionalProperties"]
            else:
                node = None
                break
        result: list[str] | str | None = None
        if isinstance(node, dict):
            if node.get("type") == "array":
                list_type = node.get("x-kubernetes-list-type")
                if list_type == "map":
                    result = list(node.get("x-kubernetes-list-map-keys") or [])
                elif list_type == "set":
                    result = []
            elif node.get("x-kubernetes-map-type") == "atomic":
                result = "atomic"
        cache[path] = result
        return result

    return lookup


class _Types:
    """Resolves list and map types at a field path (list items transparent)."""

    def __init__(self, api_version: str, kind: str, list_map_keys: ListMapKeys | None):
        self._lookup = list_map_keys or builtin_list_map_keys(api_version, kind)
        self._builtin = strategic_supported(api_version, kind)
        self._cache: dict[tuple, Any] = {}

    def _raw(self, spath: tuple) -> Any:
        if spath not in self._cache:
            if spath == ("metadata", "finalizers"):
                result: Any = []
            elif spath == ("metadata", "ownerReferences"):
                result = ["uid"]
            elif spath[:1] == ("metadata",):
                result = None
            else:
                result = self._lookup(spath)
            self._cache[spath] = result
        return self._cache[spath]

    def list_kind(self, spath: tuple) -> tuple[str, list[str]]:
        raw = self._raw(spath)
        if raw is None or isinstance(raw, str):
            return "atomic", []
        if not raw:
            return "set", []
        return "map", list(raw)

    def map_atomic(self, spath: tuple) -> bool:
        return bool(spath) and self._raw(spath) == "atomic"

    def item_atomic(self, spath: tuple) -> bool:
        """Items of this associative list are atomic structs (OwnerReference,
        LocalObjectReference): owned and replaced whole."""
        return spath == ("metadata", "ownerReferences") or (
            self._builtin and spath[-1:] == ("imagePullSecrets",)
        )

    def item_key(self, item: Any, keys: list[str], spath: tuple, index: int) -> str:
        if not isinstance(item, dict):
            raise PatchError(
                f".{'.'.join(spath)}: element {index}: associative list with keys has an "
                "element that is not a map"
            )
        key = {}
        for name in sorted(keys):
            if name in item and item[name] is not None:
                key[name] = item[name]
            elif (spath[-1], name) in _KEY_DEFAULTS:
                key[name] = _KEY_DEFAULTS[(spath[-1], name)]
            elif len(keys) == 1:
                raise PatchError(
                    f".{'.'.join(spath)}: element {index}: associative list with keys has an "
                    f'element that omits key field "{name}" (and doesn\'t have default value)'
                )
        return "k:" + json.dumps(key, separators=(",", ":"), sort_keys=True)

    def index(self, items: list, keys: list[str], spath: tuple) -> list[tuple[str, Any]]:
        """Key the items of an applied list; duplicate keys are rejected as kube-apiserver does."""
        out = []
        seen: set[str] = set()
        for i, item in enumerate(items):
            pe = self.item_key(item, keys, spath, i)
            if pe in seen:
                raise PatchError(
                    f".{'.'.join(spath)}: duplicate entries for key {field_path_string([pe])}"
                )
            seen.add(pe)
            out.append((pe, item))
        return out


# --------------------------------------------------------------------------- field sets


def _eq(a: Any, b: Any) -> bool:
    """JSON equality (True is not 1, 1 is 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_eq, a, b))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _applied_set(
    value: Any, path: Path, spath: tuple, types: _Types, out: set[Path], *, strict: bool = True
) -> None:
    """The fields a configuration sets (structured-merge-diff ToFieldSet). `strict` rejects
    malformed associative lists (applied configurations); live objects are read tolerantly."""
    if isinstance(value, dict):
        if not value or types.map_atomic(spath):
            out.add(path)
            return
        for key, child in value.items():
            _applied_set(child, (*path, _field_pe(key)), (*spath, key), types, out, strict=strict)
    elif isinstance(value, list):
        kind, keys = types.list_kind(spath)
        if kind == "atomic" or not value:
            out.add(path)
        elif kind == "set":
            out.update((*path, _value_pe(v)) for v in value)
        else:
            indexed = (
                types.index(value, keys, spath)
                if strict
                else _tolerant_index(value, keys, spath, types)
            )
            item_atomic = types.item_atomic(spath)
            for pe, item in indexed:
                item_path = (*path, pe)
                out.add(item_path)
                if isinstance(item, dict) and not item_atomic:
                    for key, child in item.items():
                        _applied_set(
                            child,
                            (*item_path, _field_pe(key)),
                            (*spath, key),
                            types,
                            out,
                            strict=strict,
                        )
    else:
        out.add(path)


def _subtree_set(value: Any, path: Path, spath: tuple, types: _Types, out: set[Path]) -> None:
    """Every node of a value (what an added or removed subtree contributes to a comparison)."""
    if path:
        out.add(path)
    if isinstance(value, dict):
        if types.map_atomic(spath):
            return
        for key, child in value.items():
            _subtree_set(child, (*path, _field_pe(key)), (*spath, key), types, out)
    elif isinstance(value, list):
        kind, keys = types.list_kind(spath)
        if kind == "set":
            out.update((*path, _value_pe(v)) for v in value)
        elif kind == "map":
            for pe, item in _tolerant_index(value, keys, spath, types):
                if types.item_atomic(spath):
                    out.add((*path, pe))
                else:
                    _subtree_set(item, (*path, pe), spath, types, out)


def _tolerant_index(items: list, keys: list[str], spath: tuple, types: _Types) -> list:
    """Index a live list. Live data is never rejected: an item without usable keys is kept,
    addressed by its position."""
    out = []
    for i, item in enumerate(items):
        try:
            out.append((types.item_key(item, keys, spath, i), item))
        except PatchError:
            out.append((f"i:{i}", item))
    return out


class _Comparison:
    def __init__(self) -> None:
        self.added: set[Path] = set()
        self.modified: set[Path] = set()
        self.removed: set[Path] = set()

    def changed(self) -> set[Path]:
        return self.added | self.modified

    def empty(self) -> bool:
        return not (self.added or self.modified or self.removed)


def _compare(old: Any, new: Any, types: _Types) -> _Comparison:
    result = _Comparison()
    _compare_into(old, new, (), (), types, result)
    result.removed -= result.added
    for tracked in (result.added, result.modified, result.removed):
        tracked.discard(("f:metadata",))  # metadata itself is never tracked, only its fields
    return result


def _compare_into(
    old: Any, new: Any, path: Path, spath: tuple, types: _Types, c: _Comparison
) -> None:
    if isinstance(old, dict) and isinstance(new, dict) and not types.map_atomic(spath):
        for key, child in new.items():
            child_path = (*path, _field_pe(key))
            if key in old:
                _compare_into(old[key], child, child_path, (*spath, key), types, c)
            else:
                _subtree_set(child, child_path, (*spath, key), types, c.added)
        for key, child in old.items():
            if key not in new:
                _subtree_set(child, (*path, _field_pe(key)), (*spath, key), types, c.removed)
        return
    if isinstance(old, list) and isinstance(new, list):
        kind, keys = types.list_kind(spath)
        if kind == "atomic":
            if not _eq(old, new):
                c.modified.add(path)
            return
        if kind == "set":
            old_members = {_value_pe(v) for v in old}
            new_members = {_value_pe(v) for v in new}
            c.added.update((*path, pe) for pe in new_members - old_members)
            c.removed.update((*path, pe) for pe in old_members - new_members)
            return
        old_items = dict(reversed(_tolerant_index(old, keys, spath, types)))
        new_items = dict(reversed(_tolerant_index(new, keys, spath, types)))
        for pe, item in new_items.items():
            if pe in old_items and types.item_atomic(spath):
                if not _eq(old_items[pe], item):
                    c.modified.add((*path, pe))
            elif pe in old_items:
                _compare_into(old_items[pe], item, (*path, pe), spath, types, c)
            else:
                _subtree_set(item, (*path, pe), spath, types, c.added)
        for pe, item in old_items.items():
            if pe not in new_items:
                _subtree_set(item, (*path, pe), spath, types, c.removed)
        return
    if _eq(old, new):
        return
    if isinstance(old, dict | list) or isinstance(new, dict | list):
        _subtree_set(old, path, spath, types, c.removed)
        _subtree_set(new, path, spath, types, c.added)
    else:
        c.modified.add(path)


# --------------------------------------------------------------------------- object views


def _tracked_view(obj: dict | None, *, subresource: str | None, reset: Iterable[str] = ()) -> dict:
    """The part of an object the field manager tracks (server-owned identity fields removed)."""
    if not obj:
        return {}
    view = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    meta = view.get("metadata")
    if isinstance(meta, dict):
        view["metadata"] = {k: v for k, v in meta.items() if k not in _STRIPPED_METADATA}
        if not view["metadata"]:
            del view["metadata"]
    if subresource == "status":
        view = {k: v for k, v in view.items() if k == "status"}
    for key in reset:
        view.pop(key, None)
    return view


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


# Struct fields a built-in Go object always serializes (not omitempty), so a create does not
# "add" them: their managedFields nodes carry no "." of their own.
_ALWAYS_PRESENT = (
    ("spec",),
    ("status",),
    ("spec", "containers"),
    ("spec", "strategy"),
    ("spec", "updateStrategy"),
    ("spec", "template"),
    ("spec", "template", "metadata"),
    ("spec", "template", "spec"),
    ("spec", "template", "spec", "containers"),
    ("spec", "jobTemplate"),
    ("spec", "jobTemplate", "spec"),
    ("spec", "jobTemplate", "spec", "template"),
    ("spec", "jobTemplate", "spec", "template", "metadata"),
    ("spec", "jobTemplate", "spec", "template", "spec"),
    ("spec", "jobTemplate", "spec", "template", "spec", "containers"),
)


def _zero_skeleton(view: dict, api_version: str, kind: str) -> dict:
    if not strategic_supported(api_version, kind):
        return {}
    skeleton: dict = {}
    for path in _ALWAYS_PRESENT:
        source: Any = view
        target: Any = skeleton
        for depth, key in enumerate(path):
            if not isinstance(source, dict) or key not in source:
                break
            source = source[key]
            if depth == len(path) - 1:
                if isinstance(source, dict | list):
                    target.setdefault(key, type(source)())
            else:
                if not isinstance(source, dict):
                    break
                target = target.setdefault(key, {})
    return skeleton


# --------------------------------------------------------------------------- managed entries


class _Entry:
    def __init__(self, raw: dict, fields: set[Path], *, reuse: bool = False):
        self.raw = {k: v for k, v in raw.items() if k != "fieldsV1"}
        self.fields = fields
        self.key = _identity_key(raw)
        self.identity = _identity(raw)
        # An entry read from a stored object was rendered by this module: while its field set
        # is unchanged, its FieldsV1 is reused as is (rendering sorts every path on each write).
        self._rendered = (fields, raw.get("fieldsV1")) if reuse else None

    def render(self) -> dict:
        out = {
            "manager": self.raw.get("manager", ""),
            "operation": self.raw.get("operation", ""),
            "apiVersion": self.raw.get("apiVersion", ""),
        }
        if self.raw.get("time"):
            out["time"] = self.raw["time"]
        out["fieldsType"] = "FieldsV1"
        if self._rendered is not None and self._rendered[0] == self.fields:
            out["fieldsV1"] = self._rendered[1]
        else:
            out["fieldsV1"] = paths_to_fields_v1(self.fields)
        if self.raw.get("subresource"):
            out["subresource"] = self.raw["subresource"]
        return out


def _parse_entries(obj: dict | None, *, reuse: bool = False) -> list[_Entry]:
    raw_entries = ((obj or {}).get("metadata") or {}).get("managedFields") or []
    entries = []
    for raw in raw_entries:
        if not isinstance(raw, dict) or raw.get("fieldsType", "FieldsV1") != "FieldsV1":
            continue
        fields = fields_v1_to_paths(raw.get("fieldsV1"))
        entries.append(_Entry(raw, fields, reuse=reuse and isinstance(raw.get("fieldsV1"), dict)))
    return entries


def _render_entries(entries: list[_Entry]) -> list[dict]:
    kept = [e for e in entries if e.fields]

    def order(entry: _Entry) -> tuple:
        return (
            entry.raw.get("operation", ""),
            entry.raw.get("time") or "",
            entry.raw.get("manager", ""),
            entry.raw.get("apiVersion", ""),
            entry.raw.get("subresource") or "",
        )

    return [e.render() for e in sorted(kept, key=order)]


def _entries_signature(entries: list[dict]) -> list:
    return [{k: v for k, v in e.items() if k != "time"} for e in entries]


# --------------------------------------------------------------------------- merge and prune


def _merge(live: Any, cfg: Any, spath: tuple, types: _Types) -> Any:
    if isinstance(live, dict) and isinstance(cfg, dict) and not types.map_atomic(spath):
        out = dict(live)
        for key, value in cfg.items():
            if key in live:
                out[key] = _merge(live[key], value, (*spath, key), types)
            else:
                out[key] = copy.deepcopy(value)
        return out
    if isinstance(live, list) and isinstance(cfg, list):
        kind, keys = types.list_kind(spath)
        if kind == "atomic":
            return copy.deepcopy(cfg)
        if kind == "set":
            lhs = [(_value_pe(v), v) for v in live]
            rhs = [(_value_pe(v), v) for v in cfg]
            return _merge_ordered(lhs, rhs, lambda _l, r: copy.deepcopy(r))
        lhs = _tolerant_index(live, keys, spath, types)
        rhs = types.index(cfg, keys, spath)
        if types.item_atomic(spath):
            return _merge_ordered(lhs, rhs, lambda _l, r: copy.deepcopy(r))
        return _merge_ordered(
            lhs,
            rhs,
            lambda l, r: copy.deepcopy(r) if l is None else _merge(l, r, spath, types),  # noqa: E741
        )
    return copy.deepcopy(cfg)


def _merge_ordered(lhs: list, rhs: list, merge_item: Callable[[Any, Any], Any]) -> list:
    """Merge two keyed lists keeping live-only items in place and applied items in applied order."""
    rhs_map = dict(reversed(rhs))
    lhs_map = dict(reversed(lhs))
    shared = [pe for pe, _ in rhs if pe in lhs_map]
    shared_pos = 0

    def next_shared() -> str | None:
        return shared[shared_pos] if shared_pos < len(shared) else None

    out: list = []
    done: set[str] = set()
    li = ri = 0
    while li < len(lhs) or ri < len(rhs):
        if li < len(lhs) and ri < len(rhs):
            pe = lhs[li][0]
            if pe == rhs[ri][0]:
                if pe not in done:
                    out.append(merge_item(lhs_map[pe], rhs_map[pe]))
                    done.add(pe)
                li += 1
                ri += 1
                if next_shared() == pe:
                    shared_pos += 1
                continue
            if pe in rhs_map and next_shared() is not None and next_shared() != pe:
                li += 1
                continue
        if li < len(lhs):
            pe = lhs[li][0]
            if pe not in rhs_map:
                out.append(copy.deepcopy(lhs[li][1]))
                li += 1
                continue
            if pe in done:
                li += 1
                continue
        if ri < len(rhs):
            pe = rhs[ri][0]
            if pe not in done:
                out.append(merge_item(lhs_map.get(pe), rhs_map[pe]))
                done.add(pe)
            ri += 1
            if next_shared() == pe:
                shared_pos += 1
        else:
            li += 1  # a duplicate live item already merged
    return out


def _prune(obj: dict, candidates: set[Path], owned: set[Path], types: _Types) -> None:
    """Remove the fields an applier stopped applying, unless someone still owns them."""
    if not candidates:
        return
    owned_prefixes = {path[:i] for path in owned for i in range(1, len(path))}
    for path in sorted(candidates, key=len):
        if path in owned or path in owned_prefixes:
            continue
        parent = path[:-1]
        if (
            parent
            and parent[-1].startswith("k:")
            and path[-1][2:] in json.loads(parent[-1][2:])
            and (parent in owned or parent in owned_prefixes)
        ):
            continue  # a key field of an item that stays
        _remove_path(obj, path, (), (), types, owned | owned_prefixes)


def _remove_path(
    node: Any, rest: Path, prefix: Path, spath: tuple, types: _Types, keep: set[Path]
) -> bool:
    """Remove `prefix + rest` from `node` (the value at `prefix`); True when `node` is left empty.
    Maps and lists emptied by the removal go too, unless owned or at the top level."""
    pe, tail = rest[0], rest[1:]
    here = (*prefix, pe)
    if pe.startswith("f:") and isinstance(node, dict):
        name = pe[2:]
        if name not in node:
            return False
        if not tail or (
            _remove_path(node[name], tail, here, (*spath, name), types, keep)
            and len(here) > 1
            and here not in keep
        ):
            del node[name]
        return not node
    if isinstance(node, list):
        kind, keys = types.list_kind(spath)
        for index, item in enumerate(node):
            if kind == "set":
                match = _value_pe(item) == pe
            elif kind == "map":
                try:
                    match = types.item_key(item, keys, spath, index) == pe
                except PatchError:
                    match = False
            else:
                match = pe == f"i:{index}"
            if not match:
                continue
            if not tail:
                del node[index]
            else:
                _remove_path(item, tail, here, spath, types, keep)
            break
        return not node
    return False


# --------------------------------------------------------------------------- server-side apply


def server_side_apply(
    live: dict | None,
    applied: dict,
    *,
    manager: str,
    force: bool,
    now: str,
    subresource: str | None = None,
    list_map_keys: ListMapKeys | None = None,
    reset_fields: Iterable[str] = (),
) -> dict:
    """Apply `applied` for `manager`; returns the new object with metadata.managedFields.

    `reset_fields`: top-level fields this endpoint ignores (("status",) for the main resource of
    a kind with a status subresource); with subresource="status" only .status is applied.
    Applying an unchanged configuration returns the live object unchanged (managedFields times
    included), so `semantically_equal(live, result)` tells the caller to skip the write.
    Raises ApplyConflict, or PatchError for a malformed configuration.
    """
    if not isinstance(applied, dict):
        raise PatchError("apply patches must be a JSON object", code=400)
    if (applied.get("metadata") or {}).get("managedFields") is not None:
        raise PatchError("metadata.managedFields must be nil", code=400)
    api_version = str(applied.get("apiVersion") or (live or {}).get("apiVersion") or "")
    kind = str(applied.get("kind") or (live or {}).get("kind") or "")
    types = _Types(api_version, kind, list_map_keys)
    reset = tuple(reset_fields)

    config = _drop_nulls(applied)
    config_view = _tracked_view(config, subresource=subresource, reset=reset)
    new_set: set[Path] = set()
    _applied_set(config_view, (), (), types, new_set)

    entries = _parse_entries(live)
    if live is not None and not entries:
        # An object nobody tracked yet: its fields belong to "before-first-apply".
        before: set[Path] = set()
        _applied_set(_tracked_view(live, subresource=None), (), (), types, before, strict=False)
        if before:
            entries.append(
                _Entry(
                    {
                        "manager": "before-first-apply",
                        "operation": "Update",
                        "apiVersion": live.get("apiVersion", api_version),
                        "time": now,
                    },
                    before,
                )
            )
    mine_raw = {"manager": manager, "operation": "Apply", "apiVersion": api_version}
    if subresource:
        mine_raw["subresource"] = subresource
    mine_key = _identity_key(mine_raw)
    previous = next((e for e in entries if e.key == mine_key), None)
    last_set = previous.fields if previous else set()
    others = [e for e in entries if e.key != mine_key]

    # Merge the configuration into the live object.
    if live is None:
        merged = {k: copy.deepcopy(v) for k, v in config.items() if k not in reset}
        merged.setdefault("metadata", {})
    else:
        merged = copy.deepcopy(live)
        tracked_cfg = config_view
        for key, value in tracked_cfg.items():
            if key == "metadata":
                continue
            merged[key] = (
                _merge(merged[key], value, (key,), types) if key in merged else copy.deepcopy(value)
            )
        meta_cfg = tracked_cfg.get("metadata")
        if meta_cfg:
            merged["metadata"] = _merge(
                merged.get("metadata") or {}, meta_cfg, ("metadata",), types
            )
        if api_version:
            merged["apiVersion"] = api_version
    merged.setdefault("metadata", {}).pop("managedFields", None)

    # Fields this manager stopped applying go away unless someone else owns them.
    owned_by_others: set[Path] = set().union(*(e.fields for e in others)) if others else set()
    _prune(merged, last_set - new_set, owned_by_others | new_set, types)

    # Conflicts: fields this apply changes that other managers own.
    live_view = _tracked_view(live, subresource=subresource, reset=reset)
    merged_view = _tracked_view(merged, subresource=subresource, reset=reset)
    comparison = _compare(live_view, merged_view, types)
    changed = comparison.changed()
    conflicts: list[tuple[dict, Path]] = []
    for entry in sorted(others, key=lambda e: _identity_json(e.identity)):
        clash = entry.fields & changed
        conflicts.extend((entry.identity, path) for path in sorted(clash, key=_path_sort_key))
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for entry in others:
        entry.fields = entry.fields - changed - comparison.removed

    object_changed = (
        live is None
        or not _eq(
            {k: v for k, v in merged.items() if k != "metadata"},
            {k: v for k, v in live.items() if k != "metadata"},
        )
        or not _eq(
            {k: v for k, v in merged["metadata"].items() if k != "managedFields"},
            {k: v for k, v in (live.get("metadata") or {}).items() if k != "managedFields"},
        )
    )
    mine_raw_out = dict(mine_raw)
    if object_changed or previous is None or previous.fields != new_set:
        mine_raw_out["time"] = now
    elif previous.raw.get("time"):
        mine_raw_out["time"] = previous.raw["time"]
    mine = _Entry(mine_raw_out, new_set)
    rendered = _render_entries([*others, mine])

    if live is not None and not object_changed:
        live_entries = (live.get("metadata") or {}).get("managedFields") or []
        if _entries_signature(live_entries) == _entries_signature(rendered):
            return copy.deepcopy(live)
    merged["metadata"]["managedFields"] = rendered
    return merged


# --------------------------------------------------------------------------- non-apply writes


def update_managed_fields(
    old: dict | None,
    new: dict,
    *,
    manager: str,
    operation: str = "Update",
    api_version: str | None = None,
    now: str,
    subresource: str | None = None,
    list_map_keys: ListMapKeys | None = None,
) -> list[dict]:
    """managedFields after a create (old None), update or patch by `manager`.

    The manager's entry gains the fields that changed (all set fields on create); other managers
    lose them; removed fields leave every entry. As kube-apiserver does, managedFields sent in the
    request body replace the stored ones when they differ (`[{}]` clears them: the result is []
    and the caller should drop the key); an empty list sent keeps the stored ones.
    """
    sent = (new.get("metadata") or {}).get("managedFields")
    stored_entries = ((old or {}).get("metadata") or {}).get("managedFields")
    if isinstance(sent, list) and sent and sent != stored_entries:
        if all(isinstance(e, dict) and not e for e in sent):
            return []
        base: dict | None = {"metadata": {"managedFields": sent}}
    else:
        base = old
    api_version = api_version or str(new.get("apiVersion") or (old or {}).get("apiVersion") or "")
    kind = str(new.get("kind") or (old or {}).get("kind") or "")
    types = _Types(api_version, kind, list_map_keys)
    new_view = _tracked_view(_drop_nulls(new), subresource=subresource)
    if old is None:
        old_view = _zero_skeleton(new_view, api_version, kind)
    else:
        old_view = _tracked_view(_drop_nulls(old), subresource=subresource)
    comparison = _compare(old_view, new_view, types)
    changed = comparison.changed()

    entries = _parse_entries(base, reuse=base is old)
    mine_raw = {"manager": manager, "operation": operation, "apiVersion": api_version}
    if subresource:
        mine_raw["subresource"] = subresource
    mine_key = _identity_key(mine_raw)
    previous = next((e for e in entries if e.key == mine_key), None)
    others = [e for e in entries if e.key != mine_key]
    for entry in others:
        entry.fields = entry.fields - changed - comparison.removed
    mine_fields = ((previous.fields if previous else set()) | changed) - comparison.removed
    if not comparison.empty() or previous is None:
        mine_raw["time"] = now
    elif previous.raw.get("time"):
        mine_raw["time"] = previous.raw["time"]
    mine = _Entry(mine_raw, mine_fields)
    if previous is not None:
        mine._rendered = previous._rendered
    return _render_entries([*others, mine])


# --------------------------------------------------------------------------- equality


def semantically_equal(a: dict | None, b: dict | None) -> bool:
    """Equal apart from resourceVersion and managedFields timestamps (a no-op write)."""
    if a is None or b is None:
        return a is b

    def normalized(obj: dict) -> dict:
        out = dict(obj)
        meta = dict(out.get("metadata") or {})
        meta.pop("resourceVersion", None)
        if "managedFields" in meta:
            meta["managedFields"] = [
                {k: v for k, v in e.items() if k != "time"} if isinstance(e, dict) else e
                for e in meta["managedFields"] or []
            ]
        out["metadata"] = meta
        return out

    return _eq(normalized(a), normalized(b))
