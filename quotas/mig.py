"""The table of real MIG (Multi-Instance GPU) profiles per GPU model, and the rules on them.

This module is the one source of truth for MIG profile names in the portal: quota validation,
pool validation, manifest building and the over-subscription arithmetic all ask it.

Data: NVIDIA's MIG User Guide (supported MIG profiles; ``nvidia-smi mig -lgip`` / ``-lgipp``
outputs) and the GPU Operator's default mig-parted config (NVIDIA/gpu-operator v26.7.0). Every
8-memory-slice GPU (A100, H100, H200, B200 …) has the same six instance *shapes*; only the memory
in the profile name differs per model, so the table is written per shape and each model family
names its shapes. The A30 has its own 4-slice family.

GPU model names are keyed the way GPU Feature Discovery labels nodes
(``nvidia.com/gpu.product``: the NVML name with spaces turned into ``-``, for example
``NVIDIA-A100-SXM4-40GB`` or ``NVIDIA-H100-80GB-HBM3``); common variants (``NVIDIA A100-SXM4-40GB``,
``A100-40GB``, ``h100 80gb``, a GFD ``-MIG-<profile>`` or ``-SHARED`` suffix) are accepted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

FULL_GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

# <compute>g.<memory>gb with optional media-extension suffix (+me); compute-instance splits
# (<c>c.<g>g...) are not exposed by the device plugin and so are not valid quota resources.
PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$")


@dataclass(frozen=True)
class Shape:
    """A GPU-instance shape: how many compute and memory slices it takes and where it may start."""

    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]  # allowed start memory slices (nvidia-smi mig -lgipp)
    media_extensions: bool = False  # a +me instance; at most one per GPU


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile of one GPU family, e.g. 1g.10gb on an H100-80GB."""

    name: str
    compute_slices: int
    memory_slices: int
    max_per_gpu: int  # how many of this profile alone fit on one GPU
    starts: tuple[int, ...]
    media_extensions: bool
    gpu_compute_slices: int = 7  # compute slices of the whole GPU (4 on an A30)

    @property
    def compute_fraction(self) -> Fraction:
        """Share of the GPU's compute (SM) slices this instance gets, e.g. 1/7 for a 1g."""
        return Fraction(self.compute_slices, self.gpu_compute_slices)

    @property
    def memory_gb(self) -> int:
        """The memory figure in the profile name (GB as NVIDIA rounds it)."""
        match = PROFILE_RE.match(self.name)
        if match is None:  # the table only holds valid names
            raise ValueError(f"{self.name!r} is not a MIG profile name")
        return int(match.group(2))


@dataclass(frozen=True)
class MigFamily:
    """A GPU family that supports MIG: its slice counts and its profiles in table order."""

    key: str  # e.g. "H100-80GB"
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        return None

    @property
    def profile_names(self) -> list[str]:
        return [profile.name for profile in self.profiles]


# The 8-memory-slice family (A100, H100, H200, B200, GB200): shape → (cs, ms, max, starts).
_SHAPES_8 = {
    "S1": Shape(1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "S1me": Shape(1, 1, (0, 1, 2, 3, 4, 5, 6), media_extensions=True),
    "S1w": Shape(1, 2, (0, 2, 4, 6)),
    "S2": Shape(2, 2, (0, 2, 4)),
    "S3": Shape(3, 4, (0, 4)),
    "S4": Shape(4, 4, (0,)),
    "S7": Shape(7, 8, (0,)),
}
_MAX_8 = {"S1": 7, "S1me": 1, "S1w": 4, "S2": 3, "S3": 2, "S4": 1, "S7": 1}

# Profile names per shape, per family (nvidia.md 1.2); "S1me" only where a +me profile exists.
_NAMES_8: dict[str, dict[str, str]] = {
    "A100-40GB": {
        "S1": "1g.5gb",
        "S1me": "1g.5gb+me",
        "S1w": "1g.10gb",
        "S2": "2g.10gb",
        "S3": "3g.20gb",
        "S4": "4g.20gb",
        "S7": "7g.40gb",
    },
    "A100-80GB": {
        "S1": "1g.10gb",
        "S1me": "1g.10gb+me",
        "S1w": "1g.20gb",
        "S2": "2g.20gb",
        "S3": "3g.40gb",
        "S4": "4g.40gb",
        "S7": "7g.80gb",
    },
    "H100-80GB": {
        "S1": "1g.10gb",
        "S1me": "1g.10gb+me",
        "S1w": "1g.20gb",
        "S2": "2g.20gb",
        "S3": "3g.40gb",
        "S4": "4g.40gb",
        "S7": "7g.80gb",
    },
    "H100-94GB": {
        "S1": "1g.12gb",
        "S1me": "1g.12gb+me",
        "S1w": "1g.24gb",
        "S2": "2g.24gb",
        "S3": "3g.47gb",
        "S4": "4g.47gb",
        "S7": "7g.94gb",
    },
    "H100-96GB": {
        "S1": "1g.12gb",
        "S1w": "1g.24gb",
        "S2": "2g.24gb",
        "S3": "3g.48gb",
        "S4": "4g.48gb",
        "S7": "7g.96gb",
    },
    "H200-141GB": {
        "S1": "1g.18gb",
        "S1me": "1g.18gb+me",
        "S1w": "1g.35gb",
        "S2": "2g.35gb",
        "S3": "3g.71gb",
        "S4": "4g.71gb",
        "S7": "7g.141gb",
    },
    "GH200-144GB": {
        "S1": "1g.18gb",
        "S1w": "1g.36gb",
        "S2": "2g.36gb",
        "S3": "3g.72gb",
        "S4": "4g.72gb",
        "S7": "7g.144gb",
    },
    "B200-180GB": {
        "S1": "1g.23gb",
        "S1me": "1g.23gb+me",
        "S1w": "1g.45gb",
        "S2": "2g.45gb",
        "S3": "3g.90gb",
        "S4": "4g.90gb",
        "S7": "7g.180gb",
    },
    "GB200-186GB": {
        "S1": "1g.23gb",
        "S1w": "1g.47gb",
        "S2": "2g.47gb",
        "S3": "3g.93gb",
        "S4": "4g.93gb",
        "S7": "7g.186gb",
    },
}

# The A30: 4 compute and 4 memory slices.
_A30_PROFILES = (
    MigProfile("1g.6gb", 1, 1, 4, (0, 1, 2, 3), False, 4),
    MigProfile("1g.6gb+me", 1, 1, 1, (0, 1, 2, 3), True, 4),
    MigProfile("2g.12gb", 2, 2, 2, (0, 2), False, 4),
    MigProfile("2g.12gb+me", 2, 2, 1, (0, 2), True, 4),
    MigProfile("4g.24gb", 4, 4, 1, (0,), False, 4),
)


def _family_8(key: str) -> MigFamily:
    profiles = []
    for shape_key, name in _NAMES_8[key].items():
        shape = _SHAPES_8[shape_key]
        profiles.append(
            MigProfile(
                name=name,
                compute_slices=shape.compute_slices,
                memory_slices=shape.memory_slices,
                max_per_gpu=_MAX_8[shape_key],
                starts=shape.starts,
                media_extensions=shape.media_extensions,
            )
        )
    return MigFamily(key=key, memory_slices=8, compute_slices=7, profiles=tuple(profiles))


FAMILIES: dict[str, MigFamily] = {key: _family_8(key) for key in _NAMES_8}
FAMILIES["A30-24GB"] = MigFamily(
    key="A30-24GB", memory_slices=4, compute_slices=4, profiles=_A30_PROFILES
)

# Families whose GFD product name does not carry the memory size default to these.
_DEFAULT_MEMORY = {"A100": "40", "A800": "40", "H100": "80", "H800": "80"}


def normalise_model(gpu_model: str) -> str:
    """The GPU model as GPU Feature Discovery writes it in ``nvidia.com/gpu.product``.

    Spaces and underscores become ``-`` (as GFD does with the NVML name), a missing ``NVIDIA-``
    prefix is added for NVIDIA data-centre parts, and a GFD ``-MIG-<profile>`` / ``-SHARED``
    suffix is dropped. Case is kept, because GFD keeps NVML's case (``NVIDIA-H100-PCIe``).
    """
    model = re.sub(r"[\s_]+", "-", gpu_model.strip())
    model = re.sub(r"-+", "-", model).strip("-")
    model = re.sub(r"-SHARED$", "", model, flags=re.IGNORECASE)
    model = re.sub(r"-MIG-.*$", "", model, flags=re.IGNORECASE)
    if re.match(r"^(A30|A100|A800|H100|H800|H20|H200|GH200|B200|GB200)\b", model, re.IGNORECASE):
        model = f"NVIDIA-{model}"
    return model


def family_for_model(gpu_model: str) -> MigFamily | None:
    """The MIG family of a GPU model, or None when the model does not support MIG (or is unknown).

    >>> family_for_model("NVIDIA-A100-SXM4-40GB").key
    'A100-40GB'
    """
    model = normalise_model(gpu_model).upper()
    memory_match = re.search(r"(\d+)GB?(?![A-Z0-9])", model)  # GH200 writes "144G"
    memory = memory_match.group(1) if memory_match else None
    tokens = set(re.split(r"[-.]", model))
    if "A30" in tokens:
        return FAMILIES["A30-24GB"]
    if "GB200" in tokens:
        return FAMILIES["GB200-186GB"]
    if "B200" in tokens:
        return FAMILIES["B200-180GB"]
    if "GH200" in tokens:
        # GH200 480GB (system memory) pairs the H100-96GB; the 144GB part has HBM3e.
        return FAMILIES["GH200-144GB" if memory == "144" else "H100-96GB"]
    if "H200" in tokens:
        return FAMILIES["H200-141GB"]
    if "H20" in tokens:
        return FAMILIES["H100-96GB"]
    for family in ("H100", "H800"):
        if family in tokens:
            if "NVL" in tokens or memory == "94":
                return FAMILIES["H100-94GB"]
            if memory == "96":
                return FAMILIES["H100-96GB"]
            if memory in (None, _DEFAULT_MEMORY[family], "80"):
                return FAMILIES["H100-80GB"]
            return None
    for family in ("A100", "A800"):
        if family in tokens:
            if memory == "80":
                return FAMILIES["A100-80GB"]
            if memory in (None, _DEFAULT_MEMORY[family]):
                return FAMILIES["A100-40GB"]
            return None
    return None


def is_mig_capable(gpu_model: str) -> bool:
    """Whether the GPU model can be partitioned into MIG instances."""
    return family_for_model(gpu_model) is not None


def profiles_for_model(gpu_model: str) -> list[str]:
    """The MIG profile names of a GPU model in NVIDIA's table order; [] if it has no MIG."""
    family = family_for_model(gpu_model)
    return family.profile_names if family else []


def profile_info(gpu_model: str, profile: str) -> MigProfile:
    """The table row of a profile; raises ValueError like validate_profile when it is not valid."""
    validate_profile(gpu_model, profile)
    family = family_for_model(gpu_model)
    found = family.profile(profile) if family is not None else None
    if found is None:  # validate_profile passed, so the tables disagree with themselves
        raise ValueError(f"{profile} has no table row for {gpu_model}")
    return found


def validate_profile(gpu_model: str, profile: str) -> None:
    """Raise ValueError naming the valid profiles unless ``profile`` is a MIG profile of the model.

    Profile names depend on the model's memory (1g.10gb is one memory slice on an H100-80GB but
    two on an A100-40GB), so validation is always by (model, profile).
    """
    family = family_for_model(gpu_model)
    if family is None:
        raise ValueError(f"{gpu_model} does not support MIG, so it has no profile {profile}.")
    if family.profile(profile) is None:
        valid = ", ".join(family.profile_names)
        raise ValueError(f"{profile} is not a MIG profile of {gpu_model}; valid profiles: {valid}.")


def resource_name(profile: str) -> str:
    """The Kubernetes extended resource of a MIG profile under the device plugin's mixed strategy.

    ``+`` is replaced by ``.``: 1g.10gb → nvidia.com/mig-1g.10gb, 1g.10gb+me →
    nvidia.com/mig-1g.10gb.me.
    """
    if not PROFILE_RE.match(profile):
        raise ValueError(f"{profile!r} is not a MIG profile name (expected e.g. 1g.10gb).")
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def profile_from_resource(resource: str) -> str | None:
    """The inverse of resource_name: nvidia.com/mig-1g.10gb.me → 1g.10gb+me; None otherwise."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    profile = resource[len(MIG_RESOURCE_PREFIX) :]
    if profile.endswith(".me"):
        profile = profile[: -len(".me")] + "+me"
    return profile if PROFILE_RE.match(profile) else None


def layout_fits(gpu_model: str, profiles: Mapping[str, int] | Iterable[str]) -> bool:
    """Whether this multiset of MIG instances can live on ONE GPU of the model at the same time.

    The placement rule of nvidia.md 1.3: every instance gets a start from its profile's allowed
    starts so that the memory ranges [start, start+size) do not overlap, and at most one
    instance has media extensions (+me). Raises ValueError for a profile the model lacks.
    """
    counts = Counter(dict(profiles)) if isinstance(profiles, Mapping) else Counter(profiles)
    family = family_for_model(gpu_model)
    rows = [profile_info(gpu_model, name) for name, n in counts.items() for _ in range(n)]
    if not rows:
        return True
    if family is None:  # profile_info raised already for a model without MIG
        raise ValueError(f"{gpu_model} does not support MIG")
    if sum(1 for row in rows if row.media_extensions) > 1:
        return False
    if sum(row.compute_slices for row in rows) > family.compute_slices:
        return False
    if sum(row.memory_slices for row in rows) > family.memory_slices:
        return False
    # Place the largest instances first; a small backtracking search over at most 8 slices.
    rows.sort(key=lambda row: (-row.memory_slices, len(row.starts)))
    used = [False] * family.memory_slices

    def place(index: int) -> bool:
        if index == len(rows):
            return True
        row = rows[index]
        for start in row.starts:
            span = range(start, start + row.memory_slices)
            if span.stop <= len(used) and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                if place(index + 1):
                    return True
                for s in span:
                    used[s] = False
        return False

    return place(0)
