"""What a request asks to do, in the terms RBAC rules speak (kube-apiserver's RequestInfo).

/api/v1/namespaces/NS/pods/NAME/log, GET  -> get pods/log "NAME" in NS
/apis/batch/v1/jobs?watch=true            -> watch jobs.batch at the cluster scope
/healthz, /apis, /apis/batch/v1           -> non-resource requests: verb = lower-case method
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesim.api.auth.user import UserInfo

_API_PREFIXES = ("api", "apis")
_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass(slots=True)
class Attributes:
    """authorizer.Attributes: a user, a verb, and either a resource or a non-resource path."""

    user: UserInfo
    verb: str
    resource_request: bool
    path: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def _exact_name(field_selector: str) -> str:
    """The name a fieldSelector pins with metadata.name=X (informers of one object use it)."""
    for term in field_selector.split(","):
        key, sep, value = term.partition("==")
        if not sep:
            key, sep, value = term.partition("=")
        if sep and not key.endswith("!") and key.strip() == "metadata.name":
            value = value.strip()
            if value not in ("", ".", "..") and "/" not in value and "%" not in value:
                return value
    return ""


def request_attributes(user: UserInfo, method: str, path: str, query) -> Attributes:
    """Attributes of an HTTP request; `query` maps parameter names to their first value."""
    verb = method.lower()
    parts = [p for p in path.strip("/").split("/")] if path.strip("/") else []
    attrs = Attributes(user=user, verb=verb, resource_request=False, path=path)
    if len(parts) < 3 or parts[0] not in _API_PREFIXES:
        return attrs
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return attrs
        group, parts = parts[0], parts[1:]
    attrs.resource_request = True
    attrs.api_group = group
    attrs.api_version, parts = parts[0], parts[1:]
    if parts[0] in _SPECIAL_VERBS:
        if len(parts) < 2:
            attrs.verb = ""
            return attrs
        attrs.verb, parts = parts[0], parts[1:]
    else:
        attrs.verb = _METHOD_VERBS.get(method.upper(), "")
    if parts[0] == "namespaces" and len(parts) > 1:
        attrs.namespace = parts[1]
        if len(parts) > 2 and parts[2] not in _NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    if len(parts) >= 3 and attrs.verb != "proxy":
        attrs.subresource = parts[2]
    if len(parts) >= 2:
        attrs.name = parts[1]
    attrs.resource = parts[0]
    if not attrs.name and attrs.verb == "get":
        watch = query.get("watch")
        watching = watch is not None and watch.lower() not in ("false", "0")
        attrs.verb = "watch" if watching else "list"
        selector = query.get("fieldSelector")
        if selector:
            attrs.name = _exact_name(selector)
    if not attrs.name and attrs.verb == "delete":
        attrs.verb = "deletecollection"
    return attrs
