"""List + watch and Leases for the cluster watcher, on plain dicts (no typed models).

`list_page` returns the items and the collection's resourceVersion; `watch` yields the events of
a watch from that resourceVersion, with bookmarks asked for, until the server closes the stream.
A 410 Gone (the history no longer reaches back that far) raises `WatchExpired`: the caller must
relist. Connection problems raise RetryableKubeError like every other verb in portal.kube.

Leases (coordination.k8s.io/v1) are read and written with optimistic concurrency: an update
carries the resourceVersion read, so two candidates cannot both take the same lease.
"""

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from portal.kube.apply import (
    KINDS,
    KubeError,
    PermanentKubeError,
    RetryableKubeError,
    classify,
    object_path,
)
from portal.kube.client import get_api_client, get_lease_client

LEASE_API = "coordination.k8s.io/v1"


class WatchExpired(KubeError):
    """410 Gone: the resourceVersion is older than the server's history; relist."""


def collection_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    plural, namespaced = KINDS.get(kind, (kind.lower() + "s", True))
    if namespaced and namespace:
        return object_path(api_version, kind, namespace, None)
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{base}/{plural}"


def _request(path: str, query: list[tuple[str, str]], *, stream: bool, read_timeout: float):
    api = get_api_client()
    try:
        return api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=(10, read_timeout),
        )
    except ApiException as exc:
        if exc.status == 410:
            raise WatchExpired(exc.reason or "Gone", status=410) from exc
        raise classify(exc) from exc
    except Exception as exc:
        raise classify(exc) from exc


def list_page(
    api_version: str,
    kind: str,
    *,
    namespace: str | None = None,
    label_selector: str = "",
) -> tuple[list[dict[str, Any]], str]:
    """(items, resourceVersion) of one consistent LIST."""
    query = [("labelSelector", label_selector)] if label_selector else []
    response = _request(
        collection_path(api_version, kind, namespace), query, stream=False, read_timeout=60
    )
    try:
        data = json.loads(response.data or b"{}")
    except Exception as exc:
        raise classify(exc) from exc
    items = data.get("items") or []
    for item in items:
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return items, str((data.get("metadata") or {}).get("resourceVersion") or "")


def watch(
    api_version: str,
    kind: str,
    *,
    resource_version: str,
    namespace: str | None = None,
    label_selector: str = "",
    timeout_seconds: int = 300,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(type, object) events from `resource_version` on; BOOKMARK events included (their object
    carries only metadata.resourceVersion). Ends when the server closes the stream."""
    query = [
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("timeoutSeconds", str(int(timeout_seconds))),
        ("resourceVersion", resource_version),
    ]
    if label_selector:
        query.append(("labelSelector", label_selector))
    path = collection_path(api_version, kind, namespace)
    # Bookmarks arrive at least every few seconds on an idle watch; a read stalled for much
    # longer than that means the connection is dead.
    response = _request(path, query, stream=True, read_timeout=60)
    buffer = b""
    try:
        for chunk in response.stream(amt=None, decode_content=True):
            buffer += chunk
            if b"\n" not in chunk:
                continue
            # All complete lines at once: splitting one line off at a time copied the rest of
            # a large chunk (a burst of events) once per event.
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield _decode(line)
        if buffer.strip():
            yield _decode(buffer)
    except KubeError:
        raise
    except Exception as exc:
        raise classify(exc) from exc
    finally:
        response.release_conn()


def _decode(line: bytes) -> tuple[str, dict[str, Any]]:
    # orjson: decoding the events was a third of the cluster watcher's CPU with json.
    event = orjson.loads(line)
    kind, obj = event.get("type", ""), event.get("object") or {}
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        if code == 410:
            raise WatchExpired(obj.get("message") or "Gone", status=410)
        if code >= 500 or code == 429:
            raise RetryableKubeError(obj.get("message") or "watch error", status=code)
        raise PermanentKubeError(obj.get("message") or "watch error", status=code)
    return kind, obj


# ---------------------------------------------------------------------------------- leases
def micro_time(moment: datetime) -> str:
    """RFC 3339 with microseconds, as MicroTime fields want."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _call_json(
    method: str, path: str, body: dict | None = None, *, lease: bool = False
) -> dict[str, Any]:
    api = get_lease_client() if lease else get_api_client()
    try:
        response = api.call_api(
            path,
            method,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=(5, 5),
        )
        return json.loads(response.data or b"{}")
    except Exception as exc:
        raise classify(exc) from exc


def get_lease(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return _call_json("GET", object_path(LEASE_API, "Lease", namespace, name), lease=True)
    except PermanentKubeError as exc:
        if exc.status == 404:
            return None
        raise


def create_lease(namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Create the Lease; RetryableKubeError (409) when another candidate created it first."""
    body = {
        "apiVersion": LEASE_API,
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return _call_json("POST", object_path(LEASE_API, "Lease", namespace, None), body, lease=True)


def update_lease(lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """Replace the Lease's spec if nobody wrote it since `lease` was read (409 otherwise)."""
    meta = lease["metadata"]
    body = {
        "apiVersion": LEASE_API,
        "kind": "Lease",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "resourceVersion": meta["resourceVersion"],
        },
        "spec": spec,
    }
    path = object_path(LEASE_API, "Lease", meta["namespace"], meta["name"])
    return _call_json("PUT", path, body, lease=True)


def pod_log(
    namespace: str,
    name: str,
    *,
    container: str = "",
    tail_lines: int | None = None,
    since_seconds: int | None = None,
    previous: bool = False,
    follow: bool = False,
) -> Iterator[bytes]:
    """The pod's log as byte chunks (streams while the container runs when follow).

    PermanentKubeError 404 when the pod does not exist; 400 when e.g. there is no previous
    container."""
    query: list[tuple[str, str]] = []
    if container:
        query.append(("container", container))
    if tail_lines is not None:
        query.append(("tailLines", str(tail_lines)))
    if since_seconds is not None:
        query.append(("sinceSeconds", str(since_seconds)))
    if previous:
        query.append(("previous", "true"))
    if follow:
        query.append(("follow", "true"))
    path = object_path("v1", "Pod", namespace, name) + "/log"
    api = get_api_client()
    try:
        response = api.call_api(
            path,
            "GET",
            query_params=query,
            header_params={"Accept": "*/*"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=(10, 3600 if follow else 30),
        )
    except Exception as exc:
        raise classify(exc) from exc

    def chunks() -> Iterator[bytes]:
        try:
            yield from response.stream(amt=None if follow else 65536, decode_content=True)
        except Exception as exc:
            raise classify(exc) from exc
        finally:
            response.release_conn()

    return chunks()


def pending_workloads(cluster_queue: str) -> list[dict[str, Any]]:
    """Kueue visibility API: the ClusterQueue's pending workloads in queue order (each with
    positionInClusterQueue and positionInLocalQueue, 0-based)."""
    path = f"/apis/visibility.kueue.x-k8s.io/v1beta2/clusterqueues/{cluster_queue}/pendingworkloads"
    return _call_json("GET", path).get("items") or []
