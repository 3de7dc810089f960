"""core/v1 Secrets as kube-apiserver decodes and validates them.

- decoding (`decode_secret`): every `data` value is base64 (Go's []byte in JSON), so a value
  that is not is a 400 from the decoder ("Secret in version "v1" cannot be handled as a Secret:
  illegal base64 data at input byte N"), before validation; `stringData` is write-only: its
  entries are encoded into `data` (overriding a `data` key of the same name) and it is never
  stored or returned; `type` defaults to Opaque;
- validation (`validate_secret`, pkg/apis/core/validation ValidateSecret): data keys are valid
  config keys, the total size is at most 1 MiB, and the typed secrets carry their keys:
  kubernetes.io/dockerconfigjson needs a `.dockerconfigjson` that is a JSON object,
  kubernetes.io/dockercfg a `.dockercfg`, kubernetes.io/basic-auth a username or password,
  kubernetes.io/ssh-auth an ssh-privatekey, kubernetes.io/tls tls.crt and tls.key;
- `docker_auths(secret)`: the registry servers a pull secret holds credentials for (the kubelet's
  keyring, kubesim.controllers.node.pod_config).
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from kubesim.api import errors
from kubesim.api.schema import field_error, invalid, required

OPAQUE = "Opaque"
DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
DOCKER_CFG = "kubernetes.io/dockercfg"
DOCKER_CFG_KEY = ".dockercfg"
MAX_SECRET_SIZE = 1024 * 1024
_CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
CONFIG_KEY_MSG = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
    "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)
_B64_ALPHABET = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
# type -> keys of which at least one (any) or each (all) must be present
_REQUIRED_KEYS = {
    "kubernetes.io/basic-auth": ("any", ("username", "password")),
    "kubernetes.io/ssh-auth": ("all", ("ssh-privatekey",)),
    "kubernetes.io/tls": ("all", ("tls.crt", "tls.key")),
}


def _illegal_byte(text: str) -> int | None:
    """Where Go's base64.StdEncoding stops on text (it skips CR/LF), or None when it decodes."""
    stripped = [(i, c) for i, c in enumerate(text) if c not in "\r\n"]
    chars = "".join(c for _, c in stripped)
    for position, (index, char) in enumerate(stripped):
        if char == "=":
            # padding only in the last quantum, and nothing but padding after it
            if len(chars) % 4 or position < len(chars) - 2 or set(chars[position:]) != {"="}:
                return index
            break
        if char not in _B64_ALPHABET:
            return index
    if len(chars) % 4:
        # an incomplete last quantum: Go reports where that quantum starts
        return len(text) - len(chars) % 4
    try:
        base64.b64decode(chars, validate=True)
    except (binascii.Error, ValueError):
        return len(text)
    return None


def decode_secret(obj: dict) -> None:
    """What the apiserver's decoder and conversion do to a Secret body (in place)."""
    data = obj.get("data")
    if isinstance(data, dict):
        for value in data.values():
            if not isinstance(value, str):
                continue  # the upstream decode reports the wrong type
            at = _illegal_byte(value)
            if at is not None:
                raise errors.bad_request(
                    'Secret in version "v1" cannot be handled as a Secret: illegal base64 data '
                    f"at input byte {at}"
                )
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        merged = dict(data) if isinstance(data, dict) else {}
        for key, value in string_data.items():
            merged[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = merged
    if not obj.get("type"):
        obj["type"] = OPAQUE


def _decoded(data: dict, key: str) -> bytes:
    try:
        return base64.b64decode(data.get(key) or "")
    except (binascii.Error, ValueError):
        return b""


def validate_secret(obj: dict) -> list[dict]:
    data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
    causes: list[dict] = []
    total = 0
    for key, value in data.items():
        if not _CONFIG_KEY_RE.match(key):
            causes.append(invalid(f"data[{key}]", key, CONFIG_KEY_MSG))
        total += len(_decoded(data, key)) if isinstance(value, str) else 0
    if total > MAX_SECRET_SIZE:
        causes.append(
            field_error(
                "FieldValueTooLong", "data", "", f"must have at most {MAX_SECRET_SIZE} bytes"
            )
        )
    kind = obj.get("type") or OPAQUE
    if kind == DOCKER_CONFIG_JSON:
        field = f"data[{DOCKER_CONFIG_JSON_KEY}]"
        if DOCKER_CONFIG_JSON_KEY not in data:
            causes.append(required(field))
        else:
            try:
                json.loads(_decoded(data, DOCKER_CONFIG_JSON_KEY))
            except ValueError as exc:
                causes.append(invalid(field, "<secret contents redacted>", _go_json_error(exc)))
    elif kind == DOCKER_CFG:
        field = f"data[{DOCKER_CFG_KEY}]"
        if DOCKER_CFG_KEY not in data:
            causes.append(required(field))
        else:
            try:
                json.loads(_decoded(data, DOCKER_CFG_KEY))
            except ValueError as exc:
                causes.append(invalid(field, "<secret contents redacted>", _go_json_error(exc)))
    elif kind in _REQUIRED_KEYS:
        mode, keys = _REQUIRED_KEYS[kind]
        if mode == "any" and not any(k in data for k in keys):
            causes.append(
                required(f"data[{keys[0]}]", f"must have at least one of {', '.join(keys)}")
            )
        if mode == "all":
            causes.extend(required(f"data[{k}]") for k in keys if k not in data)
    return causes


def _go_json_error(exc: ValueError) -> str:
    """encoding/json's wording for the usual cases (an empty or truncated document)."""
    text = str(exc)
    if "Expecting value: line 1 column 1 (char 0)" in text:
        return "unexpected end of JSON input"
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid character looking for beginning of value at offset {exc.pos}"
    return text


def validate_secret_update(obj: dict, old: dict) -> list[dict]:
    """`type` cannot change (ValidateSecretUpdate)."""
    if (obj.get("type") or OPAQUE) != (old.get("type") or OPAQUE):
        return [invalid("type", obj.get("type") or OPAQUE, "field is immutable")]
    return []


def _server(name: str) -> str:
    """The registry host of a docker config auths key ("https://reg.example.com/v1/" etc.)."""
    text = name.strip().lower()
    for scheme in ("https://", "http://"):
        if text.startswith(scheme):
            text = text[len(scheme) :]
    return text.split("/", 1)[0]


def docker_auths(secret: dict) -> set[str]:
    """The registry hosts a dockerconfigjson/dockercfg secret has credentials for."""
    data = secret.get("data") or {}
    kind = secret.get("type")
    if kind == DOCKER_CONFIG_JSON:
        raw = _decoded(data, DOCKER_CONFIG_JSON_KEY)
    elif kind == DOCKER_CFG:
        raw = _decoded(data, DOCKER_CFG_KEY)
    else:
        return set()
    try:
        config = json.loads(raw)
    except ValueError:
        return set()
    if not isinstance(config, dict):
        return set()
    auths = config.get("auths") if kind == DOCKER_CONFIG_JSON else config
    if not isinstance(auths, dict):
        return set()
    return {_server(name) for name in auths if isinstance(name, str)}
