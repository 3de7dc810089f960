"""Workspace resource shapes: the text form admins and users write, and what a job gets. Pure.

A shape is one of:
- ``gpu:N``      N whole GPUs (1 to 8) in one pod;
- ``mig:PROFILE`` one MIG instance, e.g. ``mig:1g.10gb``;
- ``fraction:F`` a share of one GPU (0 < F < 1): a single-pod job with gpu_fraction, which
  only a KAI pool that allows fractions admits (jobs.validation says why otherwise).

Errors are sentences for the researcher; the caller names the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from jobs.validation import MAX_GPUS_PER_POD
from quotas import mig

GPU, MIG, FRACTION = "gpu", "mig", "fraction"
_SHAPE_RE = re.compile(r"^(gpu|mig|fraction):(\S+)$")


class ShapeError(ValueError):
    pass


@dataclass(frozen=True)
class Shape:
    kind: str  # gpu | mig | fraction
    gpus: int = 0
    mig_profile: str = ""
    fraction: Decimal | None = None

    def __str__(self) -> str:
        if self.kind == MIG:
            return f"{MIG}:{self.mig_profile}"
        if self.kind == FRACTION:
            return f"{FRACTION}:{self.fraction}"
        return f"{GPU}:{self.gpus}"

    @property
    def label(self) -> str:
        if self.kind == MIG:
            return f"MIG slice {self.mig_profile}"
        if self.kind == FRACTION:
            return f"{int((self.fraction or 0) * 100)}% of a GPU"
        return "1 GPU" if self.gpus == 1 else f"{self.gpus} GPUs"

    def job_fields(self) -> dict[str, object]:
        """The job request fields for this shape (jobs.validation checks them again)."""
        if self.kind == MIG:
            return {"kind": "mig", "mig_profile": self.mig_profile}
        if self.kind == GPU:
            return {"kind": "single", "gpus": self.gpus}
        return {"kind": "single", "gpus": 0, "gpu_fraction": str(self.fraction)}


def parse_shape(text: str) -> Shape:
    """The shape for its text form; ShapeError with the reason otherwise."""
    match = _SHAPE_RE.match((text or "").strip())
    if not match:
        raise ShapeError(
            f"{text!r} is not a shape: write gpu:N (whole GPUs), mig:PROFILE (e.g. mig:1g.10gb) "
            "or fraction:F (e.g. fraction:0.5)."
        )
    kind, value = match.groups()
    if kind == GPU:
        if not value.isdigit() or not 1 <= int(value) <= MAX_GPUS_PER_POD:
            raise ShapeError(f"gpu:{value}: the number of GPUs must be 1 to {MAX_GPUS_PER_POD}.")
        return Shape(GPU, gpus=int(value))
    if kind == MIG:
        if not mig.PROFILE_RE.match(value):
            raise ShapeError(f"mig:{value}: a MIG profile looks like 1g.10gb or 3g.40gb.")
        return Shape(MIG, mig_profile=value)
    try:
        share = Decimal(value)
    except InvalidOperation:
        share = Decimal(-1)
    if not (Decimal(0) < share < Decimal(1)):
        raise ShapeError(f"fraction:{value}: a fraction is a number between 0 and 1, e.g. 0.5.")
    return Shape(FRACTION, fraction=share.normalize())


def check_allowed(shape_text: str, allowed: list[str], *, kind_name: str) -> Shape:
    """The shape if the kind allows it; ShapeError with the reason. Whether a pool of the
    project can run it is the job validation's answer (a fraction needs a KAI pool)."""
    shape = parse_shape(shape_text)
    allowed_shapes = [str(parse_shape(a)) for a in allowed]
    if str(shape) not in allowed_shapes:
        raise ShapeError(
            f"{kind_name} does not allow {shape}; allowed: {', '.join(allowed_shapes) or 'none'}."
        )
    return shape
