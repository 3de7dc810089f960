"""Data volumes in a job's pods: the `mounts` request field, /dev/shm and the checkpoint dir.

Pure functions (no database, no cluster), called by jobs.validation; the volumes app reuses the
mount path rule for a volume's default path, so there is one rule for both.

- `mounts` is a list of {"volume": name, "path": "/data", "read_only": true}; the path defaults
  to the volume's default mount path and read_only to the volume's access. Errors name the item,
  e.g. `mounts[1].path`.
- A project's checkpoint volume is mounted at CHECKPOINT_ROOT/<project>/<job name> (subPath
  <project>/<job name>, which the kubelet creates), so the directory is the same for every run
  of the job: after a preemption and requeue (same Job object), and for a job submitted again
  with `resume_from` (it copies the earlier job's directory).
"""

import posixpath
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

CHECKPOINT_ROOT = "/checkpoints"
CHECKPOINT_ENV = "CHECKPOINT_DIR"
# The mount path of the container's shared memory, not a temporary file of ours.
SHM_PATH = "/dev/shm"  # noqa: S108
MAX_MOUNTS = 16
PATH_MAX = 256
DEFAULT_GRACE_SECONDS = 60

# Mounting at, inside or above one of these would hide what the container or the runtime needs
# (or the portal's own mounts: /dev/shm, the checkpoint dir).
SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/run",
    SHM_PATH,
    CHECKPOINT_ROOT,
)
_PATH_CHARS_RE = re.compile(r"^/[A-Za-z0-9._/-]*$")


@dataclass(frozen=True)
class VolumeFacts:
    """A project's data volume as a job sees it."""

    name: str
    claim_name: str
    default_path: str
    read_only: bool
    is_checkpoint: bool = False


@dataclass(frozen=True)
class ResolvedMount:
    volume: str
    claim_name: str
    path: str
    read_only: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "volume": self.volume,
            "claim": self.claim_name,
            "path": self.path,
            "read_only": self.read_only,
        }


def mount_path_error(path: object) -> str | None:
    """Why `path` cannot be a mount path, or None when it can."""
    if not isinstance(path, str) or not path:
        return "A mount path is required, e.g. /data."
    if len(path) > PATH_MAX:
        return f"The path is {len(path)} characters; at most {PATH_MAX}."
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path; use e.g. /data."
    if not _PATH_CHARS_RE.match(path):
        return f"{path!r} may contain only letters, digits, '.', '_', '-' and '/'."
    if posixpath.normpath(path) != path or path.startswith("//"):
        return (
            f"{path!r} is not a plain path (no '..', '.', '//' or trailing '/'); "
            f"use {posixpath.normpath(path)!r}."
        )
    if path == "/":
        return "Mounting at / would hide the whole image; choose a directory such as /data."
    for system in SYSTEM_PATHS:
        if path == system or path.startswith(system + "/"):
            return f"{path} would shadow {system}, which the container needs; choose e.g. /data."
        if system.startswith(path + "/"):
            return f"{path} would hide {system}, which the container needs; choose e.g. /data."
    return None


def _field(index: int, name: str) -> str:
    return f"mounts[{index}].{name}"


def resolve_mounts(
    raw: object, volumes: dict[str, VolumeFacts], *, project_slug: str
) -> tuple[list[ResolvedMount], dict[str, list[str]]]:
    """The request's mounts resolved against the project's volumes, and the errors by field."""
    errors: dict[str, list[str]] = {}
    if raw is None:
        return [], errors
    if not isinstance(raw, list):
        return [], {
            "mounts": ['mounts must be a list, e.g. [{"volume": "data", "path": "/data"}].']
        }
    if len(raw) > MAX_MOUNTS:
        return [], {"mounts": [f"{len(raw)} mounts; at most {MAX_MOUNTS}."]}
    resolved: list[ResolvedMount] = []
    taken: dict[str, int] = {}
    listing = ", ".join(sorted(volumes)) or "none"
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            errors.setdefault(f"mounts[{index}]", []).append(
                'Each mount is an object: {"volume": name, "path": "/data", "read_only": true}.'
            )
            continue
        unknown = sorted(set(item) - {"volume", "path", "read_only"})
        for key in unknown:
            errors.setdefault(_field(index, str(key)), []).append(
                "Unknown field; a mount takes only volume, path and read_only."
            )
        name = item.get("volume")
        volume = volumes.get(name) if isinstance(name, str) else None
        if not isinstance(name, str) or not name:
            errors.setdefault(_field(index, "volume"), []).append(
                "Name one of the project's volumes."
            )
        elif volume is None:
            errors.setdefault(_field(index, "volume"), []).append(
                f"Project {project_slug} has no volume {name!r}; its volumes: {listing}."
            )
        path = item.get("path")
        if path is None and volume is not None:
            path = volume.default_path
        if path is not None or volume is not None:
            problem = mount_path_error(path)
            if problem:
                errors.setdefault(_field(index, "path"), []).append(problem)
            elif path in taken:
                errors.setdefault(_field(index, "path"), []).append(
                    f"mounts[{taken[path]}] is already mounted at {path}; one mount per path."
                )
            else:
                taken[path] = index
        read_only = item.get("read_only")
        if read_only is not None and not isinstance(read_only, bool):
            errors.setdefault(_field(index, "read_only"), []).append("read_only is true or false.")
            continue
        if volume is None:
            continue
        if read_only is False and volume.read_only:
            errors.setdefault(_field(index, "read_only"), []).append(
                f"Volume {volume.name} is read-only; it cannot be mounted for writing."
            )
            continue
        resolved.append(
            ResolvedMount(
                volume=volume.name,
                claim_name=volume.claim_name,
                path=path,
                read_only=volume.read_only if read_only is None else read_only,
            )
        )
    return resolved, errors


def checkpoint_dir(project_slug: str, job_name: str) -> str:
    """Where a job keeps its checkpoints: stable for the job's name in its project."""
    return f"{CHECKPOINT_ROOT}/{project_slug}/{job_name}"


def checkpoint_sub_path(directory: str) -> str:
    """The directory inside the checkpoint volume (the volumeMount's subPath)."""
    return directory.removeprefix(CHECKPOINT_ROOT + "/")


def default_shm_bytes(memory_bytes: Decimal, cap_bytes: Decimal) -> Decimal:
    """Half the pod's memory request, at most the pool's cap, in whole MiB."""
    half = min(memory_bytes / 2, cap_bytes)
    mib = Decimal(2**20)
    return max(mib, (half / mib).to_integral_value(rounding="ROUND_FLOOR") * mib)
