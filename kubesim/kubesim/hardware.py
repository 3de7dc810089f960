"""GPU models kubesim can simulate: names as NVML and GPU Feature Discovery spell them, memory,
power and clock envelopes, and the MIG geometry (profiles, memory-slice placements, GI IDs).

This is kubesim's own table (kubesim imports nothing from the portal). Figures come from NVIDIA's
MIG user guide (supported MIG profiles, ``nvidia-smi mig -lgip`` / ``-lgipp`` outputs) and the GPU
Feature Discovery label dumps of NVIDIA/cloud-native-docs (GPU Operator pages).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

# Deterministic UUIDs: the same node name and GPU index always give the same GPU UUID.
UUID_NAMESPACE = uuid.UUID("6f1c1f6e-9b7a-4f43-9a51-3d7c6f0b5a10")

# Memory-slice shapes of the 8-slice MIG family (A100, H100, H200, B200):
# compute slices, memory slices, allowed start slices, GI profile ID.
SHAPES_8 = {
    "S1": (1, 1, (0, 1, 2, 3, 4, 5, 6), 19),
    "S1me": (1, 1, (0, 1, 2, 3, 4, 5, 6), 20),
    "S1w": (1, 2, (0, 2, 4, 6), 15),
    "S2": (2, 2, (0, 2, 4), 14),
    "S3": (3, 4, (0, 4), 9),
    "S4": (4, 4, (0,), 5),
    "S7": (7, 8, (0,), 0),
}
# A30: 4 compute and 4 memory slices.
SHAPES_4 = {
    "S1": (1, 1, (0, 1, 2, 3), 14),
    "S1me": (1, 1, (0, 1, 2, 3), 21),
    "S2": (2, 2, (0, 2), 5),
    "S2me": (2, 2, (0, 2), 6),
    "S4": (4, 4, (0,), 0),
}


@dataclass(frozen=True)
class MigProfile:
    name: str  # "1g.10gb", "1g.10gb+me"
    shape: str
    compute_slices: int
    memory_slices: int
    starts: tuple[int, ...]
    gi_profile_id: int
    memory_mib: int  # as GFD reports it (mig-<profile>.memory)
    multiprocessors: int

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    @property
    def resource_name(self) -> str:
        """The mixed-strategy device-plugin resource: '+' becomes '.'."""
        return "nvidia.com/mig-" + self.name.replace("+", ".")


@dataclass(frozen=True)
class GpuModel:
    product: str  # GFD nvidia.com/gpu.product
    nvml_name: str  # dcgm-exporter modelName
    memory_mib: int  # GFD nvidia.com/gpu.memory
    family: str
    compute_major: int
    compute_minor: int
    multiprocessors: int
    max_power_w: float
    idle_power_w: float
    max_sm_clock: int
    idle_sm_clock: int
    mem_clock: int
    memory_slices: int = 0  # 0 = not MIG capable
    profiles: dict[str, MigProfile] = field(default_factory=dict)

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    def profile(self, name: str) -> MigProfile:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(self.profiles) or "none (this model has no MIG)"
            raise ValueError(
                f"MIG profile {name!r} does not exist on {self.product}; its profiles are: {known}"
            ) from None


def _profiles(shapes: dict, names: dict[str, tuple[str, int, int]]) -> dict[str, MigProfile]:
    out = {}
    for shape, (name, memory_mib, sms) in names.items():
        cs, ms, starts, gi_id = shapes[shape]
        out[name] = MigProfile(name, shape, cs, ms, starts, gi_id, memory_mib, sms)
    return out


def _eight_slice(s1, s1w, s2, s3, s4, s7, mem, sms) -> dict[str, MigProfile]:
    """Profiles of an 8-slice model from its names, GFD memory (MiB) and SM counts per shape."""
    return _profiles(
        SHAPES_8,
        {
            "S1": (s1, mem[0], sms[0]),
            "S1me": (s1 + "+me", mem[0], sms[0]),
            "S1w": (s1w, mem[1], sms[1]),
            "S2": (s2, mem[2], sms[2]),
            "S3": (s3, mem[3], sms[3]),
            "S4": (s4, mem[4], sms[4]),
            "S7": (s7, mem[5], sms[5]),
        },
    )


_H100_SMS = (16, 26, 32, 60, 64, 132)
_A100_SMS = (14, 14, 28, 42, 56, 98)

MODELS: dict[str, GpuModel] = {
    m.product: m
    for m in [
        GpuModel(
            "NVIDIA-H100-80GB-HBM3",
            "NVIDIA H100 80GB HBM3",
            81559,
            "hopper",
            9,
            0,
            132,
            700.0,
            72.0,
            1980,
            345,
            2619,
            8,
            _eight_slice(
                "1g.10gb",
                "1g.20gb",
                "2g.20gb",
                "3g.40gb",
                "4g.40gb",
                "7g.80gb",
                (9984, 20096, 20096, 40320, 40320, 80896),
                _H100_SMS,
            ),
        ),
        GpuModel(
            "NVIDIA-H100-NVL",
            "NVIDIA H100 NVL",
            95830,
            "hopper",
            9,
            0,
            132,
            400.0,
            60.0,
            1785,
            345,
            2619,
            8,
            _eight_slice(
                "1g.12gb",
                "1g.24gb",
                "2g.24gb",
                "3g.47gb",
                "4g.47gb",
                "7g.94gb",
                (11008, 23168, 23168, 47104, 47104, 95360),
                _H100_SMS,
            ),
        ),
        GpuModel(
            "NVIDIA-H200",
            "NVIDIA H200",
            143771,
            "hopper",
            9,
            0,
            132,
            700.0,
            75.0,
            1980,
            345,
            3201,
            8,
            _eight_slice(
                "1g.18gb",
                "1g.35gb",
                "2g.35gb",
                "3g.71gb",
                "4g.71gb",
                "7g.141gb",
                (16384, 32768, 32768, 71424, 71424, 143360),
                _H100_SMS,
            ),
        ),
        GpuModel(
            "NVIDIA-A100-SXM4-40GB",
            "NVIDIA A100-SXM4-40GB",
            40960,
            "ampere",
            8,
            0,
            108,
            400.0,
            55.0,
            1410,
            210,
            1215,
            8,
            _eight_slice(
                "1g.5gb",
                "1g.10gb",
                "2g.10gb",
                "3g.20gb",
                "4g.20gb",
                "7g.40gb",
                (4864, 9856, 9856, 20096, 20096, 40192),
                _A100_SMS,
            ),
        ),
        GpuModel(
            "NVIDIA-A100-SXM4-80GB",
            "NVIDIA A100-SXM4-80GB",
            81920,
            "ampere",
            8,
            0,
            108,
            400.0,
            60.0,
            1410,
            210,
            1593,
            8,
            _eight_slice(
                "1g.10gb",
                "1g.20gb",
                "2g.20gb",
                "3g.40gb",
                "4g.40gb",
                "7g.80gb",
                (9728, 19968, 19968, 40192, 40192, 80896),
                _A100_SMS,
            ),
        ),
        GpuModel(
            "NVIDIA-A30",
            "NVIDIA A30",
            24576,
            "ampere",
            8,
            0,
            56,
            165.0,
            30.0,
            1440,
            210,
            1215,
            4,
            _profiles(
                SHAPES_4,
                {
                    "S1": ("1g.6gb", 5952, 14),
                    "S1me": ("1g.6gb+me", 5952, 14),
                    "S2": ("2g.12gb", 11968, 28),
                    "S2me": ("2g.12gb+me", 11968, 28),
                    "S4": ("4g.24gb", 24000, 56),
                },
            ),
        ),
        GpuModel(
            "NVIDIA-L40S",
            "NVIDIA L40S",
            46068,
            "ada-lovelace",
            8,
            9,
            142,
            350.0,
            35.0,
            2520,
            210,
            9001,
        ),
        GpuModel("Tesla-T4", "Tesla T4", 15360, "turing", 7, 5, 40, 70.0, 9.0, 1590, 300, 5001),
    ]
}

# PCI bus IDs of the eight GPUs of an HGX baseboard, in GPU index order.
PCI_BUS_IDS = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]


def model(product: str) -> GpuModel:
    try:
        return MODELS[product]
    except KeyError:
        raise ValueError(
            f"unknown GPU model {product!r}; kubesim knows: {', '.join(sorted(MODELS))}"
        ) from None


def pci_bus_id(index: int) -> str:
    bus = PCI_BUS_IDS[index] if index < len(PCI_BUS_IDS) else f"{0xE0 + index:02X}"
    return f"00000000:{bus}:00.0"


def gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node_name}/gpu/{index}')}"


def mig_uuid(node_name: str, index: int, gi_id: int) -> str:
    return f"MIG-{uuid.uuid5(UUID_NAMESPACE, f'{node_name}/gpu/{index}/gi/{gi_id}')}"


def gi_id_for(memory_slices_total: int, size: int, start: int) -> int:
    """The GPU instance ID NVML gives an instance at this placement (IDs seen on A100/H100:
    the full GPU is 0, half GPUs 1-2, quarter 3-6, eighths 7-14)."""
    if size >= memory_slices_total:
        return 0
    per_size_base = {memory_slices_total // 2: 1, memory_slices_total // 4: 3}
    if memory_slices_total == 8:
        per_size_base[1] = 7
    base = per_size_base.get(size, 1)
    return base + start // size


def place_profiles(gpu: GpuModel, names: list[str]) -> list[tuple[MigProfile, int]]:
    """A placement (profile, start slice) for every instance, or ValueError explaining why the
    profiles cannot share one GPU. Larger instances are placed first; backtracking search."""
    if not gpu.mig_capable:
        raise ValueError(f"{gpu.product} does not support MIG")
    profiles = [gpu.profile(n) for n in names]
    if sum(p.media_extensions for p in profiles) > 1:
        raise ValueError("at most one +me instance fits on a GPU")
    compute = sum(p.compute_slices for p in profiles)
    if compute > (7 if gpu.memory_slices == 8 else 4):
        raise ValueError(
            f"profiles {names} need {compute} compute slices; "
            f"a {gpu.product} has {7 if gpu.memory_slices == 8 else 4}"
        )
    order = sorted(range(len(profiles)), key=lambda i: -profiles[i].memory_slices)
    starts: dict[int, int] = {}
    used = [False] * gpu.memory_slices

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        p = profiles[i]
        for start in p.starts:
            span = range(start, start + p.memory_slices)
            if span.stop > gpu.memory_slices or any(used[s] for s in span):
                continue
            for s in span:
                used[s] = True
            starts[i] = start
            if search(k + 1):
                return True
            for s in span:
                used[s] = False
        return False

    if not search(0):
        raise ValueError(
            f"profiles {names} do not fit on one {gpu.product}: "
            f"no placement on its {gpu.memory_slices} memory slices keeps the instances apart"
        )
    return [(profiles[i], starts[i]) for i in range(len(profiles))]
