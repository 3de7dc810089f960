"""GPU fractions (issue 25): how much of one GPU a job holds and how to say it. Pure.

A job on a KAI pool may ask for `gpu_fraction` (0 < f < 1) or `gpu_memory` (MiB of one GPU).
KAI turns a memory request into a fraction of the GPU it lands on (memory over the node's
`nvidia.com/gpu.memory`, two decimals); the portal does the same with the pool's GPU memory. The
share is what GPU-hours, quota use and the cluster page count for the job.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal


def job_share(
    gpu_fraction: Decimal | float | None, gpu_memory: int | None, gpu_memory_total: int | None
) -> float | None:
    """The part of one GPU a fractional job holds; None for a job of whole GPUs or MIG."""
    if gpu_fraction is not None:
        return float(gpu_fraction)
    if gpu_memory:
        if not gpu_memory_total:
            return 1.0  # the GPU's memory is unknown: count the whole GPU (never less)
        share = Decimal(gpu_memory) / Decimal(gpu_memory_total)
        return float(min(Decimal(1), share.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)))
    return None


def format_share(share: float) -> str:
    """0.5 → '0.5', 0.25 → '0.25', 0.333… → '0.33'."""
    return format(Decimal(str(round(share, 2))).normalize(), "f")


def share_text(share: float, uuid: str, others: int) -> str:
    """'0.5 of GPU-… (shared with 1 other job)' for the job page."""
    device = uuid or "a shared GPU"
    if others <= 0:
        company = "no other job on it"
    else:
        company = f"shared with {others} other job" + ("" if others == 1 else "s")
    return f"{format_share(share)} of {device} ({company})"
