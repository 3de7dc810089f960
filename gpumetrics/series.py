"""The series the portal keeps per job and GPU, and which DCGM fields they come from.

Pure constants and one pure function; the storage layout (a fixed column order per sample) and
the API (series names) both read this table, so adding a series happens here only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Series:
    name: str
    unit: str
    help: str


# Column order of the stored sample matrix: never reorder, only append.
SERIES: tuple[Series, ...] = (
    Series("util", "%", "GPU utilisation (graphics-engine activity for a MIG instance)"),
    Series("tensor", "%", "Tensor (HMMA) pipe activity"),
    Series("fb_used", "MiB", "Framebuffer used"),
    Series("fb_total", "MiB", "Framebuffer total (used + free + reserved)"),
    Series("power", "W", "Power draw (the whole GPU's, also for a MIG instance)"),
    Series("temp", "C", "GPU temperature"),
    Series("sm_clock", "MHz", "SM clock"),
)
SERIES_NAMES: tuple[str, ...] = tuple(s.name for s in SERIES)
SERIES_INDEX: dict[str, int] = {name: i for i, name in enumerate(SERIES_NAMES)}
WIDTH = len(SERIES)

# The DCGM fields read by the parser (everything else in a scrape is ignored).
UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"
POWER = "DCGM_FI_DEV_POWER_USAGE"
TEMP = "DCGM_FI_DEV_GPU_TEMP"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
XID = "DCGM_FI_DEV_XID_ERRORS"

WANTED_FIELDS: frozenset[str] = frozenset(
    {UTIL, GR_ACTIVE, TENSOR, FB_USED, FB_FREE, FB_RESERVED, POWER, TEMP, SM_CLOCK, XID}
)

NAN = float("nan")


def row_from_fields(fields: dict[str, float], *, mig: bool) -> list[float]:
    """One stored sample (SERIES order) from a device's DCGM field values; NaN where missing.

    Utilisation: DCGM_FI_DEV_GPU_UTIL for a whole GPU; a MIG instance has none (the exporter does
    not report it per instance), so its graphics-engine activity ratio stands in, as a percent.
    Ratios (tensor, graphics engine) are stored as percents so every activity series is 0..100.
    """
    get = fields.get
    util = get(UTIL)
    if util is None or mig:
        gr = get(GR_ACTIVE)
        util = gr * 100.0 if gr is not None else (util if util is not None else NAN)
    tensor = get(TENSOR)
    used = get(FB_USED)
    free = get(FB_FREE)
    total = NAN
    if used is not None and free is not None:
        total = used + free + (get(FB_RESERVED) or 0.0)
    return [
        util,
        tensor * 100.0 if tensor is not None else NAN,
        used if used is not None else NAN,
        total,
        get(POWER, NAN),
        get(TEMP, NAN),
        get(SM_CLOCK, NAN),
    ]


# XID meanings for the common codes (NVIDIA's XID catalogue).
XID_MEANINGS: dict[int, str] = {
    13: "Graphics Engine Exception (often an out-of-range memory access in the program)",
    31: "GPU memory page fault (an illegal memory access by the program)",
    43: "GPU stopped processing (the program was stopped after a fault)",
    48: "Double Bit ECC Error (uncorrectable memory error; the GPU needs a reset)",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus (the GPU is unreachable; the node needs attention)",
    94: "Contained ECC error (the affected application was stopped)",
    95: "Uncontained ECC error (all applications on the GPU were affected; reset needed)",
}


def xid_meaning(code: int) -> str:
    return XID_MEANINGS.get(code, "unknown XID code (see NVIDIA's XID catalogue)")
