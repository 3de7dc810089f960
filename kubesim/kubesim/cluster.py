"""The cluster description (`--cluster FILE`, or the built-in default_cluster.yaml): node pools,
their GPUs and MIG layouts, and the Node, namespace and GPU Operator objects they become.

Format (documented in the README's kubesim section):

    apiVersion: kubesim.dev/v1
    kind: Cluster
    driverVersion: "550.54.15"        # optional
    cudaVersion: "12.4"               # optional
    pools:
      - name: gpu-h100                # nodes are named <pool>-0, <pool>-1, ...
        count: 3
        cpu: "192"                    # quantities as in a Node's capacity
        memory: 2Ti
        pods: 110                     # optional, default 110
        instanceType: hgx-h100-8g     # optional: node.kubernetes.io/instance-type
        labels: {topology.kubernetes.io/zone: zone-a}   # optional extra node labels
        taints: [{key: k, value: v, effect: NoSchedule}] # optional; GPU pools default to
                                                         # nvidia.com/gpu=present:NoSchedule
        gpu:                          # omit for CPU-only pools
          model: NVIDIA-H100-80GB-HBM3
          count: 8
          mig:                        # optional; omit (or "none") for whole GPUs only
            strategy: mixed
            layout:                   # GPUs not listed keep MIG disabled
              - gpus: "0-3"           # "0-3", "4,5", 6 or a list
                profiles: {"1g.10gb": 7}   # or a list ["3g.40gb", "2g.20gb", "1g.10gb"]
          sharing:                    # optional: the device plugin's sharing config (issue 26)
            strategy: time-slicing    # or mps (not with MIG)
            replicas: 4               # >= 2
            renameByDefault: false    # true: advertise nvidia.com/gpu.shared
            failRequestsGreaterThanOne: false   # default false; true for mps (plugin v0.20.0)
            config: ts-4              # optional nvidia.com/device-plugin.config label value
          dra: true                   # optional: the NVIDIA DRA driver publishes these GPUs as
                                      # ResourceSlices instead of the device plugin
    dcgmExporter: {kubernetesVirtualGpus: false}   # top level, optional
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kubesim import hardware
from kubesim.api.errors import ApiError
from kubesim.clock import rfc3339

DEFAULT_CLUSTER_FILE = Path(__file__).with_name("default_cluster.yaml")
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_OPERATOR_NAMESPACE = "gpu-operator"
DCGM_APP_LABEL = "nvidia-dcgm-exporter"
DCGM_PORT = 9400
DCGM_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
KUBELET_VERSION = "v1.32.4"
SYSTEM_POD_ANNOTATION = "kubesim.dev/system-pod"
GPUS_ANNOTATION = "kubesim.dev/gpus"


class ClusterSpecError(ValueError):
    """The cluster description is invalid; the message names the field."""


@dataclass
class Device:
    """One allocatable device: a whole GPU (nvidia.com/gpu) or a MIG instance."""

    uuid: str
    resource: str
    gpu_index: int
    gpu_uuid: str
    pci_bus_id: str
    profile: hardware.MigProfile | None = None
    gi_id: int | None = None
    placement_start: int | None = None
    healthy: bool = True
    physical_uuid: str = ""  # a shared replica: the GPU or MIG UUID it is a share of
    replica: int | None = None

    @property
    def device_uuid(self) -> str:
        """The physical GPU or MIG device (what NVIDIA_VISIBLE_DEVICES and NVML show)."""
        return self.physical_uuid or self.uuid


@dataclass(frozen=True)
class Sharing:
    """The device plugin's sharing config on a node (k8s-device-plugin v0.20.0 semantics)."""

    strategy: str  # time-slicing | mps
    replicas: int
    rename: bool = False
    fail_requests_greater_than_one: bool = False
    config: str = ""

    def resource(self, name: str) -> str:
        return name + ".shared" if self.rename else name


@dataclass
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str
    model: hardware.GpuModel
    mig_enabled: bool
    instances: list[Device] = field(default_factory=list)  # MIG instances when mig_enabled
    xid: int = 0  # last XID error (DCGM_FI_DEV_XID_ERRORS)


@dataclass
class NodeSpec:
    name: str
    pool: str
    index: int  # position in the whole cluster (addresses)
    cpu: str
    memory: str
    pods: int
    instance_type: str
    labels: dict[str, str]
    taints: list[dict]
    gpu_model: hardware.GpuModel | None = None
    mig_strategy: str = "none"
    mig_config: str = ""
    gpus: list[Gpu] = field(default_factory=list)
    sharing: Sharing | None = None
    dra: bool = False  # GPUs published by the DRA driver, not advertised by the device plugin

    @property
    def physical_devices(self) -> list[Device]:
        out: list[Device] = []
        for gpu in self.gpus:
            if gpu.mig_enabled:
                out.extend(gpu.instances)
            else:
                out.append(Device(gpu.uuid, "nvidia.com/gpu", gpu.index, gpu.uuid, gpu.pci_bus_id))
        return out

    @property
    def devices(self) -> list[Device]:
        """What the device plugin advertises: nothing under DRA; with sharing, each device
        `replicas` times with the annotated IDs `<UUID>::<n>` the plugin hands out."""
        if self.dra:
            return []
        physical = self.physical_devices
        if self.sharing is None:
            return physical
        out: list[Device] = []
        for device in physical:
            for n in range(self.sharing.replicas):
                out.append(
                    Device(
                        uuid=f"{device.uuid}::{n}",
                        resource=self.sharing.resource(device.resource),
                        gpu_index=device.gpu_index,
                        gpu_uuid=device.gpu_uuid,
                        pci_bus_id=device.pci_bus_id,
                        profile=device.profile,
                        gi_id=device.gi_id,
                        placement_start=device.placement_start,
                        physical_uuid=device.uuid,
                        replica=n,
                    )
                )
        return out

    @property
    def internal_ip(self) -> str:
        return f"10.0.{self.index // 200}.{10 + self.index % 200}"

    @property
    def pod_cidr_prefix(self) -> str:
        return f"10.244.{self.index}"


@dataclass
class Cluster:
    nodes: list[NodeSpec]
    driver_version: str = "550.54.15"
    cuda_version: str = "12.4"
    # dcgm-exporter KUBERNETES_VIRTUAL_GPUS: one series per pod on a shared GPU
    virtual_gpus: bool = False
    # registry hosts whose images need an imagePullSecret (cluster YAML `registries.private`)
    private_registries: list[str] = field(default_factory=list)
    _by_name: dict[str, NodeSpec] = field(default_factory=dict, repr=False)
    _devices: dict[str, dict[str, Device]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_name = {n.name: n for n in self.nodes}
        # Device objects are built once so health flags stick.
        self._devices = {n.name: {d.uuid: d for d in n.devices} for n in self.nodes}

    def node(self, name: str) -> NodeSpec | None:
        return self._by_name.get(name)

    def devices(self, node_name: str) -> dict[str, Device]:
        return self._devices.get(node_name, {})

    def gpu_nodes(self) -> list[NodeSpec]:
        return [n for n in self.nodes if n.gpus]


# ----------------------------------------------------------------------------------------------
# Parsing


def _gpu_indexes(value, count: int, where: str) -> list[int]:
    items: list[int] = []
    parts = value if isinstance(value, list) else str(value).split(",")
    for part in parts:
        text = str(part).strip()
        try:
            if "-" in text:
                low, high = (int(x) for x in text.split("-", 1))
                items.extend(range(low, high + 1))
            else:
                items.append(int(text))
        except ValueError:
            raise ClusterSpecError(f"{where}.gpus: {value!r} is not a GPU index list") from None
    for index in items:
        if not 0 <= index < count:
            raise ClusterSpecError(f"{where}.gpus: GPU {index} does not exist (count is {count})")
    return items


def _profile_list(value, where: str) -> list[str]:
    if isinstance(value, dict):
        names: list[str] = []
        for name, number in value.items():
            if not isinstance(number, int) or number < 1:
                raise ClusterSpecError(f"{where}.profiles.{name}: count must be a positive integer")
            names.extend([str(name)] * number)
        return names
    if isinstance(value, list) and value:
        return [str(v) for v in value]
    raise ClusterSpecError(f"{where}.profiles: a mapping profile -> count, or a list of profiles")


def _check_quantity(value, where: str) -> str:
    from kubesim.controllers.scheduler import parse_quantity

    try:
        parse_quantity(value)
    except ValueError:
        raise ClusterSpecError(f"{where}: {value!r} is not a quantity") from None
    return str(value)


def parse_cluster(data: dict) -> Cluster:
    if not isinstance(data, dict):
        raise ClusterSpecError("the cluster description must be a YAML mapping")
    if data.get("kind", "Cluster") != "Cluster":
        raise ClusterSpecError(f"kind: expected Cluster, got {data.get('kind')!r}")
    pools = data.get("pools")
    if not isinstance(pools, list) or not pools:
        raise ClusterSpecError("pools: a non-empty list of node pools is required")
    nodes: list[NodeSpec] = []
    names: set[str] = set()
    for p, pool in enumerate(pools):
        where = f"pools[{p}]"
        if not isinstance(pool, dict):
            raise ClusterSpecError(f"{where}: must be a mapping")
        name = pool.get("name")
        if not isinstance(name, str) or not name:
            raise ClusterSpecError(f"{where}.name: required")
        count = pool.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise ClusterSpecError(f"{where}.count: must be a non-negative integer")
        cpu = _check_quantity(pool.get("cpu", "64"), f"{where}.cpu")
        memory = _check_quantity(pool.get("memory", "256Gi"), f"{where}.memory")
        pods = pool.get("pods", 110)
        if not isinstance(pods, int) or pods < 1:
            raise ClusterSpecError(f"{where}.pods: must be a positive integer")
        labels = pool.get("labels") or {}
        if not isinstance(labels, dict):
            raise ClusterSpecError(f"{where}.labels: must be a mapping")
        gpu = pool.get("gpu")
        gpu_model = None
        gpu_count = 0
        layout: dict[int, list[str]] = {}
        strategy = "none"
        if gpu is not None:
            if not isinstance(gpu, dict):
                raise ClusterSpecError(f"{where}.gpu: must be a mapping")
            try:
                gpu_model = hardware.model(str(gpu.get("model")))
            except ValueError as exc:
                raise ClusterSpecError(f"{where}.gpu.model: {exc}") from None
            gpu_count = gpu.get("count", 8)
            if not isinstance(gpu_count, int) or not 1 <= gpu_count <= 16:
                raise ClusterSpecError(f"{where}.gpu.count: must be an integer from 1 to 16")
            mig = gpu.get("mig")
            if mig not in (None, "none"):
                if not isinstance(mig, dict):
                    raise ClusterSpecError(f"{where}.gpu.mig: a mapping or 'none'")
                strategy = mig.get("strategy", "mixed")
                if strategy not in ("mixed", "none"):
                    raise ClusterSpecError(
                        f"{where}.gpu.mig.strategy: {strategy!r} is not supported "
                        "(kubesim simulates the mixed strategy, or none)"
                    )
                if strategy == "mixed" and not gpu_model.mig_capable:
                    raise ClusterSpecError(
                        f"{where}.gpu.mig: {gpu_model.product} does not support MIG"
                    )
                for e, entry in enumerate(mig.get("layout") or []):
                    ewhere = f"{where}.gpu.mig.layout[{e}]"
                    if not isinstance(entry, dict):
                        raise ClusterSpecError(f"{ewhere}: must be a mapping")
                    profiles = _profile_list(entry.get("profiles"), ewhere)
                    try:
                        hardware.place_profiles(gpu_model, profiles)
                    except ValueError as exc:
                        raise ClusterSpecError(f"{ewhere}.profiles: {exc}") from None
                    for index in _gpu_indexes(entry.get("gpus"), gpu_count, ewhere):
                        if index in layout:
                            raise ClusterSpecError(f"{ewhere}.gpus: GPU {index} is listed twice")
                        layout[index] = profiles
        sharing = _parse_sharing(gpu.get("sharing") if gpu else None, where, layout)
        dra = bool(gpu.get("dra")) if gpu else False
        if dra and sharing is not None:
            raise ClusterSpecError(
                f"{where}.gpu.dra: the device plugin's sharing and the DRA driver cannot serve "
                "the same GPUs"
            )
        taints = pool.get("taints")
        if taints is None:
            taints = [dict(GPU_TAINT)] if gpu_model else []
        if not isinstance(taints, list):
            raise ClusterSpecError(f"{where}.taints: must be a list")
        for t, taint in enumerate(taints):
            if not isinstance(taint, dict) or not taint.get("key"):
                raise ClusterSpecError(f"{where}.taints[{t}].key: required")
            if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                raise ClusterSpecError(
                    f"{where}.taints[{t}].effect: one of NoSchedule, PreferNoSchedule, NoExecute"
                )
        for i in range(count):
            node_name = f"{name}-{i}"
            if node_name in names:
                raise ClusterSpecError(f"{where}.name: node {node_name} would exist twice")
            names.add(node_name)
            spec = NodeSpec(
                name=node_name,
                pool=name,
                index=len(nodes),
                cpu=cpu,
                memory=memory,
                pods=pods,
                instance_type=str(pool.get("instanceType") or name),
                labels={str(k): str(v) for k, v in labels.items()},
                taints=[dict(t) for t in taints],
                gpu_model=gpu_model,
                mig_strategy="mixed" if layout else "none",
                mig_config=("custom-" + name) if layout else "all-disabled",
                sharing=sharing,
                dra=dra,
            )
            for g in range(gpu_count):
                spec.gpus.append(_build_gpu(node_name, g, gpu_model, layout.get(g)))
            nodes.append(spec)
    return Cluster(
        nodes=nodes,
        driver_version=str(data.get("driverVersion", "550.54.15")),
        cuda_version=str(data.get("cudaVersion", "12.4")),
        private_registries=_private_registries(data.get("registries")),
        virtual_gpus=bool((data.get("dcgmExporter") or {}).get("kubernetesVirtualGpus")),
    )


def _parse_sharing(value, where: str, layout: dict) -> Sharing | None:
    if value is None:
        return None
    where = f"{where}.gpu.sharing"
    if not isinstance(value, dict):
        raise ClusterSpecError(f"{where}: must be a mapping")
    strategy = value.get("strategy")
    if strategy not in ("time-slicing", "mps"):
        raise ClusterSpecError(f"{where}.strategy: time-slicing or mps")
    replicas = value.get("replicas")
    if not isinstance(replicas, int) or replicas < 2:
        raise ClusterSpecError(f"{where}.replicas: number of replicas must be >= 2")
    if strategy == "mps" and layout:
        raise ClusterSpecError(f"{where}: sharing using MPS is not supported for MIG devices")
    fail = value.get("failRequestsGreaterThanOne")
    if fail is None:
        fail = strategy == "mps"  # v0.20.0: nil means true for MPS, false for time-slicing
    return Sharing(
        strategy=strategy,
        replicas=replicas,
        rename=bool(value.get("renameByDefault", False)),
        fail_requests_greater_than_one=bool(fail),
        config=str(value.get("config") or ""),
    )


def _private_registries(value) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict):
        raise ClusterSpecError("registries: must be a mapping (private: [host, ...])")
    hosts = value.get("private") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
        raise ClusterSpecError("registries.private: must be a list of registry hosts")
    return [h.strip().lower().rstrip("/") for h in hosts]


def _build_gpu(
    node_name: str, index: int, model: hardware.GpuModel, profiles: list[str] | None
) -> Gpu:
    gpu_uuid = hardware.gpu_uuid(node_name, index)
    bus = hardware.pci_bus_id(index)
    gpu = Gpu(index, gpu_uuid, bus, model, mig_enabled=bool(profiles))
    if profiles:
        placed = hardware.place_profiles(model, profiles)
        for profile, start in sorted(placed, key=lambda ps: ps[1]):
            gi_id = hardware.gi_id_for(model.memory_slices, profile.memory_slices, start)
            gpu.instances.append(
                Device(
                    uuid=hardware.mig_uuid(node_name, index, gi_id),
                    resource=profile.resource_name,
                    gpu_index=index,
                    gpu_uuid=gpu_uuid,
                    pci_bus_id=bus,
                    profile=profile,
                    gi_id=gi_id,
                    placement_start=start,
                )
            )
    return gpu


def load_cluster(path: str | Path) -> Cluster:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ClusterSpecError(f"cannot read cluster file {path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ClusterSpecError(f"{path} is not valid YAML: {exc}") from None
    return parse_cluster(data)


def default_cluster() -> Cluster:
    return load_cluster(DEFAULT_CLUSTER_FILE)


# ----------------------------------------------------------------------------------------------
# Node objects


def _memory_ki(value: str) -> str:
    from kubesim.controllers.scheduler import parse_quantity

    return f"{int(parse_quantity(value)) // 1024}Ki"


def node_resources(spec: NodeSpec, cluster: Cluster | None = None) -> tuple[dict, dict]:
    """(capacity, allocatable): allocatable counts only healthy devices, as the device plugin."""
    capacity = {
        "cpu": spec.cpu,
        "memory": _memory_ki(spec.memory),
        "pods": str(spec.pods),
        "ephemeral-storage": "1874928404Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    allocatable = dict(capacity)
    devices = list(cluster.devices(spec.name).values()) if cluster else spec.devices
    if spec.gpus:
        totals: dict[str, int] = {}
        healthy: dict[str, int] = {}
        for device in devices:
            totals[device.resource] = totals.get(device.resource, 0) + 1
            healthy[device.resource] = healthy.get(device.resource, 0) + int(device.healthy)
        totals.setdefault("nvidia.com/gpu", 0)
        healthy.setdefault("nvidia.com/gpu", 0)
        for resource in sorted(totals):
            capacity[resource] = str(totals[resource])
            allocatable[resource] = str(healthy[resource])
    return capacity, allocatable


def gfd_labels(spec: NodeSpec, cluster: Cluster, timestamp: int) -> dict[str, str]:
    model = spec.gpu_model
    if model is None:
        return {}
    driver = cluster.driver_version.split(".")
    cuda = cluster.cuda_version.split(".")
    full_gpus = sum(1 for g in spec.gpus if not g.mig_enabled)
    labels = {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.product": model.product,
        "nvidia.com/gpu.count": str(len(spec.gpus)),
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.family": model.family,
        "nvidia.com/gpu.compute.major": str(model.compute_major),
        "nvidia.com/gpu.compute.minor": str(model.compute_minor),
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.machine": spec.instance_type,
        "nvidia.com/gpu.replicas": "1" if full_gpus else "0",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/cuda.driver-version.full": cluster.driver_version,
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1] if len(driver) > 1 else "0",
        "nvidia.com/cuda.driver-version.revision": driver[2] if len(driver) > 2 else "0",
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1] if len(driver) > 1 else "0",
        "nvidia.com/cuda.driver.rev": driver[2] if len(driver) > 2 else "0",
        "nvidia.com/cuda.runtime-version.full": cluster.cuda_version,
        "nvidia.com/cuda.runtime-version.major": cuda[0],
        "nvidia.com/cuda.runtime-version.minor": cuda[1] if len(cuda) > 1 else "0",
        "nvidia.com/cuda.runtime.major": cuda[0],
        "nvidia.com/cuda.runtime.minor": cuda[1] if len(cuda) > 1 else "0",
        "nvidia.com/mig.capable": "true" if model.mig_capable else "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
        "nvidia.com/gfd.timestamp": str(timestamp),
    }
    if spec.sharing is not None:
        # GFD with a sharing config: per-GPU replicas, the strategy, -SHARED unless renamed
        labels["nvidia.com/gpu.replicas"] = str(spec.sharing.replicas)
        labels["nvidia.com/gpu.sharing-strategy"] = spec.sharing.strategy
        if not spec.sharing.rename:
            labels["nvidia.com/gpu.product"] = model.product + "-SHARED"
        if spec.sharing.strategy == "mps":
            labels["nvidia.com/mps.capable"] = "true"
        if spec.sharing.config:
            labels["nvidia.com/device-plugin.config"] = spec.sharing.config
    if spec.dra:
        # the DRA driver's install path turns the device plugin off on these nodes
        labels["nvidia.com/gpu.deploy.device-plugin"] = "false"
        labels["nvidia.com/dra-driver-gpu.enabled"] = "true"
    if model.mig_capable:
        labels["nvidia.com/mig.config"] = spec.mig_config
        labels["nvidia.com/mig.config.state"] = "success"
    if spec.mig_strategy == "mixed":
        labels["nvidia.com/mig.strategy"] = "mixed"
        counts: dict[str, int] = {}
        profiles: dict[str, hardware.MigProfile] = {}
        for gpu in spec.gpus:
            for inst in gpu.instances:
                counts[inst.profile.name] = counts.get(inst.profile.name, 0) + 1
                profiles[inst.profile.name] = inst.profile
        for name in sorted(counts):
            profile = profiles[name]
            key = "nvidia.com/mig-" + name.replace("+", ".")
            labels[f"{key}.count"] = str(counts[name])
            labels[f"{key}.memory"] = str(profile.memory_mib)
            labels[f"{key}.multiprocessors"] = str(profile.multiprocessors)
            labels[f"{key}.product"] = f"{model.product}-MIG-{name}"
            shared = spec.sharing is not None
            labels[f"{key}.replicas"] = str(spec.sharing.replicas) if shared else "1"
            labels[f"{key}.sharing-strategy"] = spec.sharing.strategy if shared else "none"
            labels[f"{key}.slices.gi"] = str(profile.compute_slices)
            labels[f"{key}.slices.ci"] = str(profile.compute_slices)
    return labels


def gpu_inventory(spec: NodeSpec) -> list[dict]:
    """The node's GPUs and MIG instances, as the kubesim.dev/gpus annotation shows them."""
    out = []
    for gpu in spec.gpus:
        entry: dict = {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "pciBusId": gpu.pci_bus_id,
            "model": gpu.model.nvml_name,
            "migEnabled": gpu.mig_enabled,
        }
        if gpu.mig_enabled:
            entry["migDevices"] = [
                {
                    "uuid": d.uuid,
                    "profile": d.profile.name,
                    "giId": d.gi_id,
                    "placementStart": d.placement_start,
                    "resource": d.resource,
                }
                for d in gpu.instances
            ]
        out.append(entry)
    return out


def node_object(spec: NodeSpec, cluster: Cluster, now: str, timestamp: int) -> dict:
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": spec.instance_type,
        "kubesim.dev/pool": spec.pool,
        **gfd_labels(spec, cluster, timestamp),
        **spec.labels,
    }
    annotations = {
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    if spec.gpus:
        annotations[GPUS_ANNOTATION] = json.dumps(gpu_inventory(spec), separators=(",", ":"))
    capacity, allocatable = node_resources(spec, cluster)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels, "annotations": annotations},
        "spec": {
            "podCIDR": f"{spec.pod_cidr_prefix}.0/24",
            "podCIDRs": [f"{spec.pod_cidr_prefix}.0/24"],
            "providerID": f"kubesim://{spec.name}",
            **({"taints": [dict(t) for t in spec.taints]} if spec.taints else {}),
        },
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": ready_conditions(now),
            "addresses": [
                {"type": "InternalIP", "address": spec.internal_ip},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": _stable_id(spec.name, "boot"),
                "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "5.15.0-136-generic",
                "kubeProxyVersion": KUBELET_VERSION,
                "kubeletVersion": KUBELET_VERSION,
                "machineID": _stable_id(spec.name, "machine").replace("-", ""),
                "operatingSystem": "linux",
                "osImage": "Ubuntu 22.04.5 LTS",
                "systemUUID": _stable_id(spec.name, "system"),
            },
        },
    }


def _stable_id(name: str, salt: str) -> str:
    import uuid

    return str(uuid.uuid5(hardware.UUID_NAMESPACE, f"{name}/{salt}"))


def ready_conditions(now: str, *, ready: bool = True, since: str | None = None) -> list[dict]:
    def cond(ctype, status, reason, message):
        return {
            "type": ctype,
            "status": status,
            "lastHeartbeatTime": now,
            "lastTransitionTime": since or now,
            "reason": reason,
            "message": message,
        }

    if ready:
        ready_cond = cond("Ready", "True", "KubeletReady", "kubelet is posting ready status")
    else:
        ready_cond = cond(
            "Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."
        )
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    out = []
    for ctype, reason, message in pressure:
        if ready:
            out.append(cond(ctype, "False", reason, message))
        else:
            out.append(
                cond(ctype, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
            )
    out.append(ready_cond)
    return out


# ----------------------------------------------------------------------------------------------
# Installing the cluster into the store


def _short_hash(text: str, length: int = 5) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(alphabet[b % len(alphabet)] for b in digest[:length])


def ensure(store, obj: dict, *, field_manager: str = "kubesim") -> dict:
    """Create obj, or return the existing object of that name (restart with --state)."""
    meta = obj["metadata"]
    try:
        return store.create(obj, namespace=meta.get("namespace"), field_manager=field_manager)
    except ApiError as exc:
        if exc.code != 409:
            raise
        return store.get(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])


def set_status(store, obj: dict, status: dict, *, field_manager: str) -> dict:
    meta = obj["metadata"]
    return store.patch(
        obj["apiVersion"],
        obj["kind"],
        meta.get("namespace"),
        meta["name"],
        {"status": status},
        subresource="status",
        field_manager=field_manager,
    )


def dcgm_pod_name(node_name: str) -> str:
    return f"nvidia-dcgm-exporter-{_short_hash(node_name)}"


def install(ctx) -> None:
    """Create the namespaces, nodes and GPU Operator objects of the cluster description."""
    store = ctx.store
    cluster: Cluster = ctx.cluster
    now = rfc3339(store.clock.now())
    timestamp = int(store.clock.time())
    for ns in ("default", "kube-system", "kube-public", "kube-node-lease", GPU_OPERATOR_NAMESPACE):
        ensure(store, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    apiserver_labels = {"component": "apiserver", "provider": "kubernetes"}
    ensure(
        store,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": apiserver_labels},
            "spec": {
                "clusterIP": "10.96.0.1",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
            },
        },
    )
    ensure(
        store,
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": apiserver_labels},
            "subsets": [
                {
                    "addresses": [{"ip": "10.0.0.2"}],
                    "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
                }
            ],
        },
    )
    for spec in cluster.nodes:
        node = node_object(spec, cluster, now, timestamp)
        status = node.pop("status")
        existing = store.try_get("v1", "Node", None, spec.name)
        if existing is None:
            existing = store.create(node, field_manager="kubelet")
        else:
            # Keep what others changed (cordon, labels), refresh what the kubelet owns.
            existing["metadata"].setdefault("labels", {}).update(node["metadata"]["labels"])
            existing["metadata"].setdefault("annotations", {}).update(
                node["metadata"]["annotations"]
            )
            existing = store.update(existing)
        set_status(store, existing, status, field_manager="kubelet")
    _install_gpu_operator(ctx, now)


def _install_gpu_operator(ctx, now: str) -> None:
    store = ctx.store
    cluster: Cluster = ctx.cluster
    ns = GPU_OPERATOR_NAMESPACE
    selector = {"app": DCGM_APP_LABEL}
    container = {
        "name": "nvidia-dcgm-exporter",
        "image": DCGM_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "env": [
            {"name": "DCGM_EXPORTER_LISTEN", "value": f":{DCGM_PORT}"},
            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            {
                "name": "DCGM_EXPORTER_COLLECTORS",
                "value": "/etc/dcgm-exporter/default-counters.csv",
            },
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "ports": [{"name": "metrics", "containerPort": DCGM_PORT, "protocol": "TCP"}],
        "resources": {},
        "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
    }
    pod_spec = {
        "containers": [container],
        "serviceAccountName": "nvidia-dcgm-exporter",
        "priorityClassName": "system-node-critical",
        "nodeSelector": {"nvidia.com/gpu.deploy.dcgm-exporter": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    daemonset = ensure(
        store,
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": DCGM_APP_LABEL, "namespace": ns, "labels": dict(selector)},
            "spec": {
                "selector": {"matchLabels": dict(selector)},
                "template": {"metadata": {"labels": dict(selector)}, "spec": pod_spec},
            },
        },
    )
    ensure(
        store,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nvidia-dcgm-exporter", "namespace": ns},
        },
    )
    ensure(
        store,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": DCGM_APP_LABEL, "namespace": ns, "labels": dict(selector)},
            "spec": {
                "type": "ClusterIP",
                "selector": dict(selector),
                "ports": [
                    {
                        "name": "gpu-metrics",
                        "port": DCGM_PORT,
                        "targetPort": DCGM_PORT,
                        "protocol": "TCP",
                    }
                ],
            },
        },
    )
    gpu_nodes = cluster.gpu_nodes()
    for spec in gpu_nodes:
        name = dcgm_pod_name(spec.name)
        pod_ip = f"{spec.pod_cidr_prefix}.2"
        pod = ensure(
            store,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "labels": {
                        **selector,
                        "controller-revision-hash": "6c8f9d7b5d",
                        "pod-template-generation": "1",
                    },
                    "annotations": {SYSTEM_POD_ANNOTATION: "true"},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "DaemonSet",
                            "name": DCGM_APP_LABEL,
                            "uid": daemonset["metadata"]["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {**pod_spec, "nodeName": spec.name},
            },
            field_manager="daemonset-controller",
        )
        conditions = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
            for t in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ]
        set_status(
            store,
            pod,
            {
                "phase": "Running",
                "conditions": conditions,
                "hostIP": spec.internal_ip,
                "hostIPs": [{"ip": spec.internal_ip}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "startTime": now,
                "qosClass": "BestEffort",
                "containerStatuses": [
                    {
                        "name": "nvidia-dcgm-exporter",
                        "image": DCGM_IMAGE,
                        "imageID": "nvcr.io/nvidia/k8s/dcgm-exporter@sha256:"
                        + hashlib.sha256(DCGM_IMAGE.encode()).hexdigest(),
                        "containerID": "containerd://" + hashlib.sha256(name.encode()).hexdigest(),
                        "ready": True,
                        "started": True,
                        "restartCount": 0,
                        "state": {"running": {"startedAt": now}},
                        "lastState": {},
                    }
                ],
            },
            field_manager="kubelet",
        )
    ready = len(gpu_nodes)
    set_status(
        store,
        daemonset,
        {
            "currentNumberScheduled": ready,
            "desiredNumberScheduled": ready,
            "numberAvailable": ready,
            "numberMisscheduled": 0,
            "numberReady": ready,
            "observedGeneration": 1,
            "updatedNumberScheduled": ready,
        },
        field_manager="daemonset-controller",
    )
