"""Simulated dcgm-exporter: Prometheus text for each GPU node, served through the API server's pod
and service proxies exactly where a real GPU Operator install serves it:

    GET /api/v1/namespaces/gpu-operator/pods/<exporter-pod>:9400/proxy/metrics
    GET /api/v1/namespaces/gpu-operator/services/nvidia-dcgm-exporter:9400/proxy/metrics

Fault injection: POST /kubesim/dcgm/garbage {"node": NAME (optional: every node), "lines": [...]}
makes the exporter print those lines (e.g. a field whose value is an error string) in the middle
of its output, after the first sample of DCGM_FI_DEV_GPU_UTIL, until set to [] again.

The service proxy goes to one exporter pod per request, round-robin over the ready nodes (as
kube-proxy spreads connections over a Service's endpoints); scrape the pods for every node.

Format: dcgm-exporter 4.2 with the default counters (default-counters.csv), label order `gpu`,
`UUID`, `pci_bus_id`, `device`, `modelName`, [`GPU_I_PROFILE`, `GPU_I_ID`], `Hostname`,
`DCGM_FI_DRIVER_VERSION`, then the pod attributes `container`, `namespace`, `pod` for devices held
by a pod. MIG-enabled GPUs are reported only as GPU instances (the exporter's default -d f), which
carry the parent GPU's UUID and device-level readings, their own framebuffer and profiling
ratios, and no DCGM_FI_DEV_GPU_UTIL / MEM_COPY_UTIL / ENC_UTIL / DEC_UTIL / PCIe byte rates.
Readings follow the load: a GPU held by a running container that does GPU work is busy
(utilisation, tensor activity, memory, power, clocks and temperature rise with it); a GPU that is
free, or held by a container that only sleeps (a script kubesim's shell reads: sleep, echo, exit),
stays idle; noise is a hash of the device and
the simulated time, so scrapes are repeatable.
A GPU the device plugin time-slices or shares through MPS (cluster `gpu.sharing`) carries one
series labelled with only one of its pods (the last in the kubelet's pod-resources list), as the
real exporter does by default; with `dcgmExporter.kubernetesVirtualGpus: true` one copy per pod
with a `vgpu` label and duplicated values (the per-pod split of 4.5.3+ is not simulated).
A GPU that KAI shares between fraction pods is held by its reservation pod, so its series carry
that pod (namespace kai-resource-reservation), as the real exporter's do; its load is the sum of
each running fraction pod's share times that pod's own load.
"""

from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import dataclass

from aiohttp import web

from kubesim.api.errors import ApiError
from kubesim.cluster import (
    DCGM_APP_LABEL,
    DCGM_PORT,
    GPU_OPERATOR_NAMESPACE,
    Cluster,
    Gpu,
    NodeSpec,
)
from kubesim.controllers.node import workspace_apps

# (field, prometheus type, help) in default-counters.csv order.
COUNTERS = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
    ),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
        "payloads - in bytes per second.",
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data "
        "payloads - in bytes per second.",
    ),
]
DOUBLE_FIELDS = {
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
}
# Fields a GPU instance (MIG) series does not carry.
NOT_ON_MIG = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
}
XID_MESSAGES = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning (newer drivers)",
    62: "Internal micro-controller halt (newer drivers)",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}
RESERVED_MIB = {"full": 546, "mig": 0}
# Where KAI's reservation pods hold the GPUs that fraction pods share.
KAI_RESERVATION_NAMESPACE = "kai-resource-reservation"


def _noise(*parts) -> float:
    """Deterministic noise in [-1, 1) for a device and a time bucket."""
    return (zlib.crc32("/".join(str(p) for p in parts).encode()) % 20000) / 10000.0 - 1.0


def _fmt(name: str, value: float) -> str:
    if name in DOUBLE_FIELDS:
        return f"{value:f}"
    return str(round(value))


@dataclass
class Thermal:
    temp: float
    at: float
    energy_mj: float
    nvlink: float


class Exporter:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.cluster: Cluster = ctx.cluster
        self.thermal: dict[str, Thermal] = {}
        self._round_robin = itertools.count()
        self.garbage: dict[str, list[str]] = {}  # node ("" = every node) -> extra lines

    @property
    def kubelet(self):
        return self.ctx.extras.get("kubelet")

    # -- load model
    def _holder(self, node: str, device_uuid: str) -> tuple[str, str, str] | None:
        kubelet = self.kubelet
        return kubelet.devices.holder(node, device_uuid) if kubelet else None

    def _busy(self, node: str, holder: tuple[str, str, str] | None) -> tuple[bool, str]:
        """Whether the holding container is doing GPU work now, and a seed for its load level.

        The rule: a running opaque program (anything kubesim's tiny shell does not read, e.g.
        `python train.py` or the image's entrypoint) trains, so its GPUs show a training
        profile; a script of only `sleep`/`echo`/`exit`/`true` (kubesim.controllers.node.shell)
        never touches the GPU, so its GPUs stay idle although they are held."""
        if holder is None or self.kubelet is None:
            return False, ""
        runner = self.kubelet.runners.get((holder[0], holder[1]))
        if runner is None:
            return False, ""
        run = runner.containers.get(holder[2]) or runner.init_containers.get(holder[2])
        if run is None or not run.attempts:
            return False, runner.uid
        attempt = run.attempts[-1]
        running = attempt.finished is None and run.waiting_reason != "CrashLoopBackOff"
        return running and not attempt.timeline.scripted, runner.uid

    def _replica_holders(self, node: NodeSpec, device_uuid: str) -> list[tuple[str, str, str]]:
        """The pods holding replicas of a time-sliced/MPS device, in the order the kubelet's
        pod-resources List() gives them (namespace, pod): dcgm-exporter keys its map by the
        UUID before '::', so the last of them wins the series' pod labels."""
        kubelet = self.kubelet
        if kubelet is None or node.sharing is None:
            return []
        prefix = device_uuid + "::"
        held = [
            (h[0], h[1], h[2], u)
            for u, h in kubelet.devices.assigned.get(node.name, {}).items()
            if u.startswith(prefix)
        ]
        return [(ns, pod, c) for ns, pod, c, _u in sorted(held)]

    def _replica_index(self, node: NodeSpec, device_uuid: str, holder) -> str:
        kubelet = self.kubelet
        for u, h in (kubelet.devices.assigned.get(node.name, {}) if kubelet else {}).items():
            if u.startswith(device_uuid + "::") and h[:3] == holder:
                return u.rsplit("::", 1)[1]
        return "0"

    def _time_sliced_load(self, node: NodeSpec, holders: list, key: str, now: float) -> tuple:
        """(utilisation, memory ratio, busy) of a GPU several pods share through the device
        plugin: the GPU is as busy as its busiest tenant (they take turns), and each busy tenant
        fills its part of the memory (time-slicing does not partition it, MPS caps it)."""
        util, memory, busy = 0.0, 0.0, False
        replicas = node.sharing.replicas if node.sharing else 1
        for holder in holders:
            working, seed = self._busy(node.name, holder)
            if not working:
                continue
            busy = True
            util = max(util, self._load(seed, f"{key}/{holder[1]}", True, now))
            ratio = 0.55 + 0.37 * ((zlib.crc32((seed + "mem").encode()) % 1000) / 1000)
            memory += ratio / replicas
        return min(1.0, util), min(0.97, memory), busy

    def _sharers(self, holder: tuple[str, str, str] | None) -> list | None:
        """The fraction pods on a GPU that a KAI reservation pod holds (None: not shared)."""
        if holder is None or holder[0] != KAI_RESERVATION_NAMESPACE:
            return None
        kai = self.ctx.extras.get("kai")
        return kai.gpu_sharers(holder[1]) if kai is not None else None

    def _shared_load(self, node: str, sharers: list, key: str, now: float) -> tuple:
        """(utilisation, memory ratio, busy) of a shared GPU: each busy fraction pod adds its
        share of the GPU times its own load (the exporter still labels the series with the
        reservation pod, as dcgm-exporter does: it sees only the pod that holds the device)."""
        util, memory, busy = 0.0, 0.0, False
        for namespace, pod, container, portion in sharers:
            working, seed = self._busy(node, (namespace, pod, container))
            if not working:
                continue
            busy = True
            share = portion / 1000.0
            util += share * self._load(seed, f"{key}/{pod}", True, now)
            memory += share * (0.55 + 0.37 * ((zlib.crc32((seed + "mem").encode()) % 1000) / 1000))
        return min(1.0, util), min(0.97, memory), busy

    def _load(self, seed: str, key: str, busy: bool, now: float) -> float:
        """Utilisation ratio 0..1."""
        bucket = int(now // 15)
        if not busy:
            return 0.0
        base = 0.72 + 0.24 * ((zlib.crc32(seed.encode()) % 1000) / 1000.0)
        return max(0.05, min(1.0, base + 0.05 * _noise(key, bucket)))

    def _thermal(self, gpu: Gpu, node: str, util: float, now: float) -> Thermal:
        model = gpu.model
        idle_temp = 29.0 + 4 * abs(_noise(gpu.uuid, "idle"))
        state = self.thermal.get(gpu.uuid)
        power = model.idle_power_w + (model.max_power_w - model.idle_power_w) * util * 0.88
        if state is None:
            boot = 1e8 + abs(_noise(gpu.uuid, "boot")) * 5e9
            state = self.thermal[gpu.uuid] = Thermal(idle_temp, now, boot, 0.0)
        dt = max(0.0, now - state.at)
        target = idle_temp + util * (46.0 + 6 * _noise(gpu.uuid, "hot"))
        state.temp = target + (state.temp - target) * math.exp(-dt / 90.0)
        state.energy_mj += power * dt * 1000.0
        state.at = now
        return state

    # -- rendering
    def _gpu_readings(self, node: NodeSpec, gpu: Gpu, now: float) -> dict:
        """Device-level readings; the GPU's load is the mean over its instances when MIG."""
        model = gpu.model
        if gpu.mig_enabled:
            loads = []
            for inst in gpu.instances:
                busy, seed = self._busy(node.name, self._holder(node.name, inst.uuid))
                loads.append(
                    self._load(seed, inst.uuid, busy, now) * inst.profile.compute_slices / 7
                )
            util = min(1.0, sum(loads))
        elif node.sharing is not None:
            holders = self._replica_holders(node, gpu.uuid)
            util = self._time_sliced_load(node, holders, gpu.uuid, now)[0]
        else:
            holder = self._holder(node.name, gpu.uuid)
            sharers = self._sharers(holder)
            if sharers is not None:
                util = self._shared_load(node.name, sharers, gpu.uuid, now)[0]
            else:
                busy, seed = self._busy(node.name, holder)
                util = self._load(seed, gpu.uuid, busy, now)
        state = self._thermal(gpu, node.name, util, now)
        bucket = int(now // 15)
        power = model.idle_power_w + (model.max_power_w - model.idle_power_w) * util * 0.88
        power += 2.5 * _noise(gpu.uuid, "p", bucket)
        sm_clock = model.max_sm_clock if util > 0 else model.idle_sm_clock
        return {
            "util": util,
            "DCGM_FI_DEV_SM_CLOCK": sm_clock,
            "DCGM_FI_DEV_MEM_CLOCK": model.mem_clock,
            "DCGM_FI_DEV_MEMORY_TEMP": state.temp + 4 + util * 6,
            "DCGM_FI_DEV_GPU_TEMP": state.temp,
            "DCGM_FI_DEV_POWER_USAGE": max(model.idle_power_w * 0.8, power),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": state.energy_mj,
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_XID_ERRORS": gpu.xid,
        }

    def _series(self, node: NodeSpec, gpu: Gpu, now: float) -> list[tuple[dict, dict]]:
        """(labels, values) for every series of one physical GPU."""
        device_level = self._gpu_readings(node, gpu, now)
        base_labels = {
            "gpu": str(gpu.index),
            "UUID": gpu.uuid,
            "pci_bus_id": gpu.pci_bus_id,
            "device": f"nvidia{gpu.index}",
            "modelName": gpu.model.nvml_name,
        }
        out: list[tuple[dict, dict]] = []
        bucket = int(now // 15)
        if gpu.mig_enabled:
            entries = [(inst.uuid, inst) for inst in gpu.instances]
        else:
            entries = [(gpu.uuid, None)]
        for device_uuid, inst in entries:
            labels = dict(base_labels)
            if inst is not None:
                labels["GPU_I_PROFILE"] = inst.profile.name
                labels["GPU_I_ID"] = str(inst.gi_id)
            labels["Hostname"] = node.name
            labels["DCGM_FI_DRIVER_VERSION"] = self.cluster.driver_version
            replica_holders = self._replica_holders(node, device_uuid)
            if node.sharing is not None:
                holder = replica_holders[-1] if replica_holders else None
            else:
                holder = self._holder(node.name, device_uuid)
            busy, seed = self._busy(node.name, holder)
            util = (
                self._load(seed, device_uuid, busy, now)
                if inst is not None and node.sharing is None
                else device_level["util"]
            )
            total = inst.profile.memory_mib if inst is not None else gpu.model.memory_mib
            reserved = RESERVED_MIB["mig" if inst is not None else "full"]
            sharers = self._sharers(holder) if inst is None else None
            if node.sharing is not None:
                util, ratio, busy = self._time_sliced_load(node, replica_holders, device_uuid, now)
                used = int((total - reserved) * ratio) if busy else 0
            elif sharers is not None:
                _util, ratio, busy = self._shared_load(node.name, sharers, device_uuid, now)
                used = int((total - reserved) * ratio) if busy else 0
            elif busy:
                used_ratio = 0.55 + 0.37 * ((zlib.crc32((seed + "mem").encode()) % 1000) / 1000.0)
                used = int(
                    (total - reserved) * min(0.97, used_ratio + 0.01 * _noise(device_uuid, bucket))
                )
            else:
                used = 0
            values = {k: v for k, v in device_level.items() if k != "util"}
            values.update(
                {
                    "DCGM_FI_DEV_GPU_UTIL": util * 100,
                    "DCGM_FI_DEV_MEM_COPY_UTIL": util
                    * 100
                    * (0.35 + 0.1 * _noise(device_uuid, "mc")),
                    "DCGM_FI_DEV_ENC_UTIL": 0,
                    "DCGM_FI_DEV_DEC_UTIL": 0,
                    "DCGM_FI_DEV_FB_FREE": total - reserved - used,
                    "DCGM_FI_DEV_FB_USED": used,
                    "DCGM_FI_DEV_FB_RESERVED": reserved,
                    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
                    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
                    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
                    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
                    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
                    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util
                    * (0.97 + 0.02 * _noise(device_uuid, "gr", bucket)),
                    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": util
                    * (0.62 + 0.05 * _noise(device_uuid, "t", bucket)),
                    "DCGM_FI_PROF_DRAM_ACTIVE": util
                    * (0.45 + 0.05 * _noise(device_uuid, "d", bucket)),
                    "DCGM_FI_PROF_PCIE_TX_BYTES": (2e7 + 3e7 * util)
                    * (1 + 0.1 * _noise(device_uuid, "tx", bucket)),
                    "DCGM_FI_PROF_PCIE_RX_BYTES": (4e7 + 9e7 * util)
                    * (1 + 0.1 * _noise(device_uuid, "rx", bucket)),
                }
            )
            if node.sharing is not None and self.cluster.virtual_gpus and replica_holders:
                # KUBERNETES_VIRTUAL_GPUS=true (exporter < 4.5.3): one copy per sharing pod,
                # labelled with its replica index, every value duplicated
                for each in replica_holders:
                    copy = dict(labels)
                    copy.update(container=each[2], namespace=each[0], pod=each[1])
                    copy["vgpu"] = self._replica_index(node, device_uuid, each)
                    out.append((copy, {"mig": inst is not None, **values}))
                continue
            if holder is not None:
                labels["container"] = holder[2]
                labels["namespace"] = holder[0]
                labels["pod"] = holder[1]
            out.append((labels, {"mig": inst is not None, **values}))
        return out

    def render(self, node_name: str) -> str:
        node = self.cluster.node(node_name)
        if node is None:
            return ""
        now = self.clock.time()
        series = [s for gpu in node.gpus for s in self._series(node, gpu, now)]
        lines: list[str] = []
        for name, mtype, help_text in COUNTERS:
            rows = [
                (labels, values)
                for labels, values in series
                if not (values["mig"] and name in NOT_ON_MIG)
            ]
            if not rows:
                continue
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {mtype}")
            for labels, values in rows:
                row_labels = labels
                if name == "DCGM_FI_DEV_XID_ERRORS" and values[name]:
                    row_labels = self._with_xid_labels(labels, int(values[name]))
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in row_labels.items())
                lines.append(f"{name}{{{text}}} {_fmt(name, values[name])}")
                if name == "DCGM_FI_DEV_GPU_UTIL" and row_labels is rows[0][0]:
                    lines += self.garbage.get(node_name, self.garbage.get("", []))
        return "\n".join(lines) + "\n"

    async def set_garbage(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "BadRequest", "the body must be a JSON object") from None
        lines = body.get("lines") if isinstance(body, dict) else None
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise ApiError(400, "BadRequest", "lines: a list of strings")
        node = body.get("node") or ""
        if lines:
            self.garbage[node] = list(lines)
        else:
            self.garbage.pop(node, None)
        return web.json_response({"node": node or None, "lines": len(lines)})

    @staticmethod
    def _with_xid_labels(labels: dict, xid: int) -> dict:
        fixed = {k: v for k, v in labels.items() if k not in ("container", "namespace", "pod")}
        attributes = {k: v for k, v in labels.items() if k in ("container", "namespace", "pod")}
        attributes["err_code"] = str(xid)
        attributes["err_msg"] = XID_MESSAGES.get(xid, "Unknown Error")
        return {**fixed, **dict(sorted(attributes.items()))}

    # -- proxies
    def _exporter_pods(self) -> dict[str, str]:
        """exporter pod name -> node name."""
        pods = self.store.list(
            "v1", "Pod", GPU_OPERATOR_NAMESPACE, label_selector=f"app={DCGM_APP_LABEL}"
        )
        return {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName") for p in pods}

    def _unreachable(self, node_name: str) -> bool:
        kubelet = self.kubelet
        return bool(kubelet and node_name in kubelet.not_ready)

    def _answer(self, node_name: str, pod_ip: str, port: str, rest: str) -> web.Response:
        if self._unreachable(node_name):
            raise ApiError(
                503,
                "ServiceUnavailable",
                f"error trying to reach service: dial tcp {pod_ip}:{port}: i/o timeout",
            )
        path = "/" + rest.lstrip("/")
        if path in ("/metrics", "/metrics/"):
            return web.Response(
                body=self.render(node_name).encode(),
                headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            )
        if path == "/health":
            return web.Response(text="OK")
        return web.Response(status=404, text="404 page not found\n")

    async def pod_proxy(self, request: web.Request, namespace: str, name: str, rest: str = ""):
        pod_name, _, port = name.partition(":")
        pod = self.store.try_get("v1", "Pod", namespace, pod_name)
        if pod is None:
            raise ApiError(
                404,
                "NotFound",
                f'pods "{pod_name}" not found',
                details={"name": pod_name, "kind": "pods"},
            )
        pod_ip = (pod.get("status") or {}).get("podIP") or ""
        app_port = workspace_apps.APPS.port_for_pod(namespace, pod_name)
        if app_port is not None:  # a workspace image's real server (workspace_apps)
            return await workspace_apps.APPS.forward(request, app_port, rest)
        port = port or "80"
        labels = pod["metadata"].get("labels") or {}
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        if (
            namespace == GPU_OPERATOR_NAMESPACE
            and labels.get("app") == DCGM_APP_LABEL
            and port in (str(DCGM_PORT), "metrics", "http")
        ):
            return self._answer(node_name, pod_ip, str(DCGM_PORT), rest)
        raise ApiError(
            503,
            "ServiceUnavailable",
            "error trying to reach service: "
            f"dial tcp {pod_ip or '<nil>'}:{port}: connect: connection refused",
        )

    async def service_proxy(self, request: web.Request, namespace: str, name: str, rest: str = ""):
        service_name, _, port = name.partition(":")
        # "http:" scheme prefix as in services/http:NAME:PORT/proxy
        if service_name in ("http", "https") and port:
            service_name, _, port = port.partition(":")
        service = self.store.try_get("v1", "Service", namespace, service_name)
        if service is None:
            raise ApiError(
                404,
                "NotFound",
                f'services "{service_name}" not found',
                details={"name": service_name, "kind": "services"},
            )
        if namespace != GPU_OPERATOR_NAMESPACE or service_name != DCGM_APP_LABEL:
            selector = (service.get("spec") or {}).get("selector") or {}
            if selector:
                pods = self.store.list(
                    "v1",
                    "Pod",
                    namespace,
                    label_selector=",".join(f"{k}={v}" for k, v in sorted(selector.items())),
                )
                for pod in pods:
                    app_port = workspace_apps.APPS.port_for_pod(namespace, pod["metadata"]["name"])
                    if app_port is not None:
                        return await workspace_apps.APPS.forward(request, app_port, rest)
            raise ApiError(
                503, "ServiceUnavailable", f'no endpoints available for service "{service_name}"'
            )
        candidates = sorted(
            (pod, node)
            for pod, node in self._exporter_pods().items()
            if node and not self._unreachable(node)
        )
        if not candidates:
            raise ApiError(
                503, "ServiceUnavailable", f'no endpoints available for service "{service_name}"'
            )
        _pod, node_name = candidates[next(self._round_robin) % len(candidates)]
        spec = self.cluster.node(node_name)
        return self._answer(
            node_name, f"{spec.pod_cidr_prefix}.2" if spec else "", str(DCGM_PORT), rest
        )


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def start(ctx) -> Exporter:
    exporter = Exporter(ctx)
    ctx.extras["dcgm"] = exporter
    ctx.server.set_subresource_handler("v1", "Pod", "proxy", exporter.pod_proxy)
    ctx.server.set_subresource_handler("v1", "Service", "proxy", exporter.service_proxy)
    ctx.server.add_route("POST", "/kubesim/dcgm/garbage", exporter.set_garbage)
    return exporter
