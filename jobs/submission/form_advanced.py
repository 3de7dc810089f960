"""The submit form's "Advanced" fields as text, turned into the API's request shape, and the API's
error keys turned back into form fields.

Pure functions (no database): the form (jobs/forms.py) parses its textareas with these, so the
web form sends exactly what a REST client sends (mounts, env references, secret_files, array,
sweep, parallelism) and the same validation (jobs.validation, jobs.arrays.shape) runs on it.
"""

from __future__ import annotations

import math
import re
from typing import Any

_INT_RE = re.compile(r"^[+-]?\d+$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")


class TextError(ValueError):
    """A line of a textarea that cannot be read; the message says which and how to write it."""


def sweep_value(text: str) -> Any:
    """A sweep value as typed: numbers become numbers (0.01, 32), anything else stays text."""
    text = text.strip()
    if _INT_RE.match(text):
        return int(text)
    if _FLOAT_RE.match(text):
        number = float(text)
        if math.isfinite(number):
            return number
    return text


def _lines(text: str):
    for number, line in enumerate((text or "").splitlines(), 1):
        if line.strip():
            yield number, line.strip()


def parse_sweep(text: str) -> dict[str, list[Any]]:
    """`name=v1,v2` per line → {"name": [v1, v2]} (the grid's order is the lines' order)."""
    grid: dict[str, list[Any]] = {}
    for number, line in _lines(text):
        name, sep, values = line.partition("=")
        name = name.strip()
        if not sep or not name:
            raise TextError(f"Line {number} is not name=value1,value2 (e.g. lr=0.1,0.01).")
        if name in grid:
            raise TextError(f"Line {number}: {name} is already listed; one line per parameter.")
        items = [v.strip() for v in values.split(",")]
        if not values.strip() or any(not v for v in items):
            raise TextError(f"Line {number}: {name} needs values separated by commas, none empty.")
        grid[name] = [sweep_value(v) for v in items]
    return grid


def parse_secret_env(text: str) -> dict[str, dict[str, str]]:
    """`NAME=credential/key` per line → {"NAME": {"secret": credential, "key": key}}."""
    env: dict[str, dict[str, str]] = {}
    for number, line in _lines(text):
        name, sep, ref = line.partition("=")
        credential, slash, key = ref.strip().partition("/")
        name = name.strip()
        if not sep or not name or not slash or not credential.strip() or not key.strip():
            raise TextError(f"Line {number} is not NAME=credential/key (e.g. HF_TOKEN=hf/token).")
        env[name] = {"secret": credential.strip(), "key": key.strip()}
    return env


def parse_secret_files(text: str) -> list[dict[str, str]]:
    """`credential:/path` per line → [{"secret": credential, "path": "/path"}]."""
    files: list[dict[str, str]] = []
    for number, line in _lines(text):
        credential, sep, path = line.partition(":")
        if not sep or not credential.strip() or not path.strip():
            raise TextError(f"Line {number} is not credential:/path (e.g. gcp:/var/run/gcp).")
        files.append({"secret": credential.strip(), "path": path.strip()})
    return files


def parse_device(text: str) -> dict[str, str]:
    """`key=value` pairs, separated by commas or lines → a DRA device request (the API's
    `device`; the validation checks the keys and values)."""
    device: dict[str, str] = {}
    for part in text.replace("\n", ",").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise TextError(f"'{part.strip()}' is not KEY=value, e.g. min_memory=40Gi.")
        device[key.strip()] = value.strip()
    return device


def device_text(device: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in device.items())


def env_reference_text(env: dict[str, Any]) -> tuple[dict[str, str], str]:
    """A request's env split into the plain values and the references as textarea lines."""
    plain = {k: v for k, v in env.items() if not isinstance(v, dict)}
    refs = [f"{k}={v.get('secret')}/{v.get('key')}" for k, v in env.items() if k not in plain]
    return plain, "\n".join(refs)


def sweep_text(grid: dict[str, list[Any]]) -> str:
    def text(value: Any) -> str:
        return value if isinstance(value, str) else str(value).lower()

    return "\n".join(f"{k}={','.join(text(v) for v in vs)}" for k, vs in grid.items())


_ITEM_RE = re.compile(r"^(mounts|secret_files)\[(\d+)\](?:\.(\w+))?$")


def form_field_for(
    key: str,
    message: str,
    *,
    volumes: list[str],
    secret_env: set[str],
) -> tuple[str, str]:
    """(form field, message in words) for one API error key: `mounts[0].path` lands by the
    volumes with the volume's name, `env.HF_TOKEN` by the credential lines (or the plain env),
    `array` by the array count. `volumes` are the chosen volumes in the order sent."""
    item = _ITEM_RE.match(key)
    if item:
        kind, index, _ = item.group(1), int(item.group(2)), item.group(3)
        if kind == "mounts":
            name = volumes[index] if index < len(volumes) else f"mount {index + 1}"
            return "volumes", f"Volume {name}: {message}"
        return "secret_files", f"Line {index + 1}: {message}"
    if key.startswith("env."):
        name = key.removeprefix("env.")
        return ("secret_env" if name in secret_env else "env"), f"{name}: {message}"
    if key.startswith("device."):
        return "device", f"{key.removeprefix('device.')}: {message}"
    if key == "mounts":
        return "volumes", message
    if key == "array":
        return "array_count", message
    return key, message
