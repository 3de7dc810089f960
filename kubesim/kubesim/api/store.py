"""The object store: kube-apiserver's registry + etcd in one in-memory structure.

Objects are plain dicts in the Kubernetes JSON shape, kept in their type's storage version and
indexed by (group, plural) -> namespace -> name. A stored dict is never mutated after it is stored:
every write replaces it, so history events and HTTP responses can share it without copying.
Everything the public methods return is a deep copy the caller may modify.

Every write bumps one global resourceVersion counter (as etcd's revision) and appends one event
to a bounded history that watches replay from.
"""

from __future__ import annotations

import bisect
import datetime
import re
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterable

import orjson

from kubesim.api import apply as ssa
from kubesim.api import (
    builtin_validation,
    builtins,
    conversion,
    errors,
    immutable,
    selectors,
    upstream,
)
from kubesim.api import patch as patches
from kubesim.api import secrets as secrets_api
from kubesim.api.patch import PatchError
from kubesim.api.registry import Registry, ResourceType, split_api_version
from kubesim.api.watch import Subscription, Watcher, WatchEvent
from kubesim.clock import SimClock, rfc3339

DEFAULT_HISTORY = 20000
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
# kinds whose names must be DNS-1123 labels rather than subdomains
_LABEL_NAMED = {("", "Namespace"), ("", "Service")}
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
)

# status fields of built-in kinds that are serialized even when zero (no omitempty in Go);
# the python client's models refuse these objects without them
_STATUS_ZEROS = {
    ("apps", "StatefulSet"): {"replicas": 0, "availableReplicas": 0},
    ("apps", "ReplicaSet"): {"replicas": 0},
    ("apps", "DaemonSet"): {
        "currentNumberScheduled": 0,
        "desiredNumberScheduled": 0,
        "numberMisscheduled": 0,
        "numberReady": 0,
    },
}

WriteListener = Callable[[str, ResourceType, dict, "dict | None"], None]
AdmissionHook = Callable[[str, dict, "dict | None"], None]


def check_metadata_shape(obj: dict) -> None:
    """Reject metadata a Go client could not have sent (kube-apiserver fails to decode it)."""
    meta = obj.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise errors.bad_request(
            "json: cannot unmarshal into Go struct field .metadata of type v1.ObjectMeta"
        )
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise errors.bad_request(
                f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{field} of "
                f"type map[string]string"
            )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        raise errors.bad_request(
            "json: cannot unmarshal into Go struct field ObjectMeta.metadata.finalizers of type "
            "[]string"
        )
    refs = meta.get("ownerReferences")
    if refs is not None and (
        not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs)
    ):
        raise errors.bad_request(
            "json: cannot unmarshal into Go struct field ObjectMeta.metadata.ownerReferences of "
            "type []v1.OwnerReference"
        )


def deep_copy(obj):
    return orjson.loads(orjson.dumps(obj))


def _content(obj: dict) -> dict:
    """The part of an object whose change bumps metadata.generation."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    def __init__(self, registry: Registry, clock: SimClock, *, history_size: int = DEFAULT_HISTORY):
        self.registry = registry
        self.clock = clock
        self._data: dict[tuple[str, str], dict[str, dict[str, dict]]] = {}
        self._rv = 0
        self._history: deque[WatchEvent] = deque()
        self._history_size = history_size
        self._history_floor = 0  # events with rv > floor are retained
        self._watchers: dict[tuple[str, str] | None, set[Watcher]] = {}
        self._hooks: dict[tuple[str, str], list[AdmissionHook]] = {}
        self._write_listeners: list[WriteListener] = []
        self._owner_index: dict[str, set[tuple[tuple[str, str], str, str]]] = {}
        # (group, plural) -> (label key, value) -> {(namespace, name)}
        self._labels: dict[tuple[str, str], dict[tuple[str, str], set[tuple[str, str]]]] = {}
        # Bumped on every change to _labels; _sorted_index holds sorted entries of one version.
        self._labels_version = 0
        self._sorted_index: dict[tuple, tuple[int, list[tuple[str, str]]]] = {}
        # pods bound to a node are deleted gracefully when a kubelet runs (it finishes the deletion)
        self.graceful_pod_deletion = False
        self.warnings: list[str] = []
        self._list_map_key_cache: dict[tuple[int, str], tuple] = {}
        self.dirty = False

    # ---------------------------------------------------------------- basics
    @property
    def resource_version(self) -> int:
        return self._rv

    def now(self) -> str:
        return rfc3339(self.clock.now())

    def _bucket(self, key: tuple[str, str], namespace: str) -> dict[str, dict]:
        by_ns = self._data.get(key)
        if by_ns is None:
            by_ns = self._data[key] = {}
        bucket = by_ns.get(namespace)
        if bucket is None:
            bucket = by_ns[namespace] = {}
        return bucket

    def _raw(self, rtype: ResourceType, namespace: str | None, name: str) -> dict | None:
        by_ns = self._data.get(rtype.store_key)
        if not by_ns:
            return None
        bucket = by_ns.get(namespace or "" if rtype.namespaced else "")
        if not bucket:
            return None
        return bucket.get(name)

    def _rtype(self, api_version: str, kind: str) -> ResourceType:
        return self.registry.by_kind(api_version, kind)

    @staticmethod
    def _ns(rtype: ResourceType, namespace: str | None) -> str:
        return (namespace or "") if rtype.namespaced else ""

    # ---------------------------------------------------------------- versions
    def render(self, rtype: ResourceType, obj: dict, version: str | None) -> dict:
        """The stored object as seen through `version` (the stored dict itself when no change)."""
        if rtype.storage_key is not None:
            return builtins.core_to_events_v1(obj)
        if not version or version == rtype.storage_version:
            return obj
        return self._convert(rtype, obj, version)

    def _convert(self, rtype: ResourceType, obj: dict, version: str) -> dict:
        current = split_api_version(obj.get("apiVersion", ""))[1]
        if current == version:
            return obj
        if rtype.group == "kueue.x-k8s.io":
            return conversion.convert(obj, version)
        converted = dict(obj)
        converted["apiVersion"] = rtype.api_version(version)
        return converted

    def _to_storage(self, rtype: ResourceType, obj: dict) -> dict:
        if rtype.storage_key is not None:
            return builtins.events_v1_to_core(obj)
        return self._convert(rtype, obj, rtype.storage_version)

    # ---------------------------------------------------------------- reads
    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict:
        rtype = self._rtype(api_version, kind)
        obj = self._raw(rtype, namespace, name)
        if obj is None:
            raise errors.not_found(rtype.group_resource, name)
        return deep_copy(self.render(rtype, obj, split_api_version(api_version)[1]))

    def try_get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        rtype = self._rtype(api_version, kind)
        obj = self._raw(rtype, namespace, name)
        if obj is None:
            return None
        return deep_copy(self.render(rtype, obj, split_api_version(api_version)[1]))

    def try_get_raw(self, rtype: ResourceType, namespace: str | None, name: str) -> dict | None:
        """The stored dict itself (read-only!) or None."""
        return self._raw(rtype, namespace, name)

    def get_raw(self, rtype: ResourceType, namespace: str | None, name: str) -> dict:
        """The stored dict itself (read-only!), for the HTTP layer."""
        obj = self._raw(rtype, namespace, name)
        if obj is None:
            raise errors.not_found(rtype.group_resource, name)
        return obj

    def select(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_reqs=None,
        field_reqs=None,
        *,
        start_after: tuple[str, str] | None = None,
        limit: int | None = None,
    ) -> list[dict]:
        """Stored dicts (read-only!) matching, ordered by (namespace, name) as etcd keys are.

        With `limit`, stops once it has that many (a page): what is left is not counted."""
        by_ns = self._data.get(rtype.store_key)
        if not by_ns:
            return []
        if rtype.namespaced and namespace:
            bucket = by_ns.get(namespace)
            buckets = [(namespace, bucket)] if bucket else []
        else:
            buckets = sorted(by_ns.items())
        equality = selectors.equality_index(label_reqs) if label_reqs else None
        entries = None
        if equality is not None:
            entries = self._labels.get(rtype.store_key, {}).get(equality)
            if not entries:
                return []
            in_namespace = (
                len(buckets[0][1]) if buckets and rtype.namespaced and namespace else None
            )
            if in_namespace is not None and in_namespace < len(entries):
                # One namespace holds fewer objects than the label index has cluster-wide (the
                # portal's managed-by label is on every job's objects): scan the namespace.
                entries = None
        if entries is not None:
            # narrow through the label index: only objects carrying key=value are looked at
            ordered = self._sorted_entries(rtype.store_key, equality, entries)
            first = bisect.bisect_right(ordered, start_after) if start_after is not None else 0
            selected = []
            for i in range(first, len(ordered)):
                ns, name = ordered[i]
                if rtype.namespaced and namespace and ns != namespace:
                    continue
                obj = by_ns[ns][name]
                if not selectors.labels_match(label_reqs, obj["metadata"].get("labels")):
                    continue
                if field_reqs and not selectors.fields_match(field_reqs, obj):
                    continue
                selected.append(obj)
                if limit is not None and len(selected) >= limit:
                    break
            return selected
        result = []
        for ns, bucket in buckets:
            if start_after is not None and ns < start_after[0]:
                continue
            names = sorted(bucket)
            for name in names:
                if start_after is not None and (ns, name) <= start_after:
                    continue
                obj = bucket[name]
                if label_reqs and not selectors.labels_match(
                    label_reqs, obj["metadata"].get("labels")
                ):
                    continue
                if field_reqs and not selectors.fields_match(field_reqs, obj):
                    continue
                result.append(obj)
                if limit is not None and len(result) >= limit:
                    return result
        return result

    def _sorted_entries(self, key: tuple[str, str], pair: tuple, entries: set) -> list:
        """The label index's entries for key=value in (namespace, name) order, kept sorted
        until the index changes: a paged cluster-wide list sorts once, not once a page."""
        cached = self._sorted_index.get((key, pair))
        if cached is not None and cached[0] == self._labels_version:
            return cached[1]
        ordered = sorted(entries)
        self._sorted_index[(key, pair)] = (self._labels_version, ordered)
        return ordered

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str | dict | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        rtype = self._rtype(api_version, kind)
        version = split_api_version(api_version)[1]
        label_reqs = selectors.to_requirements(label_selector)
        field_reqs = selectors.parse_field_selector(field_selector)
        return [
            deep_copy(self.render(rtype, obj, version))
            for obj in self.select(rtype, namespace, label_reqs, field_reqs)
        ]

    def count(self, rtype: ResourceType) -> int:
        return sum(len(bucket) for bucket in self._data.get(rtype.store_key, {}).values())

    def all_objects(self) -> Iterable[tuple[ResourceType | None, dict]]:
        for key, by_ns in self._data.items():
            rtype = self.registry.by_key(*key)
            for bucket in by_ns.values():
                for obj in bucket.values():
                    yield rtype, obj

    # ---------------------------------------------------------------- hooks
    def add_admission_hook(self, api_version: str, kind: str, hook: AdmissionHook) -> None:
        group = split_api_version(api_version)[0]
        self._hooks.setdefault((group, kind), []).append(hook)

    def add_write_listener(self, listener: WriteListener) -> None:
        """listener(event_type, rtype, stored_obj, old) after every committed write."""
        self._write_listeners.append(listener)

    def _list_map_keys(self, rtype: ResourceType, version: str):
        """How server-side apply merges the lists of a CRD version (None: built-in tables)."""
        if not rtype.is_crd:
            return None
        cached = self._list_map_key_cache.get((id(rtype), version))
        if cached is None or cached[0] is not rtype:
            cached = (rtype, ssa.schema_list_map_keys(rtype.openapi_schemas.get(version)))
            self._list_map_key_cache[(id(rtype), version)] = cached
        return cached[1]

    # ---------------------------------------------------------------- admission
    def _validate_name(self, rtype: ResourceType, name: str, causes: list[dict]) -> None:
        if (rtype.group, rtype.kind) in builtin_validation.PATH_SEGMENT_NAMED:
            for message in builtin_validation.path_segment_name_errors(name):
                causes.append(errors.invalid_value("metadata.name", name, message))
        elif (rtype.group, rtype.kind) in _LABEL_NAMED:
            if len(name) > 63 or not _DNS1123_LABEL.match(name):
                causes.append(errors.invalid_value("metadata.name", name, _LABEL_MSG))
        elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
            causes.append(errors.invalid_value("metadata.name", name, _SUBDOMAIN_MSG))

    def _admit(
        self,
        rtype: ResourceType,
        operation: str,
        obj: dict,
        old: dict | None,
        field_validation: str,
    ) -> dict:
        """Defaults, pruning, schema + CEL validation, built-in validation, admission hooks."""
        causes: list[dict] = []
        if operation == "CREATE":
            self._validate_name(rtype, obj["metadata"].get("name", ""), causes)
        schema = rtype.schemas.get(rtype.storage_version)
        if schema is not None:
            schema.apply_defaults(obj)
            unknown = schema.prune(obj)
            if unknown and field_validation == "Strict":
                raise errors.bad_request(
                    "strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in unknown)
                )
            if unknown and field_validation == "Warn":
                self.warnings.extend(f'unknown field "{p}"' for p in unknown)
            causes.extend(schema.validate(obj, old) or [])
        elif not rtype.is_crd:
            self._decode_builtin(obj, field_validation)
        if not rtype.is_crd and (rtype.group, rtype.kind) == ("", "Secret"):
            secrets_api.decode_secret(obj)  # base64 data, stringData merged into data
        # built-in kinds' checks, and the Kueue webhook checks the CRD schema leaves out
        if not rtype.is_crd and operation == "UPDATE":
            _check_builtin_shape(obj)
            if old is not None:
                causes.extend(immutable.validate_update(obj, old))
        try:
            causes.extend(builtin_validation.validate_builtin(obj) or [])
        except (TypeError, AttributeError, ValueError) as exc:
            # a field of the wrong JSON type deep in a built-in object: a decoding error
            raise errors.bad_request(f"the object could not be decoded: {exc}") from None
        if causes:
            seen = set()
            unique = []
            for cause in causes:
                marker = (cause.get("field"), cause.get("reason"), cause.get("message"))
                if marker not in seen:
                    seen.add(marker)
                    unique.append(cause)
            raise errors.invalid(rtype.kind, rtype.group, obj["metadata"].get("name", ""), unique)
        for hook in self._hooks.get((rtype.group, rtype.kind), ()):
            hook(operation, obj, old)
        return obj

    def _decode_builtin(self, obj: dict, field_validation: str) -> None:
        """kube-apiserver's decoding of a built-in object against the upstream definition:
        a 400 for a value of the wrong type, unknown fields dropped (reported when asked),
        quantities made canonical."""
        api_version = obj.get("apiVersion", "")
        kind = obj.get("kind", "")
        group, version = split_api_version(api_version)
        definition = upstream.definition_for(group, version, kind)
        if definition is None:
            return
        unknown = upstream.decode(definition, obj, kind, version)
        if unknown and field_validation == "Strict":
            raise errors.bad_request(
                "strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in unknown)
            )
        if unknown and field_validation == "Warn":
            self.warnings.extend(f'unknown field "{p}"' for p in unknown)

    def _check_namespace(self, rtype: ResourceType, namespace: str) -> None:
        if not rtype.namespaced:
            return
        ns_type = self.registry.by_group_kind("", "Namespace")
        if ns_type is None:
            return
        ns_obj = self._raw(ns_type, None, namespace)
        if ns_obj is None:
            raise errors.not_found("namespaces", namespace)
        if ns_obj["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                f"{rtype.plural} is forbidden: unable to create new content"
                f" in namespace {namespace} because it is being terminated",
                details={"kind": rtype.plural},
            )

    # ---------------------------------------------------------------- writes
    def _put(self, rtype: ResourceType, obj: dict, old: dict | None, event_type: str) -> None:
        meta = obj["metadata"]
        namespace = meta.get("namespace", "") if rtype.namespaced else ""
        bucket = self._bucket(rtype.store_key, namespace)
        bucket[meta["name"]] = obj
        self._index_owners(rtype, old, remove=True)
        self._index_owners(rtype, obj)
        old_labels = old["metadata"].get("labels") if old is not None else None
        new_labels = meta.get("labels")
        if old_labels != new_labels:
            self._index_labels(rtype.store_key, namespace, meta["name"], old_labels, remove=True)
            self._index_labels(rtype.store_key, namespace, meta["name"], new_labels)
        self._publish(
            WatchEvent(
                int(meta["resourceVersion"]), event_type, rtype.store_key, namespace, obj, old
            )
        )
        for listener in self._write_listeners:
            listener(event_type, rtype, obj, old)

    def _index_labels(
        self,
        key: tuple[str, str],
        namespace: str,
        name: str,
        labels: dict | None,
        *,
        remove: bool = False,
    ) -> None:
        if not labels:
            return
        self._labels_version += 1
        index = self._labels.setdefault(key, {})
        entry = (namespace, name)
        for pair in labels.items():
            if remove:
                holders = index.get(pair)
                if holders is not None:
                    holders.discard(entry)
                    if not holders:
                        del index[pair]
            else:
                index.setdefault(pair, set()).add(entry)

    def _index_owners(self, rtype: ResourceType, obj: dict | None, *, remove: bool = False) -> None:
        if obj is None:
            return
        meta = obj["metadata"]
        refs = meta.get("ownerReferences")
        if not refs:
            return
        entry = (
            rtype.store_key,
            meta.get("namespace", "") if rtype.namespaced else "",
            meta["name"],
        )
        for ref in refs:
            uid = ref.get("uid")
            if not uid:
                continue
            if remove:
                dependents = self._owner_index.get(uid)
                if dependents is not None:
                    dependents.discard(entry)
                    if not dependents:
                        del self._owner_index[uid]
            else:
                self._owner_index.setdefault(uid, set()).add(entry)

    def _publish(self, event: WatchEvent) -> None:
        self.dirty = True
        history = self._history
        history.append(event)
        if len(history) > self._history_size:
            self._history_floor = history.popleft().rv
        for key in (event.key, None):
            watchers = self._watchers.get(key)
            if watchers:
                for watcher in list(watchers):
                    watcher.offer(event)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def create(
        self,
        obj: dict,
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Ignore",
        managed_fields: list | None = None,
    ) -> dict:
        api_version = obj.get("apiVersion", "")
        kind = obj.get("kind", "")
        if not api_version or not kind:
            raise errors.bad_request(
                "Object 'Kind' is missing in the request body"
                if not kind
                else "Object 'apiVersion' is missing"
            )
        rtype = self._rtype(api_version, kind)
        request_version = split_api_version(api_version)[1]
        check_metadata_shape(obj)
        obj = deep_copy(obj)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = obj["metadata"] = {}
        if rtype.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if namespace and meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
            ns = ""
        for key in _SERVER_METADATA:
            meta.pop(key, None)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rtype.kind,
                    rtype.group,
                    "",
                    [errors.required("metadata.name", "name or generateName is required")],
                )
            bucket = self._bucket(rtype.store_key, ns)
            while True:
                name = prefix[:58] + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
                if name not in bucket:
                    break
            meta["name"] = name
        obj = self._to_storage(rtype, obj)
        meta = obj["metadata"]
        if not rtype.is_crd:
            _check_builtin_shape(obj)
        self._prepare_create(rtype, obj)
        self.warnings = []
        obj = self._admit(rtype, "CREATE", obj, None, field_validation)
        meta = obj["metadata"]
        self._check_namespace(rtype, ns)
        if meta["name"] in self._data.get(rtype.store_key, {}).get(ns, {}):
            raise errors.already_exists(rtype.group_resource, meta["name"])
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        if rtype.is_crd or "status" in rtype.subresources or "spec" in obj:
            meta["generation"] = 1
        if managed_fields is not None:
            meta["managedFields"] = managed_fields
        elif field_manager:
            managed = ssa.update_managed_fields(
                None,
                obj,
                manager=field_manager,
                operation="Update",
                now=meta["creationTimestamp"],
                list_map_keys=self._list_map_keys(rtype, rtype.storage_version),
            )
            if managed:
                meta["managedFields"] = managed
            else:
                meta.pop("managedFields", None)
        if dry_run:
            return deep_copy(self.render(rtype, obj, request_version))
        meta["resourceVersion"] = self._next_rv()
        self._put(rtype, obj, None, "ADDED")
        return deep_copy(self.render(rtype, obj, request_version))

    def _prepare_create(self, rtype: ResourceType, obj: dict) -> None:
        """What each kind's PrepareForCreate does."""
        ident = (rtype.group, rtype.kind)
        if ident == ("", "Pod"):
            status = obj.get("status") or {}
            status = {"phase": "Pending", "qosClass": _qos_class(obj.get("spec") or {})}
            obj["status"] = status
        elif ident == ("", "Namespace"):
            obj["status"] = {"phase": "Active"}
            spec = obj.setdefault("spec", {})
            spec.setdefault("finalizers", ["kubernetes"])
            labels = obj["metadata"].setdefault("labels", {})
            labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        elif ident == ("", "Node"):
            pass  # a node registers with its status, as a kubelet does
        elif rtype.has_status:
            if rtype.is_crd:
                obj.pop("status", None)
            else:
                # built-in types serialize their status, with the fields Go never omits
                obj["status"] = dict(_STATUS_ZEROS.get(ident, {}))

    def update(
        self,
        obj: dict,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Ignore",
    ) -> dict:
        check_metadata_shape(obj)
        rtype = self._rtype(obj.get("apiVersion", ""), obj.get("kind", ""))
        request_version = split_api_version(obj["apiVersion"])[1]
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise errors.invalid(
                rtype.kind, rtype.group, "", [errors.required("metadata.name", "name is required")]
            )
        old = self._raw(rtype, meta.get("namespace"), name)
        if old is None:
            raise errors.not_found(rtype.group_resource, name)
        new = self._to_storage(rtype, deep_copy(obj))
        self.warnings = []
        result = self._update(
            rtype,
            new,
            old,
            subresource=subresource,
            field_manager=field_manager,
            dry_run=dry_run,
            field_validation=field_validation,
        )
        return deep_copy(self.render(rtype, result, request_version))

    def _update(
        self,
        rtype: ResourceType,
        new: dict,
        old: dict,
        *,
        subresource: str | None,
        field_manager: str | None,
        operation: str = "Update",
        managed_fields: list | None = None,
        dry_run: bool = False,
        field_validation: str = "Ignore",
        check_rv: bool = True,
    ) -> dict:
        """Commit `new` (storage version) over the stored `old`; returns the stored dict."""
        old_meta = old["metadata"]
        requested_rv = (new.get("metadata") or {}).get("resourceVersion")
        if check_rv and requested_rv and requested_rv != old_meta["resourceVersion"]:
            raise errors.conflict(
                rtype.group_resource,
                old_meta["name"],
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
            )
        if subresource == "status":
            status = new.get("status")
            new = {k: v for k, v in old.items() if k != "status"}
            new["metadata"] = dict(old_meta)
            if status is not None:
                new["status"] = status
        else:
            if not isinstance(new.get("metadata"), dict):
                new["metadata"] = {}
            if rtype.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
        meta = new["metadata"]
        for key in (
            "name",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if rtype.namespaced:
            meta["namespace"] = old_meta.get("namespace")
        else:
            meta.pop("namespace", None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new["apiVersion"] = old["apiVersion"]
        new["kind"] = old["kind"]
        if (rtype.group, rtype.kind) == ("", "Namespace") and subresource is None:
            new["status"] = old.get("status", {"phase": "Active"})
        new = self._admit(rtype, "UPDATE", new, old, field_validation)
        meta = new["metadata"]
        if "generation" in old_meta and _content(new) != _content(old):
            meta["generation"] = old_meta["generation"] + 1
        if managed_fields is not None:
            meta["managedFields"] = managed_fields
        else:
            manager = field_manager
            if manager is None and "managedFields" in old_meta:
                manager = "unknown"
            if manager is not None:
                managed = ssa.update_managed_fields(
                    old,
                    new,
                    manager=manager,
                    operation=operation,
                    now=self.now(),
                    subresource=subresource,
                    list_map_keys=self._list_map_keys(rtype, rtype.storage_version),
                )
                if managed:
                    meta["managedFields"] = managed
                else:
                    meta.pop("managedFields", None)
        if ssa.semantically_equal(new, old):
            return old  # no-op: nothing stored, no new resourceVersion (as the real server)
        if dry_run:
            return new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = old_meta["resourceVersion"]
            return self._remove(rtype, new, old)
        meta["resourceVersion"] = self._next_rv()
        self._put(rtype, new, old, "MODIFIED")
        if meta.get("deletionTimestamp"):
            self._after_pending_delete_change(rtype, new)
        return new

    def patch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
        dry_run: bool = False,
        field_validation: str = "Ignore",
    ) -> dict:
        rtype = self._rtype(api_version, kind)
        version = split_api_version(api_version)[1]
        old = self._raw(rtype, namespace, name)
        self.warnings = []
        if patch_type == "apply":
            if not isinstance(patch, dict):
                raise errors.bad_request("apply patches must be an object")
            applied = patch
            applied.setdefault("apiVersion", api_version)
            applied.setdefault("kind", kind)
            if applied.get("kind") != kind or split_api_version(applied["apiVersion"]) != (
                rtype.group,
                version,
            ):
                raise errors.bad_request(
                    f"the API version in the data ({applied.get('apiVersion')}) does not match "
                    f"the expected API version ({api_version})"
                )
            applied_meta = applied.setdefault("metadata", {})
            if applied_meta.get("name") not in (None, name):
                raise errors.bad_request(
                    "the name of the object ({}) does not match the name on the URL ({})".format(
                        applied_meta.get("name"), name
                    )
                )
            applied_meta["name"] = name
            if rtype.namespaced:
                applied_meta.setdefault("namespace", namespace)
            manager = field_manager
            if not manager:
                raise errors.bad_request(
                    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is '
                    "required for apply patch"
                )
            check_metadata_shape(applied)
            live = deep_copy(self.render(rtype, old, version)) if old is not None else None
            try:
                merged = ssa.server_side_apply(
                    live,
                    applied,
                    manager=manager,
                    force=force,
                    now=self.now(),
                    subresource=subresource,
                    list_map_keys=self._list_map_keys(rtype, version),
                    reset_fields=("status",) if rtype.has_status and not subresource else (),
                )
            except ssa.ApplyConflict as exc:
                raise _apply_conflict(rtype, name, exc) from None
            except PatchError as exc:
                raise errors.ApiError(exc.code, exc.reason, exc.message) from None
            managed = merged.get("metadata", {}).get("managedFields")
            if old is None:
                if subresource:
                    raise errors.not_found(rtype.group_resource, name)
                return self.create(
                    merged,
                    namespace=namespace,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    managed_fields=managed,
                )
            new = self._to_storage(rtype, merged)
            result = self._update(
                rtype,
                new,
                old,
                subresource=subresource,
                field_manager=manager,
                operation="Apply",
                managed_fields=managed,
                dry_run=dry_run,
                field_validation=field_validation,
            )
            return deep_copy(self.render(rtype, result, version))
        if old is None:
            raise errors.not_found(rtype.group_resource, name)
        original = deep_copy(self.render(rtype, old, version))
        try:
            if patch_type == "merge":
                patched = patches.json_merge_patch(original, patch)
            elif patch_type == "json":
                patched = patches.json_patch(original, patch)
            elif patch_type == "strategic":
                if rtype.is_crd:
                    raise errors.unsupported_media_type("application/strategic-merge-patch+json")
                patched = patches.strategic_merge_patch(original, patch)
            else:
                raise errors.bad_request(f"unknown patch type {patch_type!r}")
        except PatchError as exc:
            raise errors.ApiError(exc.code, exc.reason, exc.message) from None
        if not isinstance(patched, dict):
            raise errors.bad_request("the patch did not produce an object")
        patched["apiVersion"] = original["apiVersion"]
        patched["kind"] = original["kind"]
        check_metadata_shape(patched)
        new = self._to_storage(rtype, patched)
        result = self._update(
            rtype,
            new,
            old,
            subresource=subresource,
            field_manager=field_manager,
            dry_run=dry_run,
            field_validation=field_validation,
        )
        return deep_copy(self.render(rtype, result, version))

    # ---------------------------------------------------------------- deletes
    def delete(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        *,
        propagation: str = "Background",
        grace: bool = False,
        grace_seconds: int | None = None,
        preconditions: dict | None = None,
        dry_run: bool = False,
    ) -> dict | None:
        rtype = self._rtype(api_version, kind)
        version = split_api_version(api_version)[1]
        old = self._raw(rtype, namespace, name)
        if old is None:
            raise errors.not_found(rtype.group_resource, name)
        meta = old["metadata"]
        if preconditions:
            uid = preconditions.get("uid")
            if uid and uid != meta.get("uid"):
                raise errors.conflict(
                    rtype.group_resource,
                    name,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                    f"{meta.get('uid')}",
                )
            rv = preconditions.get("resourceVersion")
            if rv and rv != meta.get("resourceVersion"):
                raise errors.conflict(
                    rtype.group_resource,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {rv}, "
                    f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
                )
        for hook in self._hooks.get((rtype.group, rtype.kind), ()):
            hook("DELETE", old, old)
        if dry_run:
            return deep_copy(self.render(rtype, old, version))
        result = self._delete(rtype, old, propagation, grace, grace_seconds)
        return deep_copy(self.render(rtype, result, version))

    def _delete(
        self,
        rtype: ResourceType,
        old: dict,
        propagation: str,
        grace: bool,
        grace_seconds: int | None = None,
    ) -> dict:
        """grace: delete a running pod gracefully (the kubelet finishes it), for grace_seconds
        (the DeleteOptions' gracePeriodSeconds) or else its terminationGracePeriodSeconds."""
        meta = old["metadata"]
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(f'unsupported propagation policy "{propagation}"')
        if propagation == "Orphan":
            self._orphan_dependents(meta["uid"])
        is_namespace = (rtype.group, rtype.kind) == ("", "Namespace")
        finalizers = list(meta.get("finalizers") or [])
        if (
            propagation == "Foreground"
            and "foregroundDeletion" not in finalizers
            and self._owner_index.get(meta["uid"])
        ):
            finalizers.append("foregroundDeletion")
        graceful = (
            grace
            and self.graceful_pod_deletion
            and (rtype.group, rtype.kind) == ("", "Pod")
            and (old.get("spec") or {}).get("nodeName")
            and (old.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        if finalizers or graceful or is_namespace:
            period = 0
            if graceful:
                period = int(
                    grace_seconds
                    if grace_seconds is not None
                    else (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                )
            shorter = (
                graceful
                and meta.get("deletionTimestamp")
                and period < int(meta.get("deletionGracePeriodSeconds") or 0)
            )
            if (
                meta.get("deletionTimestamp")
                and finalizers == list(meta.get("finalizers") or [])
                and not shorter
            ):
                return old
            new = dict(old)
            new_meta = new["metadata"] = dict(meta)
            if not meta.get("deletionTimestamp") or shorter:
                # as upstream: the time by which the object should be gone (now + the grace
                # period); a second delete may only shorten the period
                new_meta["deletionTimestamp"] = rfc3339(
                    self.clock.now() + datetime.timedelta(seconds=period)
                )
                new_meta["deletionGracePeriodSeconds"] = period
            if finalizers:
                new_meta["finalizers"] = finalizers
            if is_namespace:
                new["status"] = {"phase": "Terminating"}
            new_meta["resourceVersion"] = self._next_rv()
            self._put(rtype, new, old, "MODIFIED")
            if is_namespace:
                self._delete_namespace_contents(new_meta["name"])
                return self._after_pending_delete_change(rtype, new)
            if "foregroundDeletion" in finalizers:
                self._delete_dependents(meta["uid"], "Background")
                return self._after_pending_delete_change(rtype, new)
            return new
        removed = self._remove(rtype, old, old)
        if propagation == "Background":
            self._delete_dependents(meta["uid"], "Background")
        return removed

    def _remove(self, rtype: ResourceType, final: dict, old: dict) -> dict:
        """Take the object out of the store and emit DELETED; returns the final object."""
        meta = final["metadata"]
        namespace = meta.get("namespace", "") if rtype.namespaced else ""
        bucket = self._data.get(rtype.store_key, {}).get(namespace)
        if bucket is None or bucket.get(meta["name"]) is not old:
            return final
        del bucket[meta["name"]]
        if not bucket:
            del self._data[rtype.store_key][namespace]
        self._index_owners(rtype, old, remove=True)
        self._index_labels(
            rtype.store_key, namespace, meta["name"], old["metadata"].get("labels"), remove=True
        )
        gone = dict(final)
        gone["metadata"] = dict(meta)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._publish(WatchEvent(self._rv, "DELETED", rtype.store_key, namespace, gone, old))
        for listener in self._write_listeners:
            listener("DELETED", rtype, gone, old)
        # an owner waiting in foreground deletion may now be free to go
        for ref in meta.get("ownerReferences") or ():
            self._recheck_foreground_owner(ref, namespace)
        if namespace:
            self._recheck_namespace(namespace)
        return gone

    def _after_pending_delete_change(self, rtype: ResourceType, obj: dict) -> dict:
        """An object with deletionTimestamp changed: finish foreground/namespace deletion."""
        meta = obj["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if "foregroundDeletion" in finalizers and not self._owner_index.get(meta["uid"]):
            finalizers.remove("foregroundDeletion")
            return self._drop_finalizers(rtype, obj, finalizers)
        if (
            (rtype.group, rtype.kind) == ("", "Namespace")
            and not finalizers
            and not self._namespace_has_content(meta["name"])
        ):
            # the namespace controller's "kubernetes" spec finalizer is done: contents are gone
            return self._remove(rtype, obj, obj)
        return obj

    def _drop_finalizers(self, rtype: ResourceType, obj: dict, finalizers: list) -> dict:
        if not finalizers:
            return self._remove(rtype, obj, obj)
        new = dict(obj)
        new["metadata"] = dict(obj["metadata"], finalizers=finalizers)
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._put(rtype, new, obj, "MODIFIED")
        return new

    def _recheck_foreground_owner(self, ref: dict, namespace: str) -> None:
        uid = ref.get("uid")
        if not uid or self._owner_index.get(uid):
            return
        api_version, kind = ref.get("apiVersion", ""), ref.get("kind", "")
        rtype = self.registry.try_by_kind(api_version, kind)
        if rtype is None:
            return
        owner = self._raw(rtype, namespace if rtype.namespaced else None, ref.get("name", ""))
        if owner is None or owner["metadata"].get("uid") != uid:
            return
        if owner["metadata"].get("deletionTimestamp") and "foregroundDeletion" in (
            owner["metadata"].get("finalizers") or []
        ):
            self._after_pending_delete_change(rtype, owner)

    def _dependents(self, uid: str) -> list[tuple[ResourceType, dict]]:
        result = []
        for key, namespace, name in sorted(self._owner_index.get(uid, ())):
            rtype = self.registry.by_key(*key)
            if rtype is None:
                continue
            obj = self._data.get(key, {}).get(namespace, {}).get(name)
            if obj is not None:
                result.append((rtype, obj))
        return result

    def _delete_dependents(self, uid: str, propagation: str) -> None:
        for rtype, obj in self._dependents(uid):
            current = self._raw(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if current is None or current["metadata"].get("deletionTimestamp"):
                continue
            refs = current["metadata"].get("ownerReferences") or []
            remaining = [r for r in refs if r.get("uid") != uid and self._owner_alive(r, current)]
            if remaining:
                # other owners keep it alive; just drop the reference to the deleted owner
                new = dict(current)
                new["metadata"] = dict(current["metadata"], ownerReferences=remaining)
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._put(rtype, new, current, "MODIFIED")
                continue
            self._delete(rtype, current, propagation, True)

    def _owner_alive(self, ref: dict, dependent: dict) -> bool:
        rtype = self.registry.try_by_kind(ref.get("apiVersion", ""), ref.get("kind", ""))
        if rtype is None:
            return False
        owner = self._raw(rtype, dependent["metadata"].get("namespace"), ref.get("name", ""))
        return owner is not None and owner["metadata"].get("uid") == ref.get("uid")

    def _orphan_dependents(self, uid: str) -> None:
        for rtype, obj in self._dependents(uid):
            refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
            new = dict(obj)
            new["metadata"] = dict(obj["metadata"])
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._put(rtype, new, obj, "MODIFIED")

    def _namespace_has_content(self, namespace: str) -> bool:
        return any(by_ns.get(namespace) for by_ns in self._data.values())

    def _delete_namespace_contents(self, namespace: str) -> None:
        for key in list(self._data):
            rtype = self.registry.by_key(*key)
            if rtype is None or not rtype.namespaced:
                continue
            for obj in list(self._data[key].get(namespace, {}).values()):
                if not obj["metadata"].get("deletionTimestamp"):
                    self._delete(rtype, obj, "Background", True)

    def _recheck_namespace(self, namespace: str) -> None:
        ns_type = self.registry.by_group_kind("", "Namespace")
        if ns_type is None:
            return
        ns_obj = self._raw(ns_type, None, namespace)
        if ns_obj is not None and ns_obj["metadata"].get("deletionTimestamp"):
            self._after_pending_delete_change(ns_type, ns_obj)

    def delete_collection(
        self,
        rtype: ResourceType,
        namespace: str | None,
        label_reqs=None,
        field_reqs=None,
        *,
        propagation: str = "Background",
        grace: bool = False,
        grace_seconds: int | None = None,
        dry_run: bool = False,
    ) -> list[dict]:
        deleted = []
        for obj in self.select(rtype, namespace, label_reqs, field_reqs):
            current = self._raw(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            if current is None:
                continue
            for hook in self._hooks.get((rtype.group, rtype.kind), ()):
                hook("DELETE", current, current)
            if dry_run:
                deleted.append(current)
                continue
            deleted.append(self._delete(rtype, current, propagation, grace, grace_seconds))
        return deleted

    def remove_all_of_type(self, rtype: ResourceType) -> None:
        """Delete every object of a type (a CRD being removed), emitting DELETED events."""
        for by_ns in list(self._data.get(rtype.store_key, {}).values()):
            for obj in list(by_ns.values()):
                self._remove(rtype, obj, obj)
        self._data.pop(rtype.store_key, None)
        self._labels.pop(rtype.store_key, None)
        self._labels_version += 1

    # ---------------------------------------------------------------- watch
    def add_watcher(self, watcher: Watcher) -> None:
        watchers = self._watchers.setdefault(watcher.key, set())
        watchers.add(watcher)
        watcher.on_close(lambda w: watchers.discard(w))

    def watcher_count(self) -> int:
        return sum(len(w) for w in self._watchers.values())

    def close_watchers(self) -> None:
        for watchers in list(self._watchers.values()):
            for watcher in list(watchers):
                watcher.close()

    def history_since(self, rv: int) -> list[WatchEvent] | None:
        """Events after `rv`, or None when `rv` is older than the retained history (410)."""
        if rv < self._history_floor:
            return None
        history = self._history
        if not history or history[-1].rv <= rv:
            return []
        # binary search: event rvs are increasing
        lo, hi = 0, len(history)
        while lo < hi:
            mid = (lo + hi) // 2
            if history[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return [history[i] for i in range(lo, len(history))]

    @property
    def oldest_resource_version(self) -> int:
        return self._history_floor

    def expire_history(self) -> None:
        """Forget all history: every resume from an older resourceVersion answers 410."""
        self._history.clear()
        self._history_floor = self._rv

    def watch(
        self, api_version: str | None = None, kind: str | None = None, namespace: str | None = None
    ) -> Subscription:
        if kind is None:
            watcher = Watcher(None, namespace)

            def render_any(obj: dict) -> dict:
                return deep_copy(obj)

            self.add_watcher(watcher)
            return Subscription(watcher, render_any)
        rtype = self._rtype(api_version or "", kind)
        version = split_api_version(api_version or "")[1]
        watcher = Watcher(rtype.store_key, namespace)

        def render(obj: dict) -> dict:
            return deep_copy(self.render(rtype, obj, version))

        self.add_watcher(watcher)
        return Subscription(watcher, render)

    # ---------------------------------------------------------------- persistence
    def dump(self) -> bytes:
        objects = [obj for _, obj in self.all_objects()]
        return orjson.dumps({"resourceVersion": self._rv, "objects": objects})

    def load(self, data: bytes, install_crd: Callable[[dict], None]) -> None:
        """Restore a dump: CRDs are installed first so their objects find their type."""
        state = orjson.loads(data)
        objects = state.get("objects", [])
        crds = [o for o in objects if o.get("kind") == "CustomResourceDefinition"]
        for crd in crds:
            install_crd(crd)
        for obj in objects:
            rtype = self.registry.try_by_kind(obj.get("apiVersion", ""), obj.get("kind", ""))
            if rtype is None:
                continue
            meta = obj["metadata"]
            namespace = meta.get("namespace", "") if rtype.namespaced else ""
            self._bucket(rtype.store_key, namespace)[meta["name"]] = obj
            self._index_owners(rtype, obj)
            self._index_labels(rtype.store_key, namespace, meta["name"], meta.get("labels"))
        self._rv = max(self._rv, int(state.get("resourceVersion", 0)))
        self._history.clear()
        self._history_floor = self._rv
        self.dirty = False


def _apply_conflict(rtype: ResourceType, name: str, exc: ssa.ApplyConflict) -> errors.ApiError:
    details: dict = {"name": name, "kind": rtype.plural, "causes": exc.causes()}
    if rtype.group:
        details["group"] = rtype.group
    return errors.ApiError(409, errors.REASON_CONFLICT, exc.message(), details=details)


def _check_builtin_shape(obj: dict) -> None:
    """The decoding errors kube-apiserver answers for built-in objects of the wrong shape
    (CRD objects get these from their schema)."""
    for field in ("spec", "status", "data", "stringData", "binaryData"):
        value = obj.get(field)
        if value is not None and not isinstance(value, dict):
            raise errors.bad_request(
                f"json: cannot unmarshal {type(value).__name__} into Go struct field "
                f"{obj.get('kind', '')}.{field} of type object"
            )
    spec = obj.get("spec") or {}
    for path, node in (
        ("spec", spec),
        ("spec.template.spec", ((spec.get("template") or {}).get("spec"))),
    ):
        if not isinstance(node, dict):
            continue
        for field in ("containers", "initContainers"):
            items = node.get(field)
            if items is None:
                continue
            if not isinstance(items, list) or not all(isinstance(c, dict) for c in items):
                raise errors.bad_request(
                    f"json: cannot unmarshal into Go struct field {path}.{field} of type "
                    f"[]v1.Container"
                )
            for index, container in enumerate(items):
                resources = container.get("resources")
                if resources is None:
                    continue
                if not isinstance(resources, dict) or not all(
                    isinstance(resources.get(k) or {}, dict) for k in ("requests", "limits")
                ):
                    raise errors.bad_request(
                        f"json: cannot unmarshal into Go struct field "
                        f"{path}.{field}[{index}].resources of type v1.ResourceRequirements"
                    )


def _qos_class(spec: dict) -> str:
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    any_set = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for res in ("cpu", "memory"):
            if res not in limits or (res in requests and requests[res] != limits[res]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
