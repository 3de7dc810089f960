"""Simulated kubelets: pod lifecycle, device allocation, container logs, node heartbeats.

A pod bound to one of the cluster's nodes goes Pending (ContainerCreating) -> Running ->
Succeeded/Failed as a real kubelet reports it: container statuses with state, ready, started,
restartCount, exitCode and reason; pod conditions; podIP, hostIP, startTime; the events Pulling,
Pulled, Created, Started, BackOff and Killing. What each container does comes from its command
(kubesim.controllers.node.shell).

Devices: when a pod is admitted the node's device manager hands its containers concrete GPUs or
MIG instances (UUIDs), as the NVIDIA device plugin does. The assignment is kept on the node side
(served like the kubelet pod-resources API at GET /kubesim/nodes/NODE/pod-resources) and shown on
the pod in the annotations kubesim.dev/gpu-uuids (comma-separated UUIDs) and kubesim.dev/devices
(JSON: container -> resource -> UUIDs).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import json
import math
import traceback
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from aiohttp import web

from kubesim.api.errors import ApiError, bad_request, not_found
from kubesim.clock import parse_rfc3339, rfc3339
from kubesim.cluster import SYSTEM_POD_ANNOTATION, Cluster, node_resources, ready_conditions
from kubesim.controllers import events, storage
from kubesim.controllers.context import follow
from kubesim.controllers.node import pod_config, shell, workspace_apps
from kubesim.controllers.scheduler import quantity_units
from kubesim.waiting import wait_event

FIELD_MANAGER = "kubelet"
GPU_UUIDS_ANNOTATION = "kubesim.dev/gpu-uuids"
DEVICES_ANNOTATION = "kubesim.dev/devices"
# MPS pools: the limits the MPS control daemon applies to the pod's GPUs (JSON).
MPS_ANNOTATION = "kubesim.dev/mps-limits"
# The GPU indices on the node (nvidia-smi numbering) of the devices above, comma-separated.
GPU_INDICES_ANNOTATION = "kubesim.dev/gpu-indices"
LEASE_NAMESPACE = "kube-node-lease"
# XIDs the device plugin treats as application errors (the GPU stays healthy).
APPLICATION_XIDS = {13, 31, 43, 45, 68, 109}
MOUNT_RETRY_SECONDS = 10.0  # the kubelet retries volume set-up (events aggregate)
CONFIG_RETRY_SECONDS = 10.0  # and a container whose env source is missing, on each pod sync
PULL_BACKOFF_SECONDS = (10.0, 300.0)  # image pull back-off: 10 s doubling, capped at 5 min


def _ts(epoch: float) -> str:
    return rfc3339(datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC))


def _ts_nano(epoch: float) -> str:
    dt = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int((epoch % 1) * 1e9):09d}Z"


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _image_id(image: str) -> str:
    repo = image.split("@")[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: repo.rindex(":")]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    elif "." not in repo.split("/")[0] and ":" not in repo.split("/")[0]:
        repo = f"docker.io/{repo}"
    return f"{repo}@sha256:{_digest('image', image)}"


def _query_bool(value: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (clients send "true"/"True")."""
    return (value or "").lower() in ("1", "t", "true")


def gpu_resources(container: dict) -> dict[str, int]:
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {
        name: quantity_units(name, value)
        for name, value in merged.items()
        if name in ("nvidia.com/gpu", "nvidia.com/gpu.shared") or name.startswith("nvidia.com/mig-")
    }


# ----------------------------------------------------------------------------------------------
# Device manager


class AdmissionError(Exception):
    pass


class DeviceManager:
    """Which pod container holds which device on each node (the pod-resources view)."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster
        # node -> device uuid -> (namespace, pod, container, pod uid)
        self.assigned: dict[str, dict[str, tuple[str, str, str, str]]] = {}

    def holder(self, node: str, device_uuid: str) -> tuple[str, str, str] | None:
        """(namespace, pod, container) holding the device."""
        held = self.assigned.get(node, {}).get(device_uuid)
        return held[:3] if held else None

    def allocate(
        self, node: str, pod: dict, exists: Callable[[str, str, str], bool] | None = None
    ) -> dict[str, dict[str, list[str]]]:
        """Pick free devices for the pod's containers.

        Like the real device manager (UpdateAllocatedDevices before Allocate), holdings of pods that
        are no longer in the API are dropped first: a pod deleted with grace 0 must not block the
        pod the scheduler bound in its place before its runner got round to releasing.
        """
        devices = self.cluster.devices(node)
        taken = self.assigned.setdefault(node, {})
        if exists is not None:
            for device_uuid, (namespace, name, _container, uid) in list(taken.items()):
                if not exists(namespace, name, uid):
                    del taken[device_uuid]
        meta = pod["metadata"]
        plan: dict[str, dict[str, list[str]]] = {}
        claimed: set[str] = set()
        containers = (pod["spec"].get("initContainers") or []) + pod["spec"].get("containers", [])
        sharing = self.cluster.node(node).sharing if self.cluster.node(node) else None
        for container in containers:
            for resource, count in sorted(gpu_resources(container).items()):
                if sharing and sharing.fail_requests_greater_than_one and count > 1:
                    # the plugin's Allocate refuses it (failRequestsGreaterThanOne)
                    raise AdmissionError(
                        f"Allocate failed due to rpc error: code = Unknown desc = request for "
                        f"'{resource}: {count}' too large: maximum request size for shared "
                        "resources is 1, which is unexpected"
                    )
                free = [
                    d
                    for d in devices.values()
                    if d.resource == resource
                    and d.healthy
                    and d.uuid not in taken
                    and d.uuid not in claimed
                ]
                if sharing:
                    # sharedDevicesAllocationPolicy "distributed" (the default): the GPU with
                    # the fewest allocated replicas first
                    load: dict[str, int] = {}
                    for held in list(taken) + list(claimed):
                        if held in devices:
                            key = devices[held].device_uuid
                            load[key] = load.get(key, 0) + 1
                    free.sort(key=lambda d: (load.get(d.device_uuid, 0), d.gpu_index, d.uuid))
                free = [d.uuid for d in free]
                if len(free) < count:
                    raise AdmissionError(
                        "Allocate failed due to requested number of devices unavailable for "
                        f"{resource}. Requested: {count}, Available: {len(free)}, "
                        "which is unexpected"
                    )
                chosen = free[:count]
                claimed.update(chosen)
                plan.setdefault(container["name"], {})[resource] = chosen
        for container, by_resource in plan.items():
            for uuids in by_resource.values():
                for device_uuid in uuids:
                    taken[device_uuid] = (
                        meta.get("namespace") or "",
                        meta["name"],
                        container,
                        meta.get("uid", ""),
                    )
        return plan

    def restore(self, node: str, pod: dict, plan: dict[str, dict[str, list[str]]]) -> None:
        taken = self.assigned.setdefault(node, {})
        meta = pod["metadata"]
        for container, by_resource in plan.items():
            for uuids in by_resource.values():
                for device_uuid in uuids:
                    taken[device_uuid] = (
                        meta.get("namespace") or "",
                        meta["name"],
                        container,
                        meta.get("uid", ""),
                    )

    def release(self, node: str, namespace: str, name: str, uid: str) -> None:
        """Free the devices of one pod (by uid: a new pod of the same name keeps its own)."""
        taken = self.assigned.get(node, {})
        for device_uuid in [
            u for u, h in taken.items() if h[0] == namespace and h[1] == name and h[3] == uid
        ]:
            del taken[device_uuid]

    def release_pod(self, uid: str) -> None:
        """Free whatever the pod with this uid holds, on any node."""
        for taken in self.assigned.values():
            for device_uuid in [u for u, h in taken.items() if h[3] == uid]:
                del taken[device_uuid]

    def pod_resources(self, node: str) -> dict:
        """The node's assignments in the shape of the kubelet pod-resources API v1 List()."""
        pods: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
        devices = self.cluster.devices(node)
        for device_uuid, (namespace, pod, container, _uid) in sorted(
            self.assigned.get(node, {}).items()
        ):
            resource = devices[device_uuid].resource if device_uuid in devices else "nvidia.com/gpu"
            pods.setdefault((namespace, pod), {}).setdefault(container, {}).setdefault(
                resource, []
            ).append(device_uuid)
        return {
            "pod_resources": [
                {
                    "name": pod,
                    "namespace": namespace,
                    "containers": [
                        {
                            "name": container,
                            "devices": [
                                {"resource_name": r, "device_ids": ids}
                                for r, ids in sorted(by_resource.items())
                            ],
                        }
                        for container, by_resource in sorted(containers.items())
                    ],
                }
                for (namespace, pod), containers in sorted(pods.items())
            ]
        }


# ----------------------------------------------------------------------------------------------
# Containers and their logs


@dataclass
class Attempt:
    """One run of a container (a restart starts a new attempt)."""

    started: float  # simulated epoch seconds
    timeline: shell.Timeline
    finished: float | None = None
    exit_code: int | None = None
    reason: str = ""
    container_id: str = ""


@dataclass
class ContainerRun:
    name: str
    image: str
    command: str
    attempts: list[Attempt] = field(default_factory=list)
    restart_count: int = 0
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    last_terminated: dict | None = None

    def lines(
        self, attempt: Attempt, now: float, seed: str, gpus: list[str]
    ) -> list[tuple[float, str]]:
        end = attempt.finished if attempt.finished is not None else now
        elapsed = max(0.0, min(now, end) - attempt.started)
        if attempt.timeline.scripted:
            visible = [(o, t) for o, t in attempt.timeline.lines if o <= elapsed]
        else:
            visible = shell.progress_lines(
                seed, attempt.timeline.duration, elapsed, gpus=gpus, command=self.command
            )
        return [(attempt.started + o, t) for o, t in visible]


# ----------------------------------------------------------------------------------------------
# Pods


class PodRunner:
    def __init__(self, kubelet: Kubelet, pod: dict):
        self.kubelet = kubelet
        self.store = kubelet.store
        self.clock = kubelet.clock
        meta = pod["metadata"]
        self.namespace = meta.get("namespace") or "default"
        self.name = meta["name"]
        self.uid = meta.get("uid", "")
        self.node = pod["spec"]["nodeName"]
        self.pod = pod
        self.containers: dict[str, ContainerRun] = {}
        self.init_containers: dict[str, ContainerRun] = {}
        self.devices: dict[str, dict[str, list[str]]] = {}
        self.phase = "Pending"
        self.started_at = self.clock.time()
        self.pod_ip = ""
        self.stop = asyncio.Event()
        self.regrace = asyncio.Event()  # the pod's deletionGracePeriodSeconds may have changed
        self.stop_reason = ""  # "delete" | "fail" | "nodelost" | "deadline"
        self.fail_exit_code = 1
        self.fail_reason = "Error"
        self.fail_message = ""
        self.finished = False
        self.task: asyncio.Task | None = None
        self.running_since: float | None = None
        self.disruption: dict | None = None
        self.initialized = False

    # -- helpers
    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def gpu_uuids(self) -> list[str]:
        return [u for by_res in self.devices.values() for ids in by_res.values() for u in ids]

    def container_gpus(self, container: str) -> list[str]:
        return [u for ids in self.devices.get(container, {}).values() for u in ids]

    def env_for(self, container: dict) -> dict[str, str]:
        meta = self.pod["metadata"]
        env = {
            "HOSTNAME": self.pod["spec"].get("hostname") or self.name,
            "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
        }
        node_spec = self.kubelet.cluster.node(self.node)
        mps = node_spec and node_spec.sharing and node_spec.sharing.strategy == "mps"
        if mps and self.container_gpus(container.get("name", "")):
            # the plugin's Allocate response for an MPS replica (plus the pipe/shm mounts)
            env["CUDA_MPS_PIPE_DIRECTORY"] = "/mps/nvidia.com/gpu/pipe"
        # envFrom and valueFrom.secretKeyRef/configMapKeyRef (Secret data decoded)
        env.update(pod_config.env_values(self.store, self.pod, container))
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = str(item.get("value") or "")
                continue
            source = item.get("valueFrom") or {}
            if source.get("secretKeyRef") or source.get("configMapKeyRef"):
                continue
            ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            value = ""
            if ref == "metadata.name":
                value = self.name
            elif ref == "metadata.namespace":
                value = self.namespace
            elif ref == "metadata.uid":
                value = self.uid
            elif ref == "spec.nodeName":
                value = self.node
            elif ref in ("status.podIP", "status.podIPs"):
                value = self.pod_ip
            elif ref.startswith("metadata.annotations['") or ref.startswith("metadata.labels['"):
                source = "annotations" if ref.startswith("metadata.annotations") else "labels"
                key = ref.split("['", 1)[1].rstrip("']")
                value = str((meta.get(source) or {}).get(key, ""))
            env[item["name"]] = value
        return env

    def request_stop(self, reason: str) -> None:
        if not self.stop_reason:
            self.stop_reason = reason
        self.stop.set()

    async def wait(self, sim_seconds: float) -> bool:
        """Wait in simulated time; True when a stop was requested meanwhile."""
        if self.stop.is_set():
            return True
        timeout = max(0.0, sim_seconds) / self.clock.speed
        return await wait_event(self.stop, timeout)

    def record(
        self, reason: str, message: str, *, type: str = "Normal", field_path: str | None = None
    ):
        events.record(
            self.store,
            self.pod,
            reason,
            message,
            type=type,
            component="kubelet",
            host=self.node,
            field_path=field_path,
        )

    # -- status
    def _container_status(self, run: ContainerRun, spec: dict, *, init: bool = False) -> dict:
        status: dict = {
            "name": run.name,
            "image": run.image,
            "imageID": "",
            "ready": False,
            "restartCount": run.restart_count,
            "started": False,
            "lastState": {"terminated": run.last_terminated} if run.last_terminated else {},
        }
        attempt = run.attempts[-1] if run.attempts else None
        if attempt is None:
            waiting = {"reason": run.waiting_reason}
            if run.waiting_message:
                waiting["message"] = run.waiting_message
            status["state"] = {"waiting": waiting}
            return status
        status["imageID"] = _image_id(run.image)
        status["containerID"] = attempt.container_id
        if attempt.finished is None:
            if run.waiting_reason == "CrashLoopBackOff":
                status["state"] = {
                    "waiting": {"reason": "CrashLoopBackOff", "message": run.waiting_message}
                }
            else:
                status["state"] = {"running": {"startedAt": _ts(attempt.started)}}
                status["ready"] = not init
                status["started"] = True
        else:
            terminated = {
                "exitCode": attempt.exit_code,
                "reason": attempt.reason,
                "startedAt": _ts(attempt.started),
                "finishedAt": _ts(attempt.finished),
                "containerID": attempt.container_id,
            }
            if self.fail_message and attempt.reason not in ("Completed", "Error"):
                terminated["message"] = self.fail_message
            status["state"] = {"terminated": terminated}
        return status

    def _conditions(self, now: str) -> list[dict]:
        old = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}

        def cond(ctype: str, ok: bool, reason: str = "", message: str = "") -> dict:
            status = "True" if ok else "False"
            previous = old.get(ctype)
            since = (
                previous.get("lastTransitionTime")
                if previous and previous.get("status") == status
                else now
            )
            out = {
                "type": ctype,
                "status": status,
                "lastProbeTime": None,
                "lastTransitionTime": since,
            }
            if reason and not ok:
                out["reason"] = reason
            if message and not ok:
                out["message"] = message
            return out

        terminal = self.phase in ("Succeeded", "Failed")
        unready = [
            n
            for n, r in self.containers.items()
            if not r.attempts
            or r.attempts[-1].finished is not None
            or r.waiting_reason == "CrashLoopBackOff"
        ]
        uninit = [
            n
            for n, r in self.init_containers.items()
            if not r.attempts or r.attempts[-1].exit_code != 0
        ]
        containers_ready = not unready and not terminal
        if terminal:
            reason, message = "PodCompleted", ""
        else:
            reason = "ContainersNotReady"
            message = f"containers with unready status: [{' '.join(unready)}]"
        # Conditions other components own (DisruptionTarget from an eviction, readiness gates)
        # are kept.
        own = {
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        }
        conditions = [c for t, c in old.items() if t not in own]
        if self.disruption:
            conditions = [c for c in conditions if c.get("type") != "DisruptionTarget"]
            conditions.append(self.disruption)
        conditions += [
            cond("PodReadyToStartContainers", self.running_since is not None and not terminal),
            cond(
                "Initialized",
                self.initialized or not uninit,
                "PodCompleted" if terminal and not uninit else "ContainersNotInitialized",
                "" if not uninit else f"containers with incomplete status: [{' '.join(uninit)}]",
            ),
            cond("Ready", containers_ready, reason, message),
            cond("ContainersReady", containers_ready, reason, message),
            old.get("PodScheduled")
            or {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
        ]
        return conditions

    def status(self) -> dict:
        now = rfc3339(self.clock.now())
        node = self.kubelet.cluster.node(self.node)
        host_ip = node.internal_ip if node else "10.0.0.1"
        spec = self.pod["spec"]
        status: dict = {
            "phase": self.phase,
            "conditions": self._conditions(now),
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "startTime": _ts(self.started_at),
            "qosClass": (self.pod.get("status") or {}).get("qosClass") or "BestEffort",
            "containerStatuses": [
                self._container_status(self.containers[c["name"]], c)
                for c in spec.get("containers", [])
            ],
        }
        if self.init_containers:
            status["initContainerStatuses"] = [
                self._container_status(self.init_containers[c["name"]], c, init=True)
                for c in spec.get("initContainers") or []
            ]
        if self.pod_ip:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.phase == "Failed" and self.stop_reason == "deadline":
            status["reason"] = "DeadlineExceeded"
            status["message"] = "Pod was active on the node longer than the specified deadline"
        elif (
            self.phase == "Failed"
            and self.stop_reason == "fail"
            and self.fail_reason not in ("Error",)
        ):
            status["reason"] = self.fail_reason
            if self.fail_message:
                status["message"] = self.fail_message
        return status

    def publish(self) -> bool:
        """Write the pod status; False when the pod is gone (or replaced)."""
        try:
            self.pod = self.store.patch(
                "v1",
                "Pod",
                self.namespace,
                self.name,
                {"status": self.status()},
                subresource="status",
            )
        except ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    # -- lifecycle
    def admit(self) -> bool:
        """Allocate devices (synchronously, so two pods never get the same device)."""
        plan_text = (self.pod["metadata"].get("annotations") or {}).get(DEVICES_ANNOTATION)
        if plan_text:
            try:
                self.devices = json.loads(plan_text)
                self.kubelet.devices.restore(self.node, self.pod, self.devices)
                return True
            except (ValueError, TypeError):
                self.devices = {}
        try:
            self.devices = self.kubelet.devices.allocate(
                self.node, self.pod, exists=self.kubelet.pod_exists
            )
        except AdmissionError as exc:
            self.phase = "Failed"
            self.stop_reason = "fail"
            self.fail_reason = "UnexpectedAdmissionError"
            self.fail_message = str(exc)
            return False
        return True

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception:  # keep the kubelet alive; the pod stays as last reported
            traceback.print_exc()
        finally:
            workspace_apps.APPS.stop(self.uid)
            self.kubelet.devices.release(self.node, self.namespace, self.name, self.uid)
            self.finished = True
            if self.kubelet.runners.get(self.key) is self:
                del self.kubelet.runners[self.key]

    def _annotate_devices(self) -> None:
        if not self.devices:
            return
        by_uuid = self.kubelet.cluster.devices(self.node)
        indices = sorted({by_uuid[u].gpu_index for u in self.gpu_uuids if u in by_uuid})
        # a shared replica <UUID>::<n> is the physical device to the container
        physical = list(
            dict.fromkeys(by_uuid[u].device_uuid if u in by_uuid else u for u in self.gpu_uuids)
        )
        annotations = {
            GPU_UUIDS_ANNOTATION: ",".join(physical),
            GPU_INDICES_ANNOTATION: ",".join(str(i) for i in indices),
            DEVICES_ANNOTATION: json.dumps(self.devices, separators=(",", ":")),
        }
        spec = self.kubelet.cluster.node(self.node)
        if spec and spec.sharing and spec.sharing.strategy == "mps" and spec.gpu_model:
            # what the plugin's MPS control daemon enforces per GPU: memory/replicas, 100/replicas
            replicas = spec.sharing.replicas
            annotations[MPS_ANNOTATION] = json.dumps(
                {
                    "activeThreadPercentage": 100 // replicas,
                    "pinnedDeviceMemoryLimit": {
                        u: f"{spec.gpu_model.memory_mib // replicas}M" for u in physical
                    },
                },
                separators=(",", ":"),
            )
        patch = {"metadata": {"annotations": annotations}}
        with contextlib.suppress(ApiError):
            self.pod = self.store.patch("v1", "Pod", self.namespace, self.name, patch)

    async def _run(self) -> None:
        spec = self.pod["spec"]
        for c in spec.get("initContainers") or []:
            self.init_containers[c["name"]] = ContainerRun(
                c["name"],
                c.get("image", ""),
                " ".join(shell.command_line(c)),
                waiting_reason="PodInitializing",
            )
        for c in spec.get("containers", []):
            self.containers[c["name"]] = ContainerRun(
                c["name"],
                c.get("image", ""),
                " ".join(shell.command_line(c)),
                waiting_reason="PodInitializing" if self.init_containers else "ContainerCreating",
            )
        if self.phase == "Failed":  # admission failed
            self.record("UnexpectedAdmissionError", self.fail_message, type="Warning")
            self.publish()
            return
        self._annotate_devices()
        if not self.publish():
            return
        # a missing ConfigMap, Secret or claim keeps the pod ContainerCreating, as a kubelet does
        while problems := storage.mount_problems(self.store, self.pod):
            for _volume, message in problems:
                self.record("FailedMount", message, type="Warning")
            if await self.wait(MOUNT_RETRY_SECONDS):
                return await self._stopped()
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None:
            remaining = self.started_at + float(deadline) - self.clock.time()
            asyncio.get_running_loop().call_later(
                max(0.0, remaining) / self.clock.speed, self.request_stop, "deadline"
            )
        # Sandbox and network: the pod gets its IP.
        if await self.wait(0.5):
            return await self._stopped()
        self.pod_ip = self.kubelet.allocate_ip(self.node)
        self.running_since = self.clock.time()
        for c in spec.get("initContainers") or []:
            ok = await self._run_container(c, self.init_containers[c["name"]], init=True)
            if self.stop.is_set():
                return await self._stopped()
            if not ok:
                self.phase = "Failed"
                self.publish()
                return
        self.initialized = True
        results = await asyncio.gather(
            *(
                self._run_container(c, self.containers[c["name"]])
                for c in spec.get("containers", [])
            )
        )
        if self.stop.is_set():
            return await self._stopped()
        self.phase = "Succeeded" if all(results) else "Failed"
        self.publish()

    async def _pull(self, container: dict, run: ContainerRun) -> bool:
        image = container.get("image", "")
        field_path = f"spec.containers{{{run.name}}}"
        policy = container.get("imagePullPolicy") or (
            "Always"
            if image.endswith(":latest") or ":" not in image.rsplit("/", 1)[-1]
            else "IfNotPresent"
        )
        cached = image in self.kubelet.images.setdefault(self.node, set())
        if cached and policy != "Always":
            self.record(
                "Pulled",
                f'Container image "{image}" already present on machine',
                field_path=field_path,
            )
            return False
        if await self._pull_authorized(image, run, field_path):
            return True
        self.record("Pulling", f'Pulling image "{image}"', field_path=field_path)
        seconds = 1.0 + (zlib.crc32(image.encode()) % 9000) / 1000.0 if not cached else 0.4
        if await self.wait(seconds):
            return True
        self.kubelet.images[self.node].add(image)
        size = 20_000_000 + zlib.crc32(image.encode()) % 4_000_000_000
        self.record(
            "Pulled",
            f'Successfully pulled image "{image}" in {seconds:.3f}s '
            f"({seconds:.3f}s including waiting). Image size: {size} bytes.",
            field_path=field_path,
        )
        return False

    async def _pull_authorized(self, image: str, run: ContainerRun, field_path: str) -> bool:
        """Retry (with back-off) until the registry lets this pod pull the image: a private
        registry needs an imagePullSecret with credentials for it. True when stopped meanwhile."""
        backoff = PULL_BACKOFF_SECONDS[0]
        while True:
            missing = pod_config.missing_pull_secrets(self.store, self.pod)
            if missing:
                self.record(
                    "FailedToRetrieveImagePullSecret",
                    f"Unable to retrieve some image pull secrets ({', '.join(missing)}); "
                    "attempting to pull the image may not succeed.",
                    type="Warning",
                )
            problem = pod_config.pull_problem(
                self.store, self.kubelet.cluster.private_registries, self.pod, image
            )
            if problem is None:
                if run.waiting_reason in ("ErrImagePull", "ImagePullBackOff"):
                    run.waiting_reason, run.waiting_message = "ContainerCreating", ""
                return False
            self.record("Pulling", f'Pulling image "{image}"', field_path=field_path)
            if await self.wait(0.5):
                return True
            self.record(
                "Failed",
                f'Failed to pull image "{image}": {problem}',
                type="Warning",
                field_path=field_path,
            )
            self.record("Failed", "Error: ErrImagePull", type="Warning", field_path=field_path)
            run.waiting_reason, run.waiting_message = "ErrImagePull", problem
            self.publish()
            if await self.wait(1.0):
                return True
            message = f'Back-off pulling image "{image}"'
            self.record("BackOff", message, field_path=field_path)
            self.record("Failed", "Error: ImagePullBackOff", type="Warning", field_path=field_path)
            run.waiting_reason, run.waiting_message = "ImagePullBackOff", message
            self.publish()
            if await self.wait(backoff):
                return True
            backoff = min(backoff * 2, PULL_BACKOFF_SECONDS[1])

    async def _config_ready(self, container: dict, run: ContainerRun, field_path: str) -> bool:
        """Wait while an env source is missing (CreateContainerConfigError, re-checked on each
        sync); False when stopped meanwhile."""
        while problem := pod_config.env_problem(self.store, self.pod, container):
            run.waiting_reason, run.waiting_message = "CreateContainerConfigError", problem
            self.record("Failed", f"Error: {problem}", type="Warning", field_path=field_path)
            self.publish()
            if await self.wait(CONFIG_RETRY_SECONDS):
                return False
            self.record(
                "Pulled",
                f'Container image "{container.get("image", "")}" already present on machine',
                field_path=field_path,
            )
        run.waiting_message = ""
        return True

    async def _run_container(
        self, container: dict, run: ContainerRun, *, init: bool = False
    ) -> bool:
        """Run a container (with restarts per the pod's restartPolicy); True when it succeeded."""
        restart_policy = self.pod["spec"].get("restartPolicy") or "Always"
        field_path = f"spec.{'initContainers' if init else 'containers'}{{{run.name}}}"
        run.waiting_reason = "ContainerCreating"
        if await self._pull(container, run):
            return False
        backoff = 10.0
        while True:
            if not await self._config_ready(container, run, field_path):
                return False
            env = self.env_for(container)
            if workspace_apps.app_for_image(container.get("image", "")):
                # A workspace image runs its real server until the pod stops (workspace_apps).
                note = workspace_apps.APPS.start(
                    uid=self.uid,
                    namespace=self.namespace,
                    name=self.name,
                    container=container,
                    env=env,
                    gpus=self.container_gpus(run.name),
                )
                timeline = shell.Timeline(lines=[(0.0, note)], duration=math.inf)
            else:
                timeline = shell.plan(container, env, self.kubelet.default_duration)
            self.record("Created", f"Created container: {run.name}", field_path=field_path)
            attempt = Attempt(
                started=self.clock.time(),
                timeline=timeline,
                container_id="containerd://" + _digest(self.uid, run.name, str(run.restart_count)),
            )
            run.attempts.append(attempt)
            run.waiting_reason = ""
            self.record("Started", f"Started container {run.name}", field_path=field_path)
            if self.phase == "Pending" and not init:
                self.phase = "Running"
            self.publish()
            if await self.wait(timeline.duration):
                return False
            attempt.finished = self.clock.time()
            attempt.exit_code = timeline.exit_code
            attempt.reason = "Completed" if timeline.exit_code == 0 else "Error"
            if timeline.oom_killed:
                attempt.reason = "OOMKilled"
                # What the kernel's OOM report turns into (node-problem-detector's event).
                self.record(
                    "OOMKilling",
                    f"Memory cgroup out of memory: Killed process of container {run.name} "
                    f"in pod {self.namespace}/{self.name}",
                    type="Warning",
                    field_path=field_path,
                )
            succeeded = timeline.exit_code == 0
            restart = restart_policy == "Always" or (
                restart_policy == "OnFailure" and not succeeded
            )
            if init and succeeded:
                return True
            if not restart:
                return succeeded
            # Restart with kubelet's crash-loop back-off (10 s doubling, capped at 5 min).
            run.last_terminated = {
                "exitCode": attempt.exit_code,
                "reason": attempt.reason,
                "startedAt": _ts(attempt.started),
                "finishedAt": _ts(attempt.finished),
                "containerID": attempt.container_id,
            }
            run.waiting_reason = "CrashLoopBackOff"
            run.waiting_message = (
                f"back-off {int(backoff)}s restarting failed container={run.name} "
                f"pod={self.name}_{self.namespace}({self.uid})"
            )
            self.publish()
            self.record(
                "BackOff",
                f"Back-off restarting failed container {run.name} in pod "
                f"{self.name}_{self.namespace}({self.uid})",
                type="Warning",
                field_path=field_path,
            )
            if await self.wait(backoff):
                return False
            backoff = min(backoff * 2, 300.0)
            run.restart_count += 1
            run.waiting_reason = ""

    async def _terminate_gracefully(self) -> dict[str, int]:
        """SIGTERM, then SIGKILL after the grace period, as the kubelet does on deletion.

        An opaque program (a trainer) exits on SIGTERM within a couple of seconds (143); a shell
        script ignores it (a shell as PID 1 has no handler) and is killed at the end of the grace
        period (137), unless the script ends first. Returns the exit code per running container.
        """
        noticed = self.clock.time()
        while True:
            # a second delete may shorten the grace period (on_pod wakes us with the new pod)
            meta = self.pod.get("metadata") or {}
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
            grace = float(grace or 0)
            # the period runs from the delete (deletionTimestamp = delete time + grace), not from
            # when this kubelet noticed it
            began = noticed
            if meta.get("deletionTimestamp") and self.stop_reason == "delete":
                with contextlib.suppress(ValueError):
                    deadline = parse_rfc3339(meta["deletionTimestamp"]).timestamp()
                    began = deadline - grace
            exits: dict[str, tuple[float, int]] = {}
            for group in (self.init_containers, self.containers):
                for run in group.values():
                    if not run.attempts or run.attempts[-1].finished is not None:
                        continue
                    attempt = run.attempts[-1]
                    if attempt.timeline.scripted:
                        remaining = attempt.started + attempt.timeline.duration - began
                        if remaining < grace:
                            exits[run.name] = (max(0.0, remaining), attempt.timeline.exit_code)
                        else:
                            exits[run.name] = (grace, 137)
                    else:
                        exits[run.name] = (min(grace, 2.0), 143)
            left = began + max((d for d, _ in exits.values()), default=0.0) - self.clock.time()
            if left <= 0:
                break
            self.regrace.clear()
            if not await wait_event(self.regrace, left / self.clock.speed):
                break
        return {name: code for name, (_, code) in exits.items()}

    async def _stopped(self) -> None:
        """Finish after a stop request: deletion, an injected failure, or a lost node."""
        exit_code, reason = 137, "Error"
        graceful_exits: dict[str, int] = {}
        if self.stop_reason in ("delete", "deadline"):
            for group in (self.init_containers, self.containers):
                for run in group.values():
                    if run.attempts and run.attempts[-1].finished is None:
                        self.record(
                            "Killing",
                            f"Stopping container {run.name}",
                            field_path=f"spec.containers{{{run.name}}}",
                        )
            graceful_exits = await self._terminate_gracefully()
        now = self.clock.time()
        if self.stop_reason == "fail":
            exit_code, reason = self.fail_exit_code, self.fail_reason
        elif self.stop_reason == "nodelost":
            exit_code, reason = 137, "ContainerStatusUnknown"
            self.fail_message = "The container could not be located when the pod was terminated"
        for group in (self.init_containers, self.containers):
            for run in group.values():
                if run.attempts and run.attempts[-1].finished is None:
                    attempt = run.attempts[-1]
                    attempt.finished = now
                    attempt.exit_code = graceful_exits.get(run.name, exit_code)
                    attempt.reason = "Completed" if attempt.exit_code == 0 else reason
                elif not run.attempts:
                    run.attempts.append(
                        Attempt(
                            started=now,
                            timeline=shell.Timeline(),
                            finished=now,
                            exit_code=exit_code,
                            reason=reason,
                            container_id="containerd://" + _digest(self.uid, run.name, "x"),
                        )
                    )
                run.waiting_reason = ""
        all_ok = all(r.attempts and r.attempts[-1].exit_code == 0 for r in self.containers.values())
        self.phase = "Succeeded" if all_ok and self.stop_reason == "delete" else "Failed"
        if self.stop_reason == "nodelost":
            self.disruption = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByTaintManager",
                "message": "Taint manager: deleting due to NoExecute taint",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self.clock.now()),
            }
        self.publish()
        if self.stop_reason == "delete":
            with contextlib.suppress(ApiError):
                current = self.store.try_get("v1", "Pod", self.namespace, self.name)
                if current is not None and current["metadata"].get("uid") == self.uid:
                    self.store.delete("v1", "Pod", self.namespace, self.name, grace=False)

    # -- logs
    def log_lines(self, container: str, previous: bool) -> list[tuple[float, str]] | None:
        run = self.containers.get(container) or self.init_containers.get(container)
        if run is None or not run.attempts:
            return None
        attempts = run.attempts
        if previous:
            if len(attempts) < 2:
                return None
            attempt = attempts[-2]
        else:
            attempt = attempts[-1]
        return run.lines(
            attempt, self.clock.time(), f"{self.uid}/{container}", self.container_gpus(container)
        )

    def container_done(self, container: str) -> bool:
        run = self.containers.get(container) or self.init_containers.get(container)
        return (
            self.finished
            or run is None
            or (bool(run.attempts) and run.attempts[-1].finished is not None)
        )


# ----------------------------------------------------------------------------------------------
# The kubelets of all nodes


class Kubelet:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.cluster: Cluster = ctx.cluster
        self.default_duration = float(getattr(ctx.options, "default_duration", None) or 60.0)
        self.devices = DeviceManager(self.cluster)
        self.runners: dict[tuple[str, str], PodRunner] = {}
        self.images: dict[str, set[str]] = {}
        self.next_ip: dict[str, int] = {}
        self.not_ready: set[str] = set()
        # Terminal pods' logs stay readable while the pod object exists.
        self.finished: dict[tuple[str, str], PodRunner] = {}

    def allocate_ip(self, node: str) -> str:
        spec = self.cluster.node(node)
        n = self.next_ip.get(node, 3)
        self.next_ip[node] = 3 if n >= 254 else n + 1
        return f"{spec.pod_cidr_prefix}.{n}"

    def on_pod(self, event_type: str, pod: dict) -> None:
        meta = pod["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        runner = self.runners.get(key)
        if event_type == "DELETED":
            if runner is not None and runner.task is not None:
                runner.task.cancel()
            # Free its devices now, not when the cancelled task gets to run: a pod bound in its
            # place may be admitted before that.
            self.devices.release_pod(meta.get("uid") or "")
            self.finished.pop(key, None)
            return
        if runner is not None and runner.uid != meta.get("uid"):
            if runner.task is not None:
                runner.task.cancel()
            runner = None
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or self.cluster.node(node) is None:
            return
        if (meta.get("annotations") or {}).get(SYSTEM_POD_ANNOTATION) == "true":
            return
        if runner is not None:
            if meta.get("deletionTimestamp"):
                runner.pod = pod
                runner.request_stop("delete")
                runner.regrace.set()
            return
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            if meta.get("deletionTimestamp") and not meta.get("finalizers"):
                with contextlib.suppress(ApiError):
                    self.store.delete("v1", "Pod", key[0], key[1], grace=False)
            return
        if key in self.finished and self.finished[key].uid == meta.get("uid"):
            return
        if node in self.not_ready:
            return  # the kubelet is down; the pod waits (it fails when the node is lost)
        if meta.get("deletionTimestamp"):
            with contextlib.suppress(ApiError):
                self.store.delete("v1", "Pod", key[0], key[1], grace=False)
            return
        self.start_runner(pod)

    def start_runner(self, pod: dict) -> PodRunner:
        runner = PodRunner(self, pod)
        key = runner.key
        self.runners[key] = runner
        self.finished[key] = runner
        runner.admit()
        runner.task = asyncio.get_running_loop().create_task(
            runner.run(), name=f"pod {key[0]}/{key[1]}"
        )
        return runner

    def pod_exists(self, namespace: str, name: str, uid: str) -> bool:
        """Whether the API still has this pod (same uid)."""
        pod = self.store.try_get("v1", "Pod", namespace, name)
        return pod is not None and pod["metadata"].get("uid") == uid

    def runner_for(self, namespace: str, name: str) -> PodRunner | None:
        return self.runners.get((namespace, name)) or self.finished.get((namespace, name))

    # -- faults
    def fail_pod(
        self, namespace: str, name: str, exit_code: int, reason: str, message: str
    ) -> bool:
        runner = self.runners.get((namespace, name))
        if runner is None:
            return False
        runner.fail_exit_code = exit_code
        runner.fail_reason = reason
        runner.fail_message = message
        runner.request_stop("fail")
        return True

    def set_node_ready(self, node: str, ready: bool) -> None:
        if ready:
            self.not_ready.discard(node)
        else:
            self.not_ready.add(node)
            for runner in list(self.runners.values()):
                if runner.node == node:
                    runner.request_stop("nodelost")
        self.write_node_status(node, heartbeat=True)
        if ready:
            # Pods bound while the kubelet was down start now.
            for pod in self.store.list("v1", "Pod", field_selector=f"spec.nodeName={node}"):
                self.on_pod("MODIFIED", pod)

    def write_node_status(self, node_name: str, *, heartbeat: bool = False) -> None:
        spec = self.cluster.node(node_name)
        node = self.store.try_get("v1", "Node", None, node_name)
        if spec is None or node is None:
            return
        now = rfc3339(self.clock.now())
        ready = node_name not in self.not_ready
        old = {c["type"]: c for c in (node.get("status") or {}).get("conditions") or []}
        conditions = ready_conditions(now, ready=ready)
        for c in conditions:
            previous = old.get(c["type"])
            if previous and previous.get("status") == c["status"]:
                c["lastTransitionTime"] = previous.get("lastTransitionTime", now)
            if not ready and previous and not heartbeat:
                c["lastHeartbeatTime"] = previous.get("lastHeartbeatTime", now)
        capacity, allocatable = node_resources(spec, self.cluster)
        self.store.patch(
            "v1",
            "Node",
            None,
            node_name,
            {
                "status": {
                    "conditions": conditions,
                    "capacity": capacity,
                    "allocatable": allocatable,
                }
            },
            subresource="status",
            field_manager=FIELD_MANAGER,
        )
        # The node lifecycle controller's taints for an unreachable node.
        taints = [
            t
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("key")
            not in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
        ]
        if not ready:
            taints += [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": now},
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now},
            ]
        if taints != ((node.get("spec") or {}).get("taints") or []):
            self.store.patch(
                "v1",
                "Node",
                None,
                node_name,
                {"spec": {"taints": taints or None}},
                field_manager="node-controller",
            )

    # -- heartbeats
    async def heartbeats(self) -> None:
        """Renew each ready node's Lease (every 10 simulated s, at most every 2 wall s) and post
        node status (every 60 simulated s, at most every 10 wall s)."""
        lease_every = max(10.0, 2.0 * self.clock.speed)
        status_every = max(60.0, 10.0 * self.clock.speed)
        last_status = self.clock.time()
        while True:
            for spec in self.cluster.nodes:
                if spec.name not in self.not_ready:
                    try:
                        self.renew_lease(spec.name)
                    except Exception:
                        traceback.print_exc()
            if self.clock.time() - last_status >= status_every:
                last_status = self.clock.time()
                for spec in self.cluster.nodes:
                    if spec.name not in self.not_ready:
                        with contextlib.suppress(ApiError):
                            self.write_node_status(spec.name)
            await self.clock.sleep(lease_every)

    def renew_lease(self, node_name: str) -> None:
        now = self.clock.now()
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        lease = self.store.try_get("coordination.k8s.io/v1", "Lease", LEASE_NAMESPACE, node_name)
        try:
            if lease is None:
                node = self.store.try_get("v1", "Node", None, node_name)
                owner = (
                    [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": node_name,
                            "uid": node["metadata"]["uid"],
                        }
                    ]
                    if node
                    else []
                )
                self.store.create(
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {
                            "name": node_name,
                            "namespace": LEASE_NAMESPACE,
                            "ownerReferences": owner,
                        },
                        "spec": {
                            "holderIdentity": node_name,
                            "leaseDurationSeconds": 40,
                            "renewTime": stamp,
                        },
                    },
                    namespace=LEASE_NAMESPACE,
                    field_manager=FIELD_MANAGER,
                )
            else:
                self.store.patch(
                    "coordination.k8s.io/v1",
                    "Lease",
                    LEASE_NAMESPACE,
                    node_name,
                    {"spec": {"renewTime": stamp}},
                    field_manager=FIELD_MANAGER,
                )
        except ApiError:
            pass

    # -- pod log subresource
    async def log_handler(self, request: web.Request, namespace: str, name: str, rest: str = ""):
        pod = self.store.try_get("v1", "Pod", namespace, name)
        if pod is None:
            raise not_found("pods", name)
        query = request.query
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        init_names = [c["name"] for c in pod["spec"].get("initContainers") or []]
        container = query.get("container")
        if not container:
            if len(names) != 1:
                raise bad_request(
                    f"a container name must be specified for pod {name}, "
                    f"choose one of: [{' '.join(names)}]"
                    + (
                        f" or one of the init containers: [{' '.join(init_names)}]"
                        if init_names
                        else ""
                    )
                )
            container = names[0]
        if container not in names and container not in init_names:
            raise bad_request(f"container {container} is not valid for pod {name}")
        previous = _query_bool(query.get("previous"))
        runner = self.runner_for(namespace, name)
        if runner is None or runner.uid != pod["metadata"].get("uid"):
            lines = None
        else:
            lines = runner.log_lines(container, previous)
        if lines is None:
            if previous:
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
            reason = "ContainerCreating"
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if status.get("name") == container and "waiting" in (status.get("state") or {}):
                    reason = status["state"]["waiting"].get("reason", reason)
            raise bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )

        def number(param: str) -> int | None:
            value = query.get(param)
            if value is None:
                return None
            try:
                return int(value)
            except ValueError:
                raise bad_request(f"{param}: invalid value {value!r}") from None

        tail = number("tailLines")
        since_seconds = number("sinceSeconds")
        limit_bytes = number("limitBytes")
        since = None
        if since_seconds is not None:
            since = self.clock.time() - since_seconds
        elif query.get("sinceTime"):
            since = datetime.datetime.fromisoformat(
                query["sinceTime"].replace("Z", "+00:00")
            ).timestamp()
        timestamps = _query_bool(query.get("timestamps"))
        follow_logs = _query_bool(query.get("follow"))

        def render(items: list[tuple[float, str]]) -> bytes:
            return "".join(
                (f"{_ts_nano(t)} {text}\n" if timestamps else f"{text}\n") for t, text in items
            ).encode()

        def select(items):
            if since is not None:
                items = [x for x in items if x[0] >= since]
            return items

        first = select(lines)
        if tail is not None and tail >= 0:
            first = first[-tail:] if tail else []
        if not follow_logs:
            body = render(first)
            if limit_bytes is not None:
                body = body[:limit_bytes]
            return web.Response(body=body, content_type="text/plain")
        response = web.StreamResponse(
            headers={"Content-Type": "text/plain", "Transfer-Encoding": "chunked"}
        )
        await response.prepare(request)
        # the client going away (an interrupted `kubectl logs -f`) just ends the stream
        with contextlib.suppress(ConnectionError):
            await self._follow_logs(
                response,
                runner,
                container,
                previous,
                namespace,
                name,
                first,
                lines,
                select,
                render,
                limit_bytes,
            )
        return response

    async def _follow_logs(
        self,
        response,
        runner,
        container,
        previous,
        namespace,
        name,
        first,
        lines,
        select,
        render,
        limit_bytes,
    ) -> None:
        """Stream new log lines until the container ends, the pod goes or the limit is hit."""
        sent = len(select(lines))
        written = 0
        chunk = render(first)
        await response.write(chunk)
        written += len(chunk)
        while True:
            done = runner.container_done(container)
            current = select(runner.log_lines(container, previous) or [])
            if len(current) > sent:
                chunk = render(current[sent:])
                sent = len(current)
                if limit_bytes is not None and written + len(chunk) > limit_bytes:
                    await response.write(chunk[: limit_bytes - written])
                    break
                await response.write(chunk)
                written += len(chunk)
            if done or runner.uid != (self.store.try_get("v1", "Pod", namespace, name) or {}).get(
                "metadata", {}
            ).get("uid"):
                break
            await asyncio.sleep(0.1)
        await response.write_eof()

    async def pod_resources_handler(self, request: web.Request):
        node = request.match_info["node"]
        if self.cluster.node(node) is None:
            raise not_found("nodes", node)
        return web.json_response(self.devices.pod_resources(node))


def start(ctx) -> Kubelet:
    kubelet = Kubelet(ctx)
    ctx.extras["kubelet"] = kubelet
    ctx.store.graceful_pod_deletion = True
    ctx.server.set_subresource_handler("v1", "Pod", "log", kubelet.log_handler)
    ctx.server.add_route(
        "GET", "/kubesim/nodes/{node}/pod-resources", kubelet.pod_resources_handler
    )
    ctx.spawn(follow(ctx.store, "v1", "Pod", kubelet.on_pod), "kubelet-pods")
    ctx.spawn(kubelet.heartbeats(), "kubelet-heartbeats")
    return kubelet
