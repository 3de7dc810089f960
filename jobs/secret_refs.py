"""Secret references in jobs: env values taken from a credential, credential files, image pull
secrets, and the warning for plain values that look like credentials. Pure functions.

A job names credentials, never their values: env `{"HF_TOKEN": {"secret": "hf", "key": "token"}}`
becomes `valueFrom.secretKeyRef` on the credential's Secret, `secret_files: [{"secret": "gcp",
"path": "/var/run/gcp"}]` a read-only secret volume. A registry login of the project is the
pod's imagePullSecret when the job's image is on its server. Errors name the field
(`env.HF_TOKEN`, `secret_files[0].path`) like every other validation error.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from credentials.manifests import secret_name
from credentials.registry import image_registry

SECRET_KIND = "secret"  # noqa: S105 - a credential kind, not a password
REGISTRY_KIND = "registry"
MAX_SECRET_FILES = 16
PATH_MAX = 256
# Mounting over these would break the container or hide what the platform puts there.
SYSTEM_PREFIXES = (
    "/proc",
    "/sys",
    "/dev",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/usr",
    "/boot",
    "/root",
    "/var/run/secrets/kubernetes.io",
    "/run/secrets/kubernetes.io",
)
# Directories a secret may live under but not replace whole.
SYSTEM_DIRS = frozenset(
    {"/", "/tmp", "/var", "/run", "/var/run", "/home", "/opt", "/srv", "/mnt"}  # noqa: S108 - paths refused, not used
)
_PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
# Names that suggest a credential: *_TOKEN, *_KEY, anything with PASSWORD or SECRET.
_CREDENTIAL_NAME_RE = re.compile(r"(?:^|_)(?:TOKEN|KEY)$|PASSWORD|SECRET|PASSWD", re.IGNORECASE)


@dataclass(frozen=True)
class CredentialFacts:
    """What validation knows of a project's credential (no values)."""

    name: str
    kind: str  # secret | registry
    keys: tuple[str, ...] = ()
    server: str = ""


@dataclass(frozen=True)
class SecretEnv:
    """An env variable taken from a Secret key (resolved: the Secret's object name)."""

    name: str
    secret_name: str
    key: str


@dataclass(frozen=True)
class SecretFile:
    """A credential's Secret mounted read-only at a path (resolved names)."""

    volume_name: str
    secret_name: str
    path: str


def is_reference(value: Any) -> bool:
    """Whether an env value is a secret reference (a dict) rather than a plain string."""
    return isinstance(value, dict)


def looks_like_credential(name: str) -> bool:
    """The one rule for env names whose plain values deserve a warning (a credential is safer)."""
    return bool(_CREDENTIAL_NAME_RE.search(name))


def plain_credential_warnings(env: Mapping[str, Any]) -> list[str]:
    """A sentence per plain env value whose name looks like a credential (sorted by name)."""
    names = sorted(n for n, v in env.items() if isinstance(v, str) and looks_like_credential(n))
    return [
        f"env.{name} looks like a credential given as a plain value: it is stored with the job "
        "and shown to the project's members. Store it as a project credential and reference it: "
        f'{{"{name}": {{"secret": "<credential>", "key": "<key>"}}}}.'
        for name in names
    ]


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def check_env_refs(
    env: Mapping[str, Any], credentials: Mapping[str, CredentialFacts], project: str
) -> dict[str, list[str]]:
    """Errors for the env values that are references, keyed `env.<NAME>`."""
    errors: dict[str, list[str]] = {}
    for name, value in env.items():
        if not is_reference(value):
            continue
        field = f"env.{name}"
        if set(value) != {"secret", "key"} or not all(
            isinstance(value[k], str) and value[k] for k in ("secret", "key")
        ):
            errors[field] = [
                'A reference is {"secret": "<credential>", "key": "<key>"}; or give a string.'
            ]
            continue
        credential = credentials.get(value["secret"])
        if credential is None:
            errors[field] = [
                f"No credential {value['secret']!r} in project {project}; its credentials: "
                f"{_listing(credentials)}."
            ]
        elif credential.kind != SECRET_KIND:
            errors[field] = [
                f"{credential.name!r} is a registry login: it is used to pull images, not as an "
                "environment variable."
            ]
        elif value["key"] not in credential.keys:
            errors[field] = [
                f"Credential {credential.name!r} has no key {value['key']!r}; its keys: "
                f"{_listing(credential.keys)}."
            ]
    return errors


def _path_problem(path: Any) -> str | None:
    if not isinstance(path, str) or not path:
        return "A mount path is required, e.g. /var/run/gcp."
    if len(path) > PATH_MAX:
        return f"The path is {len(path)} characters; at most {PATH_MAX}."
    if not _PATH_RE.match(path):
        return f"{path!r} is not an absolute path of letters, digits, '.', '_', '-' and '/'."
    normal = posixpath.normpath(path)
    if normal != path.rstrip("/") or ".." in path.split("/"):
        return f"{path!r} is not a plain absolute path (no '..', '.', '//' or trailing '/')."
    if normal in SYSTEM_DIRS:
        example = f"{normal.rstrip('/')}/gcp"
        return f"{path} would hide the whole directory; mount under it, e.g. {example}."
    for prefix in SYSTEM_PREFIXES:
        if normal == prefix or normal.startswith(prefix + "/"):
            return f"{path} is a system path ({prefix}); choose e.g. /var/run/<name>."
    return None


def check_secret_files(
    files: Any, credentials: Mapping[str, CredentialFacts], project: str
) -> dict[str, list[str]]:
    """Errors for `secret_files`, keyed `secret_files`, `secret_files[i]` or
    `secret_files[i].secret` / `.path`."""
    if files in (None, ()):
        return {}
    if not isinstance(files, list | tuple):
        return {"secret_files": ['A list of {"secret": "<credential>", "path": "/mount/path"}.']}
    errors: dict[str, list[str]] = {}
    if len(files) > MAX_SECRET_FILES:
        errors["secret_files"] = [f"{len(files)} secret files; at most {MAX_SECRET_FILES}."]
    seen_paths: list[tuple[int, str]] = []
    seen_secrets: dict[str, int] = {}
    for index, item in enumerate(files):
        where = f"secret_files[{index}]"
        if not isinstance(item, dict) or set(item) != {"secret", "path"}:
            errors[where] = ['Each item is {"secret": "<credential>", "path": "/mount/path"}.']
            continue
        name = item["secret"]
        credential = credentials.get(name) if isinstance(name, str) else None
        if credential is None:
            errors[f"{where}.secret"] = [
                f"No credential {name!r} in project {project}; its credentials: "
                f"{_listing(credentials)}."
            ]
        elif credential.kind != SECRET_KIND:
            errors[f"{where}.secret"] = [
                f"{credential.name!r} is a registry login: it is used to pull images, not "
                "mounted as files."
            ]
        elif name in seen_secrets:
            errors[f"{where}.secret"] = [
                f"Credential {name!r} is already mounted by secret_files[{seen_secrets[name]}]."
            ]
        else:
            seen_secrets[name] = index
        problem = _path_problem(item["path"])
        if problem:
            errors[f"{where}.path"] = [problem]
            continue
        path = posixpath.normpath(item["path"])
        for other_index, other in seen_paths:
            if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                errors[f"{where}.path"] = [
                    f"{path} overlaps secret_files[{other_index}].path ({other})."
                ]
                break
        seen_paths.append((index, path))
    return errors


def resolve_env(env: Mapping[str, Any]) -> tuple[dict[str, str], tuple[SecretEnv, ...]]:
    """Split a stored env into plain values and Secret key references (resolved names)."""
    plain = {name: value for name, value in env.items() if not is_reference(value)}
    refs = tuple(
        SecretEnv(name=name, secret_name=secret_name(value["secret"]), key=value["key"])
        for name, value in sorted(env.items())
        if is_reference(value)
    )
    return plain, refs


def resolve_files(files: Iterable[Mapping[str, str]]) -> tuple[SecretFile, ...]:
    return tuple(
        SecretFile(
            volume_name=f"cred-{item['secret']}",
            secret_name=secret_name(item["secret"]),
            path=posixpath.normpath(item["path"]),
        )
        for item in files
    )


def pull_secrets_for(image: str, credentials: Iterable[CredentialFacts]) -> tuple[str, ...]:
    """The Secrets of the project's registry logins for the image's registry (name order)."""
    registry = image_registry(image)
    return tuple(
        secret_name(c.name)
        for c in sorted(credentials, key=lambda c: c.name)
        if c.kind == REGISTRY_KIND and c.server == registry
    )
