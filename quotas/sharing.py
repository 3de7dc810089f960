"""How a pool shares its GPUs: the one source of truth for sharing modes (issue 26).

A pool is ``exclusive`` (one pod per GPU), ``time-slicing`` (N replicas per GPU, taken in turns)
or ``mps`` (N clients per GPU under the MPS control daemon), as the NVIDIA device plugin
configures it; independently it may be DRA-managed (the NVIDIA DRA driver publishes the GPUs as
ResourceSlices and pods ask for them through ResourceClaims).

Facts (copied, not referenced at run time): NVIDIA k8s-device-plugin v0.20.0 (commit 1b826acc,
Apache-2.0) ``api/config/v1/sharing.go`` and README; dra-driver-nvidia-gpu v0.4.1 (commit
764900e7, Apache-2.0) ``cmd/gpu-kubelet-plugin/deviceinfo.go`` and ``api/.../sharing.go``.

Pure functions only: the model, the admin form, job validation, the manifests and the pages ask
this module, and tests/quotas/test_sharing.py tables it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

EXCLUSIVE = "exclusive"
TIME_SLICING = "time-slicing"
MPS = "mps"
MODES = (EXCLUSIVE, TIME_SLICING, MPS)
MODE_LABELS = {EXCLUSIVE: "Exclusive", TIME_SLICING: "Time-slicing", MPS: "MPS"}

MIN_REPLICAS = 2  # the plugin refuses fewer: "number of replicas must be >= 2"
MAX_REPLICAS = 64  # the portal's ceiling: more shares than this is never a useful GPU
MAX_MPS_CLIENTS = 48  # CUDA MPS serves at most 48 clients per GPU

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"  # renameByDefault: nvidia.com/gpu.shared
CONFIG_LABEL = "nvidia.com/device-plugin.config"  # selects the plugin's config per node
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
PRODUCT_LABEL = "nvidia.com/gpu.product"
SHARED_PRODUCT_SUFFIX = "-SHARED"

# The DRA driver's sharing settings are alpha feature gates, off by default.
DRA_GATES = {TIME_SLICING: "TimeSlicingSettings", MPS: "MPSSupport"}
DRA_DRIVER = "gpu.nvidia.com"
DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_MIG_CLASS = "mig.nvidia.com"

# What the user is told, one sentence per kind of GPU they get.
ISOLATION = {
    EXCLUSIVE: "Exclusive: the whole GPU is yours; no other job runs on it.",
    TIME_SLICING: (
        "Time-slicing: jobs on this GPU take turns on its compute and share its memory with no "
        "isolation, so one job can exhaust the GPU's memory for all of them."
    ),
    MPS: (
        "MPS: the GPU's compute is partitioned between jobs and each job has its own memory "
        "limit, but a fault in one client can still affect the others."
    ),
    "mig": "MIG: a hardware-isolated slice of the GPU with its own compute and memory.",
}
WHOLE_DEVICE_NOTE = "shared GPU: figures are for the whole device"


def isolation_sentence(mode: str, *, mig: bool = False) -> str:
    """The sentence the submit form and the job page show for this kind of GPU."""
    return ISOLATION["mig"] if mig else ISOLATION.get(mode, ISOLATION[EXCLUSIVE])


def is_shared(mode: str) -> bool:
    return mode in (TIME_SLICING, MPS)


def replicas_per_gpu(mode: str, replicas: int | None) -> int:
    """How many jobs one GPU can hold (1 when exclusive)."""
    return int(replicas or 1) if is_shared(mode) else 1


def gpu_resource_name(mode: str, rename: bool) -> str:
    """The extended resource a job asks for, as the plugin advertises it for this config."""
    return GPU_RESOURCE + SHARED_SUFFIX if is_shared(mode) and rename else GPU_RESOURCE


def shares_text(total_gpus: int, mode: str, replicas: int | None) -> str:
    """'16 GPUs × 4 replicas = 64 shares' (or '16 GPUs' when exclusive)."""
    gpus = f"{total_gpus} GPU{'s' if total_gpus != 1 else ''}"
    if not is_shared(mode):
        return gpus
    n = replicas_per_gpu(mode, replicas)
    unit = "replicas" if mode == TIME_SLICING else "MPS clients"
    return f"{gpus} × {n} {unit} = {total_gpus * n} shares"


def fail_requests_greater_than_one(mode: str, configured: bool | None) -> bool:
    """The plugin's default: false for time-slicing, true for MPS (v0.20.0)."""
    if configured is not None:
        return configured
    return mode == MPS


def config_key(pool_slug: str) -> str:
    """The device-plugin config name this pool's nodes are labelled with."""
    return f"gp-{pool_slug}"


def device_plugin_config(
    *, mode: str, replicas: int, rename: bool, fail_greater_than_one: bool | None
) -> dict:
    """The device plugin's config file for a shared pool (the GPU Operator ConfigMap entry)."""
    key = "timeSlicing" if mode == TIME_SLICING else "mps"
    return {
        "version": "v1",
        "sharing": {
            key: {
                "renameByDefault": bool(rename),
                "failRequestsGreaterThanOne": fail_requests_greater_than_one(
                    mode, fail_greater_than_one
                ),
                "resources": [{"name": GPU_RESOURCE, "replicas": int(replicas)}],
            }
        },
    }


def expected_node_labels(*, mode: str, replicas: int | None, rename: bool) -> dict[str, str]:
    """The labels GPU Feature Discovery writes on a node with this config."""
    if not is_shared(mode):
        return {STRATEGY_LABEL: "none", REPLICAS_LABEL: "1"}
    labels = {STRATEGY_LABEL: mode, REPLICAS_LABEL: str(replicas)}
    if mode == MPS:
        labels["nvidia.com/mps.capable"] = "true"
    return labels


def product_label(gpu_model: str, *, mode: str, rename: bool) -> str:
    """The gpu.product value: '-SHARED' is appended when shared and not renamed."""
    if is_shared(mode) and not rename:
        return gpu_model + SHARED_PRODUCT_SUFFIX
    return gpu_model


def mps_limits(*, gpu_memory_mib: int | None, clients: int) -> dict[str, int]:
    """What the plugin's MPS control daemon sets per GPU: pinned memory totalMemory/replicas
    (MiB) and active thread percentage 100/replicas."""
    out = {"activeThreadPercentage": 100 // max(clients, 1)}
    if gpu_memory_mib:
        out["pinnedDeviceMemoryLimitMiB"] = gpu_memory_mib // max(clients, 1)
    return out


# ---- GPU facts (for DRA attribute selection and memory checks) ---------------------------------


@dataclass(frozen=True)
class GpuFacts:
    """What the NVIDIA DRA driver publishes about one GPU model (attributes and capacity)."""

    product: str  # GFD nvidia.com/gpu.product
    product_name: str  # DRA productName (the NVML name)
    architecture: str  # DRA architecture
    compute_capability: str  # DRA cudaComputeCapability (semver)
    memory_mib: int  # DRA capacity memory (MiB)


# NVML names and figures as the driver reports them (GPU Operator GFD dumps, NVIDIA MIG guide).
GPUS: dict[str, GpuFacts] = {
    g.product: g
    for g in (
        GpuFacts("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", 81559),
        GpuFacts("NVIDIA-H100-NVL", "NVIDIA H100 NVL", "Hopper", "9.0.0", 95830),
        GpuFacts("NVIDIA-H200", "NVIDIA H200", "Hopper", "9.0.0", 143771),
        GpuFacts("NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", 40960),
        GpuFacts("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", 81920),
        GpuFacts("NVIDIA-A30", "NVIDIA A30", "Ampere", "8.0.0", 24576),
        GpuFacts("NVIDIA-L40S", "NVIDIA L40S", "Ada Lovelace", "8.9.0", 46068),
        GpuFacts("Tesla-T4", "Tesla T4", "Turing", "7.5.0", 15360),
    )
}


def gpu_facts(gpu_model: str) -> GpuFacts | None:
    return GPUS.get(gpu_model)


def gpu_memory_mib(gpu_model: str) -> int | None:
    """Memory of one GPU of the model: from the table, else the 'NNGB' in its name."""
    facts = GPUS.get(gpu_model)
    if facts:
        return facts.memory_mib
    match = re.search(r"(\d+)GB", gpu_model.upper())
    return int(match.group(1)) * 1024 if match else None


_QUANTITY_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {
    None: 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def parse_bytes(text: str) -> int | None:
    """A Kubernetes memory quantity in bytes, or None when it is not one."""
    match = _QUANTITY_RE.match(str(text).strip())
    if not match:
        return None
    try:
        return int(Decimal(match.group(1)) * _UNITS[match.group(2)])
    except InvalidOperation:
        return None


def gib(mib: int) -> str:
    """MiB as GiB for messages: 81920 → '80 GiB', 81559 (an H100 80GB) → '79.6 GiB'."""
    value = mib / 1024
    return f"{value:.0f} GiB" if mib % 1024 == 0 else f"{value:.1f} GiB"


# ---- pool validation ------------------------------------------------------------------------


def pool_errors(
    *,
    gpu_model: str,
    mig_profiles: list[str],
    mode: str,
    replicas: int | None,
    rename: bool,
    fail_greater_than_one: bool | None,
    mps_memory_limit: str,
    dra_managed: bool,
    dra_feature_gates: list[str],
) -> dict[str, list[str]]:
    """Why this sharing configuration is invalid, per field; empty when it is fine."""
    errors: dict[str, list[str]] = {}

    def add(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    if mode not in MODES:
        add("sharing_mode", f"{mode!r} is not a sharing mode; choose one of {', '.join(MODES)}.")
        return errors
    if mode == EXCLUSIVE:
        # Sharing options on an exclusive pool mean the admin expected sharing: say so.
        if replicas not in (None, 0):
            add(
                "sharing_replicas", "An exclusive pool has no replicas; choose time-slicing or mps."
            )
        if rename:
            add("sharing_rename", "Renaming to nvidia.com/gpu.shared needs a shared pool.")
        if fail_greater_than_one is not None:
            add(
                "sharing_fail_requests_greater_than_one",
                "This device-plugin option applies only to time-slicing and mps pools.",
            )
        if mps_memory_limit:
            add("mps_memory_limit", "An exclusive pool has no MPS memory limit.")
    else:
        limit = MAX_MPS_CLIENTS if mode == MPS else MAX_REPLICAS
        unit = "MPS clients" if mode == MPS else "replicas"
        if replicas is None:
            add("sharing_replicas", f"A {mode} pool needs the number of {unit} per GPU.")
        elif replicas < MIN_REPLICAS:
            add(
                "sharing_replicas",
                f"{replicas} {unit} per GPU is not sharing: the device plugin needs at least 2.",
            )
        elif replicas > limit:
            why = "CUDA MPS serves at most 48 clients" if mode == MPS else "the portal's ceiling"
            add("sharing_replicas", f"At most {limit} {unit} per GPU ({why}); got {replicas}.")
    if mode == MPS:
        if mig_profiles:
            add("sharing_mode", "MPS does not combine with MIG; remove the MIG profiles first.")
        if not mps_memory_limit:
            add(
                "mps_memory_limit",
                "An MPS pool needs a memory limit per client, e.g. 20Gi: it is what isolates "
                "the clients' memory.",
            )
        else:
            limit_bytes = parse_bytes(mps_memory_limit)
            memory = gpu_memory_mib(gpu_model)
            if limit_bytes is None or limit_bytes <= 0:
                add("mps_memory_limit", f"{mps_memory_limit!r} is not a memory size like 20Gi.")
            elif memory and replicas and replicas >= MIN_REPLICAS:
                share = memory * 2**20 // replicas
                if limit_bytes > share and not dra_managed:
                    add(
                        "mps_memory_limit",
                        f"The device plugin gives each of {replicas} clients at most "
                        f"{memory // replicas} MiB of this {gpu_model}; {mps_memory_limit} "
                        "would be a promise it does not keep.",
                    )
                elif limit_bytes > memory * 2**20:
                    add(
                        "mps_memory_limit",
                        f"{mps_memory_limit} is more than the GPU's {gib(memory)}.",
                    )
    elif mode == TIME_SLICING and mps_memory_limit:
        add(
            "mps_memory_limit",
            "Time-slicing has no memory limit per job; clear it (or choose mps).",
        )
    unknown = sorted(set(dra_feature_gates) - set(DRA_GATES.values()))
    if unknown:
        add(
            "dra_feature_gates",
            f"Unknown DRA driver feature gate(s) {', '.join(unknown)}; the portal knows "
            f"{', '.join(sorted(DRA_GATES.values()))}.",
        )
    if dra_managed:
        if rename or fail_greater_than_one is not None:
            add(
                "sharing_rename" if rename else "sharing_fail_requests_greater_than_one",
                "A DRA-managed pool is not served by the device plugin; its options do not apply.",
            )
        gate = DRA_GATES.get(mode)
        if gate and gate not in dra_feature_gates:
            add(
                "dra_feature_gates",
                f"{MODE_LABELS[mode]} on a DRA pool needs the driver's alpha feature gate {gate} "
                "enabled; declare it here once the driver runs with it.",
            )
    elif dra_feature_gates:
        add("dra_feature_gates", "Feature gates of the DRA driver apply only to DRA-managed pools.")
    return errors


def dra_sharing_config(
    *, mode: str, replicas: int | None, mps_memory_limit: str, request: str = "gpu"
) -> list[dict]:
    """The claim's opaque GpuConfig for a DRA pool that shares its GPUs (empty when exclusive)."""
    if mode == TIME_SLICING:
        sharing: dict = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    elif mode == MPS:
        mps: dict = {"defaultActiveThreadPercentage": 100 // max(int(replicas or 1), 1)}
        if mps_memory_limit:
            mps["defaultPinnedDeviceMemoryLimit"] = mps_memory_limit
        sharing = {"strategy": "MPS", "mpsConfig": mps}
    else:
        return []
    return [
        {
            "requests": [request],
            "opaque": {
                "driver": DRA_DRIVER,
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "GpuConfig",
                    "sharing": sharing,
                },
            },
        }
    ]
