"""A few verbs on plain dicts: server-side apply, get, list by label, delete.

Every write is a server-side apply (PATCH application/apply-patch+yaml) under one field manager,
"gpu-portal", with force, so applying the same object twice is a no-op and the portal's fields
win over stale ones. Errors are classified once, here: RetryableKubeError (409 conflicts, 429,
5xx, connection failures — try again later) or PermanentKubeError (other 4xx: the request itself
is wrong; carries the API server's message for the user).
"""

import gc
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import urllib3
from django.conf import settings
from kubernetes.client.exceptions import ApiException

from portal.kube import labels as L
from portal.kube.client import get_api_client

# kind → (plural, namespaced). No discovery round-trips: the portal only speaks these kinds.
KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "Service": ("services", True),
    "Secret": ("secrets", True),
    "Event": ("events", True),
    "ResourceQuota": ("resourcequotas", True),
    "Job": ("jobs", True),  # batch/v1 and batch.volcano.sh/v1alpha1
    "PriorityClass": ("priorityclasses", False),
    "ResourceFlavor": ("resourceflavors", False),
    "ClusterQueue": ("clusterqueues", False),
    "LocalQueue": ("localqueues", True),
    "Cohort": ("cohorts", False),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
    "Workload": ("workloads", True),
    "Queue": ("queues", False),  # scheduling.volcano.sh
    "PodGroup": ("podgroups", True),
    "Command": ("commands", True),
    "PersistentVolumeClaim": ("persistentvolumeclaims", True),
    "PersistentVolume": ("persistentvolumes", False),
    "NetworkPolicy": ("networkpolicies", True),
    "RoleBinding": ("rolebindings", True),
    # resource.k8s.io/v1 (issue 26: a job's claim template in a DRA-managed pool)
    "ResourceClaimTemplate": ("resourceclaimtemplates", True),
    "ResourceClaim": ("resourceclaims", True),
    "ResourceSlice": ("resourceslices", False),
    "DeviceClass": ("deviceclasses", False),
}


class KubeError(Exception):
    def __init__(self, message: str, *, status: int | None = None, reason: str = ""):
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class RetryableKubeError(KubeError):
    """Transient: conflict, throttling, server error or no connection. Retry with backoff."""


class PermanentKubeError(KubeError):
    """The API server rejected the request itself (validation, forbidden, bad request)."""


class ResourceNotServed(RetryableKubeError):
    """The cluster does not serve this API at all (a CRD, e.g. Kueue's or Volcano's, is not
    installed). Retryable: an administrator may install it; callers tell the user meanwhile."""


# What the API server says when a write targets a namespace that is being deleted. It answers 403,
# but the namespace will be gone (and recreated by the quota sync) shortly: try again later.
TERMINATING_NAMESPACE = "because it is being terminated"


def _server_message(exc: ApiException) -> tuple[str, str]:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    reason = body.get("reason") if isinstance(body, dict) else None
    return (message or exc.reason or f"HTTP {exc.status}", reason or str(exc.reason or ""))


def _namespace_terminating(exc: ApiException, message: str) -> bool:
    """Whether a 403 is kube-apiserver refusing new content in a terminating namespace (its
    StatusCause NamespaceTerminating, or the message it always carries)."""
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    causes = ((body.get("details") or {}).get("causes") or []) if isinstance(body, dict) else []
    if any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes):
        return True
    return TERMINATING_NAMESPACE in message


# kube-apiserver's RBAC refusal: `jobs.batch "x" is forbidden: User "system:serviceaccount:..."
# cannot patch resource "jobs" in API group "batch" in the namespace "gp-a"`.
_RBAC_DENIAL = re.compile(r'is forbidden: User ".*" cannot ')


def is_rbac_denial(exc: KubeError) -> bool:
    """Whether the API server refused for lack of permission (RBAC), rather than the request
    itself: an administrator's grant fixes it, so work waits instead of failing."""
    return exc.status == 403 and bool(_RBAC_DENIAL.search(exc.message))


def classify(exc: BaseException) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        message, reason = _server_message(exc)
        if status == 0 or status in (409, 429) or status >= 500:
            return RetryableKubeError(message, status=status or None, reason=reason)
        if status == 403 and _namespace_terminating(exc, message):
            # The namespace is being deleted (e.g. staff removed an orphaned one and the project
            # came back): once it is gone the quota sync re-creates it, so this is a wait.
            return RetryableKubeError(message, status=status, reason="NamespaceTerminating")
        return PermanentKubeError(message, status=status, reason=reason)
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError | TimeoutError):
        return RetryableKubeError(f"cannot reach the Kubernetes API: {exc}")
    raise exc


def object_path(api_version: str, kind: str, namespace: str | None, name: str | None) -> str:
    plural, namespaced = KINDS.get(kind, (kind.lower() + "s", namespace is not None))
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise ValueError(f"{kind} is namespaced: a namespace is required")
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


def decode(data: bytes) -> Any:
    """JSON from the API server, with the cyclic garbage collector paused meanwhile.

    A page of 500 Jobs is ~100,000 new dicts and lists, all kept: enough to set off many
    collections, full ones included (which walk every object of a Django process). In a
    resync pass that was three quarters of the decoding time. Decoded JSON holds no reference
    cycles, so the pause leaves nothing for the collector to find later."""
    if not gc.isenabled():  # paused already (another caller): leave it to that caller
        return json.loads(data)
    gc.disable()
    try:
        return json.loads(data)
    finally:
        gc.enable()


def _call(
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
) -> dict[str, Any]:
    data = _call_raw(method, path, query=query, body=body, content_type=content_type)
    return decode(data) if data else {}


def _call_raw(
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> bytes:
    api = get_api_client()
    headers = {"Accept": accept, "Content-Type": content_type}
    try:
        response = api.call_api(
            path,
            method,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
        )
        data = response.data
    except Exception as exc:  # classify() re-raises anything it does not recognise
        raise classify(exc) from exc
    return data or b""


def _meta(obj: dict[str, Any]) -> tuple[str, str, str | None, str]:
    meta = obj.get("metadata") or {}
    return obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]


def apply(
    obj: dict[str, Any], *, force: bool = True, field_manager: str = L.FIELD_MANAGER
) -> dict[str, Any]:
    """Server-side apply one object; returns the object as the server now holds it.

    A separate ``field_manager`` owns only the fields it applies: applying an emptier object
    under it later removes exactly those fields and leaves the portal's own alone."""
    api_version, kind, namespace, name = _meta(obj)
    query = [("fieldManager", field_manager)]
    if force:
        query.append(("force", "true"))
    return _call(
        "PATCH",
        object_path(api_version, kind, namespace, name),
        query=query,
        body=obj,
        content_type="application/apply-patch+yaml",
    )


def get(
    api_version: str, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    try:
        return _call("GET", object_path(api_version, kind, namespace, name))
    except PermanentKubeError as exc:
        if exc.status == 404:
            return None
        raise


# Lists are read in pages of this many items (limit/continue), so a namespace or a cluster of
# 10,000 jobs never arrives as one response held whole in memory, on either side.
DEFAULT_LIST_PAGE_SIZE = 500
METADATA_ACCEPT = (
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)


def list_page_size() -> int:
    return int(getattr(settings, "PORTAL_KUBE_LIST_PAGE_SIZE", 0) or DEFAULT_LIST_PAGE_SIZE)


def iter_objects(
    api_version: str,
    kind: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    page_size: int | None = None,
    metadata_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """Objects of a kind (across namespaces when namespace is None), optionally by label,
    streamed a page at a time. An expired continue token (410) surfaces as a KubeError.

    metadata_only asks for PartialObjectMetadata (metadata alone, no spec or status): a
    fraction of the bytes to send and decode when only names and labels matter."""
    plural, namespaced = KINDS.get(kind, (kind.lower() + "s", True))
    if namespaced and namespace:
        path = object_path(api_version, kind, namespace, None)
    else:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        path = f"{base}/{plural}"
    query = [("labelSelector", label_selector)] if label_selector else []
    query.append(("limit", str(page_size or list_page_size())))
    token = ""
    while True:
        try:
            raw = _call_raw(
                "GET",
                path,
                query=query + ([("continue", token)] if token else []),
                accept=METADATA_ACCEPT if metadata_only else "application/json",
            )
            data = decode(raw) if raw else {}
        except PermanentKubeError as exc:
            # A collection answers an empty list even in a missing namespace: a 404 means the
            # API itself is not served (its CRD is not installed).
            if exc.status == 404:
                raise ResourceNotServed(
                    f"the cluster does not serve {api_version} {plural}", status=404
                ) from exc
            raise
        # Lists omit kind/apiVersion per item; put them back so items can be passed to delete().
        for item in data.get("items") or []:
            if metadata_only:  # items say PartialObjectMetadata; delete() needs the real kind
                item["apiVersion"], item["kind"] = api_version, kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            yield item
        token = (data.get("metadata") or {}).get("continue") or ""
        if not token:
            return


def list_objects(
    api_version: str,
    kind: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
) -> list[dict[str, Any]]:
    """Objects of a kind (across namespaces when namespace is None), optionally by label."""
    return list(iter_objects(api_version, kind, namespace=namespace, label_selector=label_selector))


def iter_owned(
    api_version: str,
    kind: str,
    *,
    namespace: str | None = None,
    selector: str = "",
    page_size: int | None = None,
    metadata_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """Objects carrying the portal's managed-by label (plus an optional extra selector), paged."""
    full = L.MANAGED_SELECTOR + (f",{selector}" if selector else "")
    return iter_objects(
        api_version,
        kind,
        namespace=namespace,
        label_selector=full,
        page_size=page_size,
        metadata_only=metadata_only,
    )


def list_owned(
    api_version: str, kind: str, *, namespace: str | None = None, selector: str = ""
) -> list[dict[str, Any]]:
    """Objects carrying the portal's managed-by label (plus an optional extra selector)."""
    return list(iter_owned(api_version, kind, namespace=namespace, selector=selector))


def delete(api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
    """Delete with background propagation (dependents are collected by the garbage collector).

    Returns False when the object was already gone, which counts as success."""
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    try:
        _call("DELETE", object_path(api_version, kind, namespace, name), body=body)
    except PermanentKubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def api_resources(api_version: str) -> frozenset[str] | None:
    """The resource names (plurals) the API server serves for a group/version; None when it does
    not serve that group/version at all (discovery answers 404)."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    try:
        data = _call("GET", base)
    except PermanentKubeError as exc:
        if exc.status == 404:
            return None
        raise
    return frozenset(
        r.get("name", "") for r in data.get("resources") or [] if "/" not in r.get("name", "/")
    )


def pod_log_tail(namespace: str, name: str, *, lines: int = 20, limit_bytes: int = 4096) -> str:
    """The last `lines` lines of a pod's log ("" when the pod or its log is gone)."""
    path = object_path("v1", "Pod", namespace, name) + "/log"
    query = [("tailLines", str(lines)), ("limitBytes", str(limit_bytes))]
    try:
        data = _call_raw("GET", path, query=query, accept="text/plain, */*")
    except PermanentKubeError as exc:
        if exc.status in (400, 404):  # gone, or a container that never started
            return ""
        raise
    return data.decode("utf-8", errors="replace")


def delete_object(obj: dict[str, Any]) -> bool:
    api_version, kind, namespace, name = _meta(obj)
    return delete(api_version, kind, name, namespace)
