"""Kubernetes API errors, rendered as the Status objects kube-apiserver sends."""

from __future__ import annotations

import json

import orjson

REASON_NOT_FOUND = "NotFound"
REASON_ALREADY_EXISTS = "AlreadyExists"
REASON_CONFLICT = "Conflict"
REASON_INVALID = "Invalid"
REASON_BAD_REQUEST = "BadRequest"
REASON_FORBIDDEN = "Forbidden"
REASON_UNAUTHORIZED = "Unauthorized"
REASON_METHOD_NOT_ALLOWED = "MethodNotAllowed"
REASON_GONE = "Expired"
REASON_UNSUPPORTED_MEDIA_TYPE = "UnsupportedMediaType"
REASON_NOT_ACCEPTABLE = "NotAcceptable"
REASON_SERVICE_UNAVAILABLE = "ServiceUnavailable"
REASON_TIMEOUT = "Timeout"
REASON_INTERNAL = "InternalError"


class ApiError(Exception):
    """An error answered to the client as a Kubernetes Status object."""

    def __init__(self, code: int, reason: str, message: str, *, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict:
        """The Status object, its keys in kube-apiserver's order (Go struct order: ... reason,
        details, code), so that its JSON is byte-for-byte what a real cluster sends."""
        body: dict = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = _ordered_details(self.details)
        body["code"] = self.code
        return body

    def body(self) -> bytes:
        """The response body as kube-apiserver writes it (JSON and a trailing newline)."""
        return orjson.dumps(self.status()) + b"\n"

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


_DETAIL_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")


def _ordered_details(details: dict) -> dict:
    """StatusDetails keys in the Go struct's order (name, group, kind, uid, causes, retry)."""
    out = {key: details[key] for key in _DETAIL_ORDER if key in details}
    for key, value in details.items():
        out.setdefault(key, value)
    return out


def _split_group_resource(group_resource: str) -> tuple[str, str]:
    resource, _, group = group_resource.partition(".")
    return resource, group


def _details(group_resource: str, name: str, kind: str | None = None) -> dict:
    resource, group = _split_group_resource(group_resource)
    details: dict = {"name": name, "kind": kind or resource}
    if group:
        details["group"] = group
    return details


def not_found(group_resource: str, name: str) -> ApiError:
    """'jobs.batch "x" not found' (group_resource is "jobs.batch" or "pods")."""
    return ApiError(
        404,
        REASON_NOT_FOUND,
        f'{group_resource} "{name}" not found',
        details=_details(group_resource, name),
    )


def already_exists(group_resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        REASON_ALREADY_EXISTS,
        f'{group_resource} "{name}" already exists',
        details=_details(group_resource, name),
    )


def conflict(group_resource: str, name: str, message: str) -> ApiError:
    return ApiError(
        409,
        REASON_CONFLICT,
        f'Operation cannot be fulfilled on {group_resource} "{name}": {message}',
        details=_details(group_resource, name),
    )


def _quote(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(value, default=str)


def cause(reason: str, field: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field}


def invalid_value(field: str, value, why: str) -> dict:
    return cause("FieldValueInvalid", field, f"Invalid value: {_quote(value)}: {why}")


def required(field: str, why: str = "") -> dict:
    return cause("FieldValueRequired", field, "Required value" + (f": {why}" if why else ""))


def forbidden_field(field: str, why: str) -> dict:
    return cause("FieldValueForbidden", field, f"Forbidden: {why}")


def invalid(kind: str, group: str, name: str, causes: list[dict]) -> ApiError:
    """422 Invalid, message as kube-apiserver writes it (causes joined as [a, b])."""
    qualified = f"{kind}.{group}" if group else kind
    parts = [
        f"{c.get('field', '')}: {c.get('message', '')}" if c.get("field") else c.get("message", "")
        for c in causes
    ]
    if len(parts) == 1:
        joined = parts[0]
    else:
        joined = "[" + ", ".join(parts) + "]"
    details: dict = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(
        422, REASON_INVALID, f'{qualified} "{name}" is invalid: {joined}', details=details
    )


def forbidden(message: str, *, details: dict | None = None) -> ApiError:
    return ApiError(403, REASON_FORBIDDEN, message, details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, REASON_BAD_REQUEST, message)


def unauthorized() -> ApiError:
    return ApiError(401, REASON_UNAUTHORIZED, "Unauthorized")


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, REASON_METHOD_NOT_ALLOWED, message)


def gone(message: str) -> ApiError:
    return ApiError(410, REASON_GONE, message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        REASON_UNSUPPORTED_MEDIA_TYPE,
        f"the body of the request was in an unknown format - accepted media types "
        f"include: application/json-patch+json, application/merge-patch+json, "
        f'application/apply-patch+yaml (got "{content_type}")',
    )


def service_unavailable(
    message: str = "the server is currently unable to handle the request",
) -> ApiError:
    return ApiError(503, REASON_SERVICE_UNAVAILABLE, message)


def internal(message: str) -> ApiError:
    return ApiError(500, REASON_INTERNAL, f"Internal error occurred: {message}")


def too_large_resource_version(requested: int, current: int) -> ApiError:
    return ApiError(
        504,
        REASON_TIMEOUT,
        f"Timeout: Too large resource version: {requested}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )
