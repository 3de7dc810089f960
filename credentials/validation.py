"""Rules for credential input. Pure; every error names the field and never quotes a value."""

from __future__ import annotations

import re
from typing import Any

from credentials.models import CREDENTIAL_NAME_MAX, CredentialKind
from credentials.registry import normalize_server

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Secret data keys: what Kubernetes accepts (and "." / ".." it refuses).
KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
MAX_KEYS = 64
# A Secret holds at most 1 MiB; leave room for base64 and metadata.
MAX_VALUES_BYTES = 512 * 1024

Errors = dict[str, list[str]]


def _add(errors: Errors, name: str, message: str) -> None:
    errors.setdefault(name, []).append(message)


def validate_name(name: Any, errors: Errors) -> None:
    if not isinstance(name, str) or not name:
        _add(errors, "name", "A name is required, e.g. hf or gcp-sa.")
    elif len(name) > CREDENTIAL_NAME_MAX or not NAME_RE.match(name):
        _add(
            errors,
            "name",
            f"{name!r} is not a valid name: lower-case letters, digits and '-', starting and "
            f"ending with a letter or digit, at most {CREDENTIAL_NAME_MAX} characters.",
        )


def validate_kind(kind: Any, errors: Errors) -> None:
    if kind not in CredentialKind.values:
        _add(
            errors, "kind", "Choose secret (key/value pairs) or registry (an image registry login)."
        )


def validate_values(values: Any, errors: Errors, *, required: bool) -> None:
    """Key names and sizes of a secret credential's values (the values are never quoted)."""
    if values is None or values == {}:
        if required:
            _add(errors, "values", 'Give at least one key and its value, e.g. {"token": "…"}.')
        return
    if not isinstance(values, dict):
        _add(errors, "values", "values must be an object of key: value strings.")
        return
    if len(values) > MAX_KEYS:
        _add(errors, "values", f"{len(values)} keys; at most {MAX_KEYS}.")
    size = 0
    for key, value in values.items():
        if not isinstance(key, str) or not KEY_RE.match(key) or key in (".", ".."):
            _add(
                errors,
                "values",
                f"{str(key)[:60]!r} is not a valid key: letters, digits, '-', '_' and '.', "
                "at most 253 characters.",
            )
        if not isinstance(value, str):
            _add(errors, f"values.{str(key)[:60]}", "The value must be a string.")
            continue
        size += len(value.encode())
    if size > MAX_VALUES_BYTES:
        _add(errors, "values", f"The values are {size} bytes; at most {MAX_VALUES_BYTES}.")


def validate_registry(
    *, server: Any, username: Any, token: Any, errors: Errors, server_required: bool = True
) -> str:
    """The normalised server ("" when absent and not required)."""
    normalized = ""
    if server in (None, ""):
        if server_required:
            _add(errors, "server", "A registry server is required, e.g. ghcr.io or docker.io.")
    else:
        normalized = normalize_server(server) or ""
        if not normalized:
            _add(errors, "server", "Not a registry server: give host[:port], e.g. ghcr.io.")
    if not isinstance(username, str) or not username:
        _add(errors, "username", "The registry username is required.")
    elif ":" in username:
        _add(errors, "username", "A registry username cannot contain ':'.")
    if not isinstance(token, str) or not token:
        _add(errors, "token", "The registry token (or password) is required.")
    return normalized
