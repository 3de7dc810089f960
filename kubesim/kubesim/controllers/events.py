"""core/v1 Events as the controllers' event recorders write them, with the recorder's aggregation:
a repeat of the same (object, reason, message, source) bumps count and lastTimestamp."""

from __future__ import annotations

import itertools
import time
import weakref

from kubesim.api.errors import ApiError
from kubesim.clock import rfc3339

_recent: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_MAX_REMEMBERED = 4096
_sequence = itertools.count()


def _api_version(obj: dict) -> str:
    return obj.get("apiVersion") or "v1"


def record(
    store,
    obj: dict,
    reason: str,
    message: str,
    *,
    type: str = "Normal",
    component: str = "kubesim",
    host: str | None = None,
    field_path: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict | None:
    """Write (or bump) an Event about obj; the stored Event, or None when it was not written.
    `annotations` go on the Event's metadata, as client-go's AnnotatedEventf puts them."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    now = rfc3339(store.clock.now())
    key = (meta.get("uid"), reason, message, component, field_path, type)
    remembered = _recent.setdefault(store, {})
    existing = remembered.get(key)
    if existing is not None:
        name, count = existing
        try:
            stored = store.patch(
                "v1",
                "Event",
                namespace,
                name,
                {"count": count + 1, "lastTimestamp": now},
            )
            remembered[key] = (name, count + 1)
            return stored
        except ApiError as exc:
            if exc.code != 404:
                raise
            remembered.pop(key, None)
    involved = {
        "apiVersion": _api_version(obj),
        "kind": obj.get("kind"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    if meta.get("namespace"):
        involved["namespace"] = meta["namespace"]
    if field_path:
        involved["fieldPath"] = field_path
    source = {"component": component}
    if host:
        source["host"] = host
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            # client-go names events <object>.<hex of the wall-clock nanoseconds>
            "name": f"{meta.get('name')}.{time.time_ns() + next(_sequence):x}",
            "namespace": namespace,
        },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "source": source,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": type,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host or "",
    }
    if annotations:
        # client-go's AnnotatedEventf (KAI's Evict events carry who evicted and why)
        event["metadata"]["annotations"] = dict(annotations)
    try:
        stored = store.create(event, namespace=namespace)
    except ApiError as exc:
        if exc.code in (404, 409, 403):  # namespace being deleted, or a name clash
            return None
        raise
    if len(remembered) >= _MAX_REMEMBERED:
        remembered.clear()
    remembered[key] = (stored["metadata"]["name"], 1)
    return stored
