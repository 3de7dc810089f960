"""One error shape for the whole API: {"detail": str, "errors": {field: [messages]}}.

`detail` is a sentence a person can read; `errors` maps each bad field (dotted for nested input,
"non_field_errors" for the request as a whole) to its messages and is empty when no field is to
blame (401, 403, 404, 405, ...). Domain services raise Django's ValidationError,
PermissionDenied and ObjectDoesNotExist; they are translated here so views stay thin.
`PortalAutoSchema` documents this shape for every operation in the OpenAPI schema.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS as DJANGO_NON_FIELD
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError
from django.db.models import ProtectedError, RestrictedError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults as django_defaults
from drf_spectacular.openapi import AutoSchema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal import outage

logger = logging.getLogger(__name__)

NON_FIELD = "non_field_errors"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "This conflicts with data already stored."
    default_code = "conflict"


def _flatten(detail: Any, prefix: str, out: dict[str, list[str]]) -> None:
    if isinstance(detail, dict):
        for field, messages in detail.items():
            if field == DJANGO_NON_FIELD:
                field = NON_FIELD
            key = str(field) if not prefix or field == NON_FIELD else f"{prefix}.{field}"
            _flatten(messages, key, out)
    elif isinstance(detail, list | tuple):
        for index, item in enumerate(detail):
            if isinstance(item, dict | list | tuple):
                # A nested serializer of a list: errors of item 2 become "field.2.sub".
                if item:
                    _flatten(item, f"{prefix}.{index}" if prefix else str(index), out)
            else:
                out.setdefault(prefix or NON_FIELD, []).append(str(item))
    else:
        out.setdefault(prefix or NON_FIELD, []).append(str(detail))


def field_errors(detail: Any) -> dict[str, list[str]]:
    """Flatten DRF/Django validation details into {field: [messages]}."""
    out: dict[str, list[str]] = {}
    _flatten(detail, "", out)
    return out


def _summary(errors: dict[str, list[str]]) -> str:
    if not errors:
        return "Invalid input."
    field, messages = next(iter(errors.items()))
    first = messages[0] if messages else "invalid"
    return first if field == NON_FIELD else f"{field}: {first}"


def _translate(exc: Exception) -> Exception:
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD: exc.messages}
        return exceptions.ValidationError(detail)
    if isinstance(exc, ObjectDoesNotExist):
        return exceptions.NotFound(str(exc) or "Not found.")
    if isinstance(exc, ProtectedError | RestrictedError):
        return Conflict("Cannot delete this: other records still refer to it.")
    if isinstance(exc, IntegrityError):
        # A rule the services should have checked; answer 409 rather than 500, and log it.
        logger.exception("IntegrityError reached the API error handler")
        return Conflict()
    return exc


def exception_handler(exc: Exception, context: dict) -> Response | None:
    service = outage.unavailable_service(exc)
    if service is not None:
        # The database or Redis is unreachable: 503 + Retry-After, one warning line.
        request = context["request"]
        outage.log_outage(request, service, exc)
        return outage.mark_answered(
            Response({"detail": outage.sentence(service), "errors": {}}, status=503)
        )
    translated = _translate(exc)
    response = drf_exception_handler(translated, context)
    if response is None:
        return None
    if isinstance(translated, exceptions.ValidationError):
        errors = field_errors(translated.detail)
        response.data = {"detail": _summary(errors), "errors": errors}
        response.status_code = status.HTTP_400_BAD_REQUEST
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"]), "errors": {}}
    else:
        errors = field_errors(response.data)
        response.data = {"detail": _summary(errors), "errors": errors}
    return response


class ApiErrorSerializer(serializers.Serializer):
    """The body of every error answer."""

    detail = serializers.CharField(help_text="What went wrong, in a sentence.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Field name (dotted for nested input) → messages; empty when no field is "
        "to blame.",
    )


class PortalAutoSchema(AutoSchema):
    """Documents the error answers every operation can give, all in the ApiError shape."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        writes = self.method in ("POST", "PUT", "PATCH", "DELETE")
        filtered = self.method == "GET" and getattr(self.view, "filterset_class", None)
        paginated = self._is_list_view() and getattr(self.view, "pagination_class", None)
        error_codes = {
            "400": "Invalid input: `errors` names each bad field."
            if writes or filtered or paginated
            else "",
            "401": "Not signed in: send a session cookie or `Authorization: Token <token>`.",
            "403": "Your role in the project does not allow this." if writes else "",
            "404": "No such object, or it belongs to a project you are not a member of."
            if "{" in self.path
            else "",
            # Any body is read by its Content-Type; one the API has no parser for is refused.
            "415": "The body's Content-Type is not one the API reads: send JSON "
            "(`application/json`), a form or multipart form data."
            if self.method in ("POST", "PUT", "PATCH")
            else "",
        }
        for code, description in error_codes.items():
            if description and code not in responses:
                response = self._get_response_for_code(ApiErrorSerializer, code)
                response["description"] = description
                responses[code] = response
        return responses


# --- errors Django answers before (or instead of) a DRF view ------------------------------------
API_PREFIX = "/api/"


def is_api_request(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def api_error_response(status_code: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail, "errors": {}}, status=status_code)


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        detail = f"The request body is larger than {limit} bytes."
        if is_api_request(request):
            return api_error_response(413, detail)
        return HttpResponse(detail, status=413, content_type="text/plain; charset=utf-8")
    if is_api_request(request):
        return api_error_response(400, "Bad request.")
    return django_defaults.bad_request(request, exception)


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_api_request(request):
        return api_error_response(403, "You do not have permission to perform this action.")
    return django_defaults.permission_denied(request, exception)


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if is_api_request(request):
        return api_error_response(404, f"No API endpoint or object at {request.path}.")
    return django_defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    # An outage met outside a view (e.g. saving the session): 503, not a logged 500.
    unavailable = outage.response_for_current_exception(request)
    if unavailable is not None:
        return unavailable
    if is_api_request(request):
        return api_error_response(500, "Server error; it has been logged.")
    return django_defaults.server_error(request)


def document_empty_filters(result: dict, generator, request, public) -> dict:
    """drf-spectacular hook: a filter given empty (`?kind=`) means "no filter", as the HTML
    forms that share the FilterSets send it; say so in each enum query parameter."""
    for path_item in result.get("paths", {}).values():
        for operation in path_item.values():
            for parameter in operation.get("parameters", []) if isinstance(operation, dict) else []:
                if parameter.get("in") != "query":
                    continue
                schema = parameter.get("schema", {})
                target = schema.get("items", schema) if schema.get("type") == "array" else schema
                if "enum" in target and "" not in target["enum"]:
                    target["enum"] = [*target["enum"], ""]
                    parameter["description"] = (
                        parameter.get("description", "") + "\n\nEmpty: no filter."
                    ).strip()
    return result
