"""portal.api_errors: validation details of any nesting flatten to {field: [messages]}."""

import pytest
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions

from portal.api_errors import exception_handler, field_errors


@pytest.mark.parametrize(
    ("detail", "expected"),
    [
        ({"role": ["bad"]}, {"role": ["bad"]}),
        (["whole request is wrong"], {"non_field_errors": ["whole request is wrong"]}),
        ("just a string", {"non_field_errors": ["just a string"]}),
        ({"spec": {"gpus": ["too many"]}}, {"spec.gpus": ["too many"]}),
        (
            {"pods": [{}, {"image": ["required"]}]},
            {"pods.1.image": ["required"]},
        ),
        ({"tags": ["a", "b"]}, {"tags": ["a", "b"]}),
        ({"__all__": ["clash"]}, {"non_field_errors": ["clash"]}),
    ],
)
def test_field_errors_flattening(detail, expected):
    assert field_errors(detail) == expected


def test_django_validation_error_from_a_service_becomes_a_400():
    response = exception_handler(DjangoValidationError({"role": ["no such role"]}), {})
    assert response.status_code == 400
    assert response.data == {"detail": "role: no such role", "errors": {"role": ["no such role"]}}


def test_plain_django_validation_error_is_non_field():
    response = exception_handler(DjangoValidationError("nope"), {})
    assert response.data == {"detail": "nope", "errors": {"non_field_errors": ["nope"]}}


def test_not_found_keeps_the_shape():
    response = exception_handler(exceptions.NotFound(), {})
    assert response.status_code == 404
    assert response.data == {"detail": "Not found.", "errors": {}}


def test_integrity_error_is_a_409_not_a_500(caplog):
    from django.db import IntegrityError

    response = exception_handler(IntegrityError("duplicate key"), {})
    assert response.status_code == 409
    assert response.data["errors"] == {}
    assert "IntegrityError" in caplog.text


def test_unknown_exceptions_are_left_to_django():
    assert exception_handler(RuntimeError("boom"), {}) is None
