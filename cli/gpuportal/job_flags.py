"""Issue 12's submit flags (data volumes, /dev/shm, grace, resume, credentials, arrays, sweeps)
turned into the fields of POST /api/v1/jobs/. Shapes only: the portal does the validation."""

from __future__ import annotations

import math
import re
from typing import Any

import click

_INT_RE = re.compile(r"^[+-]?\d+$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
ACCESS = {"ro": True, "rw": False}


def parse_mount(text: str) -> dict[str, Any]:
    """VOLUME[:PATH][:ro|rw] → {"volume", "path"?, "read_only"?}; left out: the volume's own."""
    volume, *rest = text.split(":")
    mount: dict[str, Any] = {"volume": volume}
    if rest and rest[-1] in ACCESS:
        mount["read_only"] = ACCESS[rest.pop()]
    if len(rest) > 1 or not volume or (rest and not rest[0]):
        raise click.BadParameter(
            f"'{text}' is not VOLUME[:PATH][:ro|rw], e.g. imagenet:/data:ro.", param_hint="--mount"
        )
    if rest:
        mount["path"] = rest[0]
    return mount


def sweep_value(text: str) -> Any:
    """Numbers as numbers (0.01, 32), anything else as the text typed."""
    text = text.strip()
    if _INT_RE.match(text):
        return int(text)
    if _FLOAT_RE.match(text) and math.isfinite(float(text)):
        return float(text)
    return text


def parse_sweep(pairs: tuple[str, ...]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for pair in pairs:
        name, sep, values = pair.partition("=")
        items = [v.strip() for v in values.split(",")]
        if not sep or not name or not values or any(not v for v in items):
            raise click.BadParameter(
                f"'{pair}' is not NAME=V1,V2 (e.g. lr=0.1,0.01).", param_hint="--sweep"
            )
        grid[name] = [sweep_value(v) for v in items]
    return grid


def parse_secret_env(pairs: tuple[str, ...]) -> dict[str, dict[str, str]]:
    env: dict[str, dict[str, str]] = {}
    for pair in pairs:
        name, sep, ref = pair.partition("=")
        credential, slash, key = ref.partition("/")
        if not sep or not name or not slash or not credential or not key:
            raise click.BadParameter(
                f"'{pair}' is not NAME=CREDENTIAL/KEY (e.g. HF_TOKEN=hf/token).",
                param_hint="--secret-env",
            )
        env[name] = {"secret": credential, "key": key}
    return env


def parse_device(pairs: tuple[str, ...]) -> dict[str, str]:
    """--device KEY=VALUE pairs: a DRA pool's device by its attributes (the portal checks the
    keys and values; the CLI only checks the shape)."""
    device: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise click.BadParameter(
                f"'{pair}' is not KEY=VALUE (e.g. min_memory=40Gi).", param_hint="--device"
            )
        device[key.strip()] = value.strip()
    return device


def parse_secret_files(items: tuple[str, ...]) -> list[dict[str, str]]:
    files = []
    for item in items:
        credential, sep, path = item.partition(":")
        if not sep or not credential or not path:
            raise click.BadParameter(
                f"'{item}' is not CREDENTIAL:PATH (e.g. gcp:/var/run/gcp).",
                param_hint="--secret-file",
            )
        files.append({"secret": credential, "path": path})
    return files


def advanced_fields(
    *,
    mount: tuple[str, ...] = (),
    shm_size: str | None = None,
    grace: int | None = None,
    resume_from: int | None = None,
    secret_file: tuple[str, ...] = (),
    array: int | None = None,
    sweep: tuple[str, ...] = (),
    parallelism: int | None = None,
) -> dict[str, Any]:
    """The request fields of the flags given (none for a flag left out)."""
    if array is not None and sweep:
        raise click.UsageError(
            "--array and --sweep do not go together (a sweep's size is its grid)."
        )
    if parallelism is not None and array is None and not sweep:
        raise click.UsageError("--parallelism goes with --array or --sweep.")
    body: dict[str, Any] = {}
    if mount:
        body["mounts"] = [parse_mount(m) for m in mount]
    if shm_size:
        body["shm_size"] = shm_size
    if grace is not None:
        body["termination_grace_seconds"] = grace
    if resume_from is not None:
        body["resume_from"] = resume_from
    if secret_file:
        body["secret_files"] = parse_secret_files(secret_file)
    if array is not None:
        body["array"] = {"count": array}
        if parallelism is not None:
            body["array"]["parallelism"] = parallelism
    elif sweep:
        body["sweep"] = parse_sweep(sweep)
        if parallelism is not None:
            body["parallelism"] = parallelism
    return body
