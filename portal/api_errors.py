"""One error shape for the whole API: {"detail": str, "errors": {field: [messages]}}."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


def _as_field_errors(detail: Any) -> dict[str, list[str]]:
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for field, messages in detail.items():
            if isinstance(messages, dict):
                for sub, sub_messages in _as_field_errors(messages).items():
                    out[f"{field}.{sub}"] = sub_messages
            elif isinstance(messages, list):
                out[field] = [str(m) for m in messages]
            else:
                out[field] = [str(messages)]
        return out
    if isinstance(detail, list):
        return {"non_field_errors": [str(m) for m in detail]}
    return {"non_field_errors": [str(detail)]}


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = _as_field_errors(exc.detail)
        first_field, first_messages = next(iter(errors.items()), ("", ["invalid input"]))
        summary = (
            first_messages[0]
            if first_field == "non_field_errors"
            else (f"{first_field}: {first_messages[0]}")
        )
        response.data = {"detail": summary, "errors": errors}
        response.status_code = status.HTTP_400_BAD_REQUEST
    elif isinstance(response.data, dict) and "detail" in response.data:
        response.data = {"detail": str(response.data["detail"]), "errors": {}}
    return response
