"""Right-sizing from a finished job's GPU metrics (pure): what smaller request would have fit.

A one-GPU job fits a MIG slice when its peak memory, with headroom, fits the slice's memory and
its mean utilisation, with headroom, fits the slice's share of the compute; the smallest such
profile of the GPU's model is named (only profiles the pool offers are considered when it
offers some). A multi-GPU single-pod job whose mean utilisation would fit on fewer GPUs is told
how many. Nothing is said without enough evidence (no utilisation or memory reading).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from quotas import mig

HEADROOM = 1.2  # 20 % above the peak memory and the mean utilisation
MIB_PER_GB = 1024


@dataclass(frozen=True)
class Usage:
    gpus: int  # whole GPUs per pod
    pods: int
    gpu_model: str
    util_mean: float | None  # % over the run, per GPU
    fb_peak_mib: float | None
    fb_total_mib: float | None
    gpu_hours: float = 0.0


@dataclass(frozen=True)
class Suggestion:
    kind: str  # "mig" | "fewer"
    profile: str = ""  # for mig
    gpus: int = 0  # for fewer
    needed_gpu_hours: float = 0.0  # what the smaller request would have held

    def describe(self) -> str:
        if self.kind == "mig":
            return f"a {self.profile} slice would have fit"
        plural = "GPU" if self.gpus == 1 else "GPUs"
        return f"{self.gpus} {plural} would have been enough"


def _gib(mib: float) -> str:
    return f"{mib / 1024:.0f} GiB"


def evidence_text(usage: Usage) -> str:
    """'peak memory 18 GiB of 80 and utilisation 22 %'."""
    parts = []
    if usage.fb_peak_mib is not None:
        total = f" of {usage.fb_total_mib / 1024:.0f}" if usage.fb_total_mib else ""
        parts.append(f"peak memory {_gib(usage.fb_peak_mib)}{total}")
    if usage.util_mean is not None:
        parts.append(f"utilisation {usage.util_mean:.0f} %")
    return " and ".join(parts)


def suggest(usage: Usage, *, offered_profiles: Sequence[str] = ()) -> Suggestion | None:
    """The smaller request that would have fit, or None (it used what it had, or no data)."""
    if usage.util_mean is None or usage.fb_peak_mib is None or usage.pods != 1:
        return None
    if usage.gpus == 1:
        family = mig.family_for_model(usage.gpu_model)
        if family is None:
            return None
        need_memory = usage.fb_peak_mib * HEADROOM
        need_compute = usage.util_mean / 100 * HEADROOM
        for profile in family.profiles:  # table order: smallest first
            if offered_profiles and profile.name not in offered_profiles:
                continue
            if profile.media_extensions:
                continue
            if profile.memory_gb * MIB_PER_GB * 0.93 < need_memory:  # GB as NVIDIA rounds it
                continue
            if float(profile.compute_fraction) < need_compute:
                continue
            if profile.compute_slices >= family.compute_slices:
                return None  # the whole GPU
            share = float(profile.compute_fraction)
            return Suggestion(
                kind="mig", profile=profile.name, needed_gpu_hours=usage.gpu_hours * share
            )
        return None
    if usage.gpus > 1:
        needed = max(1, math.ceil(usage.gpus * usage.util_mean / 100 * HEADROOM))
        per_gpu_memory_ok = usage.fb_total_mib is None or usage.fb_peak_mib <= usage.fb_total_mib
        if needed < usage.gpus and per_gpu_memory_ok:
            return Suggestion(
                kind="fewer",
                gpus=needed,
                needed_gpu_hours=usage.gpu_hours * needed / usage.gpus,
            )
    return None


@dataclass(frozen=True)
class ProjectMonth:
    jobs: int  # finished jobs with metrics
    oversized_jobs: int
    gpu_hours: float
    oversized_gpu_hours: float  # GPU-hours of the jobs that could have been smaller
    saved_gpu_hours: float  # what the smaller requests would have left free


def project_month(rows: Sequence[tuple[Usage, Suggestion | None]]) -> ProjectMonth:
    oversized = [(u, s) for u, s in rows if s is not None]
    oversized_hours = sum(u.gpu_hours for u, _ in oversized)
    return ProjectMonth(
        jobs=len(rows),
        oversized_jobs=len(oversized),
        gpu_hours=sum(u.gpu_hours for u, _ in rows),
        oversized_gpu_hours=oversized_hours,
        saved_gpu_hours=oversized_hours - sum(s.needed_gpu_hours for _, s in oversized),
    )
