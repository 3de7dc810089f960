"""KAI Scheduler inside kubesim, writing what KAI v0.17 writes.

- podgrouper (podgrouper.py): a PodGroup per top owner, the pod annotated `pod-group-name`;
- scheduler session, on every change: the proportion plugin's fair share (quota.py), then the
  actions allocate (gang all-or-nothing; queues in KAI's queue order, jobs by priority then age),
  reclaim (between queues, from queues over their fair share, never below their deserved quota)
  and preempt (inside a queue, lower-priority preemptible jobs). Placement bin-packs GPUs, and a
  fractional pod goes to the fullest shared GPU it fits on, else to a free whole GPU. Decisions
  become BindRequests (scheduling.run.ai/v1alpha2, one per pod, named after it);
- binder: binds the pod of each BindRequest; for a fraction it first has a reservation pod hold
  the GPU (namespace kai-resource-reservation, label runai-gpu-group, annotation
  run.ai/reserve_for_gpu_index = the GPU's UUID, written once the kubelet gave it its device),
  labels the fraction pod with the group and writes its shared-GPU ConfigMaps; a reservation pod
  goes away when the last fraction pod of its group ends;
- status: PodGroup resourcesStatus and schedulingConditions (UnschedulableOnNodePool with KAI's
  reasons and messages), the events Unschedulable/NotReady/Evict/Scheduled/Bound, and the Queue
  status (allocated, allocatedNonPreemptible, requested, childQueues);
- admission: the pod webhook's GPU-sharing checks and mutation, the queue webhook.

Node pools: nodes, queues and PodGroups carrying `kai.scheduler/node-pool=<v>` form the shard
<v>; those without it the default shard (as if a SchedulingShard existed for every value).
Simplified next to upstream: no consolidation or stale-gang eviction, no topology, DRA or
subgroups; the time-based fair share is off (as by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import traceback
import uuid
from dataclasses import dataclass, field

from kubesim.api.errors import ApiError
from kubesim.clock import rfc3339
from kubesim.controllers import events, scheduler
from kubesim.controllers.kai import podgrouper, quota, sharing
from kubesim.controllers.kai.quota import RESOURCES, QueueShare
from kubesim.controllers.kueue.quantity import format_milli
from kubesim.waiting import wait_event

QUEUE_API = "scheduling.run.ai/v2"
PG_API = podgrouper.PG_API
BR_API = "scheduling.run.ai/v1alpha2"
COMPONENT = "kai-scheduler"
BINDER = "binder"
PODGROUPER = "pod-grouper"
FIELD_MANAGER = "kai-scheduler"
QUEUE_WEBHOOK = "queue-validation.kai.scheduler"
NODE_POOL_LABEL = podgrouper.NODE_POOL_LABEL
DEFAULT_NODE_POOL = "default"
LAST_START = "kai.scheduler/last-start-timestamp"
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"
GPU = "nvidia.com/gpu"
NO_NODES = "no nodes with enough resources were found"
MAX_VICTIM_JOBS = 64
SESSION_PERIOD = 1.0  # simulated seconds between scheduling sessions, as KAI's default
MAX_SESSION_GAP = 0.2  # wall seconds: at low speeds, still answer within a fifth of a second
SAFETY_TICK = 5.0  # wall seconds between sessions when nothing happens
# The default queues a KAI install starts with (examples/default-queues.yaml).
DEFAULT_QUEUES = (("default-parent-queue", ""), ("default-queue", "default-parent-queue"))


def start(ctx) -> asyncio.Task:
    controller = KaiController(ctx)
    controller.install()
    ctx.extras["kai"] = controller
    return ctx.spawn(controller.run(), "kai")


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _terminal(pod: dict) -> bool:
    return _phase(pod) in ("Succeeded", "Failed")


def _deleting(pod: dict) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _node_of(pod: dict) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def _pg_of(pod: dict) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get(podgrouper.PG_ANNOTATION)


def _pool(obj: dict) -> str:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(NODE_POOL_LABEL) or ""


def _node_ready(node: dict) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _resource_list(amounts: dict[str, int]) -> dict[str, str]:
    """KAI's ResourceList of cpu (millicores), memory (bytes) and nvidia.com/gpu (thousandths)."""
    out = {}
    for r, name in (("cpu", "cpu"), ("memory", "memory"), ("gpu", GPU)):
        value = amounts.get(r)
        if value is None:
            out[name] = "-1"
        else:
            out[name] = format_milli(name, value if r != "memory" else value * 1000)
    return out


def _add_list(total: dict[str, int], resources: dict[str, str]) -> None:
    from kubesim.controllers.kueue.quantity import to_milli

    for name, value in resources.items():
        total[name] = total.get(name, 0) + to_milli(value)


@dataclass
class Decision:
    """Where the scheduler put a pod (kept until the binder has bound it)."""

    node: str
    groups: list[str] = field(default_factory=list)
    portion: int = 0  # thousandths of a device, fractional pods only
    devices: int = 1
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def fractional(self) -> bool:
        return bool(self.groups)


@dataclass
class NodeState:
    name: str
    node: dict
    gpu_memory: int
    used: dict[str, int]
    releasing: dict[str, int]
    groups: dict[str, int]  # GPU group -> thousandths in use
    releasing_groups: dict[str, int]
    has_gpus: bool

    def copy(self) -> NodeState:
        return NodeState(
            self.name,
            self.node,
            self.gpu_memory,
            dict(self.used),
            self.releasing,
            dict(self.groups),
            self.releasing_groups,
            self.has_gpus,
        )


@dataclass
class Job:
    pg: dict
    key: tuple[str, str]
    queue: str
    priority: int
    preemptible: bool
    min_member: int
    created: str
    pending: list[dict] = field(default_factory=list)
    active: list[dict] = field(default_factory=list)  # bound or being bound, not terminating
    gated: int = 0
    alive: int = 0
    errors: list[dict] = field(default_factory=list)  # {reason, message, details?}
    pod_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    node_fit_failed: bool = False
    fit_reasons: dict[str, int] = field(default_factory=dict)
    pipelined: bool = False
    placed: int = 0  # tasks of a gang that found a node before one did not
    request: dict[str, int] = field(default_factory=quota.zero)  # of the tasks tried

    @property
    def name(self) -> str:
        return self.key[1]


class KaiController:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.pods: dict[tuple[str, str], dict] = {}
        self.reservations: dict[str, dict] = {}
        self.podgroups: dict[tuple[str, str], dict] = {}
        self.queues: dict[str, dict] = {}
        self.pg_members: dict[tuple[str, str], set[tuple[str, str]]] = {}
        self.group_members: dict[str, set[tuple[str, str]]] = {}
        self.releasing: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}
        self.ungrouped: set[tuple[str, str]] = set()
        self.inflight: dict[tuple[str, str], Decision] = {}
        self.dirty_groups: set[str] = set()
        self.dirty_pgs: set[tuple[str, str]] = set()
        self.wake = asyncio.Event()
        self.session_due = True
        self.status_due = True
        self.priority_cache: dict[str, int | None] = {}
        self.requests_cache: dict[str, dict[str, int]] = {}
        self.pg_resources: dict[tuple[str, str], tuple[str, dict, dict, dict]] = {}
        self.written: dict[tuple, str] = {}
        self.last_messages: dict[tuple, str] = {}
        self.grouping_failures: dict[tuple[str, str], str] = {}
        self.last_session = 0.0

    # ---- wiring ------------------------------------------------------------------------------
    def install(self) -> None:
        self.store.add_admission_hook("v1", "Pod", sharing.pod_admission)
        self.store.add_admission_hook(QUEUE_API, "Queue", self._queue_webhook)
        self.store.add_write_listener(self._on_write)
        self._ensure_installation()
        for api, kind in (
            (QUEUE_API, "Queue"),
            (PG_API, "PodGroup"),
            ("v1", "Pod"),
        ):
            try:
                rtype = self.store.registry.by_kind(api, kind)
            except ApiError:
                continue
            for obj in self.store.select(rtype, None):
                self._on_write("ADDED", rtype, obj, None)

    def _ensure_installation(self) -> None:
        """What the KAI chart installs: the reservation namespace, the default priority classes
        and the default queues."""
        with contextlib.suppress(ApiError):
            if self.store.try_get("v1", "Namespace", None, sharing.RESERVATION_NAMESPACE) is None:
                self.store.create(
                    {
                        "apiVersion": "v1",
                        "kind": "Namespace",
                        "metadata": {"name": sharing.RESERVATION_NAMESPACE},
                    },
                    field_manager=FIELD_MANAGER,
                )
        for name, value in podgrouper.PRIORITY_CLASSES.items():
            with contextlib.suppress(ApiError):
                if self.store.try_get("scheduling.k8s.io/v1", "PriorityClass", None, name) is None:
                    self.store.create(
                        {
                            "apiVersion": "scheduling.k8s.io/v1",
                            "kind": "PriorityClass",
                            "metadata": {"name": name},
                            "value": value,
                            "globalDefault": False,
                            "preemptionPolicy": "PreemptLowerPriority",
                            "description": f"KAI Scheduler priority class {name}",
                        },
                        field_manager=FIELD_MANAGER,
                    )
        try:
            self.store.registry.by_kind(QUEUE_API, "Queue")
        except ApiError:
            return
        unlimited = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
        for name, parent in DEFAULT_QUEUES:
            if self.store.try_get(QUEUE_API, "Queue", None, name) is not None:
                continue
            spec: dict = {"resources": {r: dict(unlimited) for r in RESOURCES}}
            if parent:
                spec["parentQueue"] = parent
            with contextlib.suppress(ApiError):
                self.store.create(
                    {
                        "apiVersion": QUEUE_API,
                        "kind": "Queue",
                        "metadata": {"name": name},
                        "spec": spec,
                    },
                    field_manager=FIELD_MANAGER,
                )

    def _on_write(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        group, kind = rtype.group, rtype.kind
        deleted = event_type == "DELETED"
        if group == "" and kind == "Pod":
            self._on_pod(obj, old, deleted)
        elif group == "scheduling.run.ai" and kind == "PodGroup":
            key = _key(obj)
            if deleted:
                self.podgroups.pop(key, None)
                self.pg_resources.pop(key, None)
            else:
                self.podgroups[key] = obj
            self.session_due = True
            self.status_due = True
        elif group == "scheduling.run.ai" and kind == "Queue":
            name = obj["metadata"]["name"]
            if deleted:
                self.queues.pop(name, None)
            else:
                self.queues[name] = obj
            self.session_due = True
            self.status_due = True
        elif group == "" and kind == "Node":
            if (
                deleted
                or old is None
                or _node_ready(obj) != _node_ready(old)
                or (obj.get("status") or {}).get("allocatable")
                != (old.get("status") or {}).get("allocatable")
                or (obj.get("spec") or {}) != (old.get("spec") or {})
            ):
                self.session_due = True
            else:
                return
        elif group == "scheduling.k8s.io" and kind == "PriorityClass":
            self.priority_cache.clear()
            return
        else:
            return
        self.wake.set()

    def _on_pod(self, pod: dict, old: dict | None, deleted: bool) -> None:
        key = _key(pod)
        node = _node_of(pod)
        # pods of any scheduler that are terminating still hold their node's resources
        if node and _deleting(pod) and not deleted and not _terminal(pod):
            if key not in self.releasing:
                self.releasing[key] = (node, scheduler.pod_requests(pod))
        else:
            self.releasing.pop(key, None)
        if key[0] == sharing.RESERVATION_NAMESPACE:
            name = key[1]
            group = (pod["metadata"].get("labels") or {}).get(sharing.GPU_GROUP_LABEL)
            if deleted:
                self.reservations.pop(name, None)
            else:
                self.reservations[name] = pod
            if group:
                self.dirty_groups.add(group)
            if deleted or old is None or _deleting(pod) != _deleting(old):
                self.session_due = True  # a GPU taken or given back
            self.wake.set()  # the binder may wait for its annotation
            return
        ours = (pod.get("spec") or {}).get("schedulerName") == sharing.SCHEDULER_NAME
        if not ours:
            if node and (
                deleted
                or old is None
                or _node_of(old) != node
                or _terminal(pod) != _terminal(old)
                or _deleting(pod) != _deleting(old)
            ):
                self.session_due = True  # capacity on a node changed
                self.wake.set()
            return
        previous = self.pods.get(key)
        relevant = (
            deleted
            or previous is None
            or _node_of(previous) != node
            or _terminal(previous) != _terminal(pod)
            or _deleting(previous) != _deleting(pod)
            or _pg_of(previous) != _pg_of(pod)
            or bool((previous.get("spec") or {}).get("schedulingGates"))
            != bool((pod.get("spec") or {}).get("schedulingGates"))
        )
        regrouped = relevant or sharing.pod_groups(previous) != sharing.pod_groups(pod)
        resources_changed = (
            relevant
            or _phase(previous) != _phase(pod)
            or _scheduled_condition(previous) != _scheduled_condition(pod)
            or (previous["metadata"].get("annotations") or {}).get(sharing.RECEIVED_TYPE)
            != (pod["metadata"].get("annotations") or {}).get(sharing.RECEIVED_TYPE)
        )
        if regrouped:
            for group in sharing.pod_groups(previous) if previous else []:
                members = self.group_members.get(group)
                if members is not None:
                    members.discard(key)
                self.dirty_groups.add(group)
        if previous is not None and (relevant or resources_changed):
            old_pg = _pg_of(previous)
            if old_pg:
                self.pg_members.get((key[0], old_pg), set()).discard(key)
                self.dirty_pgs.add((key[0], old_pg))
        if deleted:
            self.pods.pop(key, None)
            self.ungrouped.discard(key)
            self.inflight.pop(key, None)
            self.requests_cache.pop(pod["metadata"].get("uid", ""), None)
        else:
            self.pods[key] = pod
            pg_name = _pg_of(pod)
            if pg_name:
                self.pg_members.setdefault((key[0], pg_name), set()).add(key)
                if relevant or resources_changed:
                    self.dirty_pgs.add((key[0], pg_name))
                self.ungrouped.discard(key)
            elif not _terminal(pod):
                self.ungrouped.add(key)
            if regrouped and not _terminal(pod):
                for group in sharing.pod_groups(pod):
                    self.group_members.setdefault(group, set()).add(key)
                    self.dirty_groups.add(group)
            if node:
                self.inflight.pop(key, None)
        if relevant:
            self.session_due = True
        if resources_changed:
            self.status_due = True
        if relevant or resources_changed or regrouped:
            self.wake.set()

    # ---- webhooks ----------------------------------------------------------------------------
    def _queue_webhook(self, operation: str, queue: dict, old: dict | None) -> None:
        def deny(message: str) -> ApiError:
            return ApiError(
                403,
                "Forbidden",
                f'admission webhook "{QUEUE_WEBHOOK}" denied the request: {message}',
            )

        if operation == "DELETE":
            children = (queue.get("status") or {}).get("childQueues") or []
            if children:
                raise deny(
                    f"cannot delete queue {queue['metadata']['name']}: it has child queues "
                    f"[{' '.join(children)}]"
                )
            return
        if operation == "UPDATE" and old is not None and old.get("spec") == queue.get("spec"):
            return  # a status write
        if (queue.get("spec") or {}).get("resources") is None:
            raise deny("resources must be specified")

    # ---- loop --------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            # event-driven (every write reaches the listener); a slow tick is the safety net
            if not await wait_event(self.wake, SAFETY_TICK):
                self.session_due = True
            self.wake.clear()
            await asyncio.sleep(0.005)
            try:
                self.reconcile()
            except Exception as exc:  # one bad object must not stop the scheduler
                traceback.print_exc()
                print(f"kai: reconcile failed: {exc!r}", flush=True)
                await asyncio.sleep(0.1)

    def reconcile(self) -> None:
        if self.ungrouped:
            self._group_pods()
        self._reservation_processes()
        self._bind_inflight()
        if self.dirty_groups:
            self._sync_groups()
        if self.session_due:
            # KAI opens a session every second: changes in between wait for the next one
            gap = min(SESSION_PERIOD / max(self.clock.speed, 1e-9), MAX_SESSION_GAP)
            wait = self.last_session + gap - time.monotonic()
            if wait > 0:
                asyncio.get_running_loop().call_later(wait, self.wake.set)
            else:
                self.session_due = False
                self.last_session = time.monotonic()
                self._session()
                self._bind_inflight()
        if self.status_due:
            self.status_due = False
            self._write_podgroup_resources()
            self._write_queue_status()

    # ---- podgrouper --------------------------------------------------------------------------
    def _group_pods(self) -> None:
        pending, self.ungrouped = self.ungrouped, set()
        for key in sorted(pending):
            pod = self.pods.get(key)
            if pod is None or _pg_of(pod) or _terminal(pod):
                continue
            try:
                metadata = podgrouper.metadata_for(self.store, pod)
            except podgrouper.GroupingError as exc:
                if self.grouping_failures.get(key) != str(exc):
                    self.grouping_failures[key] = str(exc)
                    events.record(
                        self.store,
                        pod,
                        "PodGrouperWarning",
                        str(exc),
                        type="Warning",
                        component=PODGROUPER,
                    )
                continue
            if metadata is None:
                continue
            pg_key = (metadata.namespace, metadata.name)
            if pg_key not in self.podgroups:
                try:
                    created = self.store.create(
                        metadata.podgroup(), namespace=metadata.namespace, field_manager=PODGROUPER
                    )
                except ApiError as exc:
                    if exc.code != 409:
                        print(f"kai: PodGroup {pg_key} not created: {exc.message}", flush=True)
                        continue
                else:
                    self.podgroups[pg_key] = created
            with contextlib.suppress(ApiError):
                self.store.patch(
                    "v1",
                    "Pod",
                    key[0],
                    key[1],
                    {"metadata": {"annotations": {podgrouper.PG_ANNOTATION: metadata.name}}},
                    field_manager=PODGROUPER,
                )

    # ---- binder ------------------------------------------------------------------------------
    def _reservation_processes(self) -> None:
        """What the reservation pod's own process does once running: write its GPU's UUID."""
        for name, pod in list(self.reservations.items()):
            annotations = pod["metadata"].get("annotations") or {}
            if sharing.GPU_INDEX_ANNOTATION in annotations or _deleting(pod):
                continue
            if _phase(pod) == "Failed":
                # the kubelet could not give it a GPU: drop it and roll its binds back, so that
                # the pods go back to the scheduler
                self._delete_reservation(pod)
                group = (pod["metadata"].get("labels") or {}).get(sharing.GPU_GROUP_LABEL)
                for key, decision in list(self.inflight.items()):
                    if group in decision.groups:
                        del self.inflight[key]
                        with contextlib.suppress(ApiError):
                            self.store.delete(BR_API, "BindRequest", key[0], key[1])
                self.session_due = True
                continue
            uuids = annotations.get("kubesim.dev/gpu-uuids")
            if _phase(pod) != "Running" or not uuids:
                continue
            with contextlib.suppress(ApiError):
                self.store.patch(
                    "v1",
                    "Pod",
                    sharing.RESERVATION_NAMESPACE,
                    name,
                    {
                        "metadata": {
                            "annotations": {sharing.GPU_INDEX_ANNOTATION: uuids.split(",")[0]}
                        }
                    },
                    field_manager=sharing.RESERVATION_CONTAINER,
                )

    def _reservation_for(self, node: str, group: str) -> dict | None:
        return self.reservations.get(sharing.reservation_pod_name(node, group))

    def _bind_inflight(self) -> None:
        for key, decision in sorted(self.inflight.items()):
            pod = self.pods.get(key)
            if pod is None or _terminal(pod) or _deleting(pod):
                self.inflight.pop(key, None)
                continue
            if _node_of(pod):
                self.inflight.pop(key, None)
                continue
            uuids: list[str] = []
            waiting = False
            for group in decision.groups:
                reservation = self._reservation_for(decision.node, group)
                if reservation is None:
                    tolerations = (pod.get("spec") or {}).get("tolerations") or []
                    try:
                        reservation = self.store.create(
                            sharing.reservation_pod(decision.node, group, tolerations),
                            namespace=sharing.RESERVATION_NAMESPACE,
                            field_manager=BINDER,
                        )
                    except ApiError as exc:
                        if exc.code != 409:
                            print(f"kai: reservation pod not created: {exc.message}", flush=True)
                            waiting = True
                            continue
                        reservation = self.store.try_get(
                            "v1",
                            "Pod",
                            sharing.RESERVATION_NAMESPACE,
                            sharing.reservation_pod_name(decision.node, group),
                        )
                        if reservation is None:
                            waiting = True
                            continue
                    self.reservations[reservation["metadata"]["name"]] = reservation
                    # count its GPU at once (the watch that feeds the tracker comes later)
                    scheduler.tracker(self.store).observe(reservation)
                index = (reservation["metadata"].get("annotations") or {}).get(
                    sharing.GPU_INDEX_ANNOTATION
                )
                if not index:
                    waiting = True
                else:
                    uuids.append(index)
            if waiting:
                continue
            try:
                self._bind(key, pod, decision, uuids)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
            self.inflight.pop(key, None)

    def _bind(self, key, pod: dict, decision: Decision, uuids: list[str]) -> None:
        namespace, name = key
        meta_patch: dict = {
            "annotations": {sharing.RECEIVED_TYPE: "Fraction" if decision.fractional else "Regular"}
        }
        if decision.fractional:
            meta_patch["labels"] = sharing.group_labels(decision.groups, decision.devices)
            for configmap in sharing.configmaps(pod, uuids, decision.portion):
                try:
                    self.store.create(configmap, namespace=namespace, field_manager=BINDER)
                except ApiError as exc:
                    if exc.code != 409:
                        raise
        bound = self.store.patch(
            "v1",
            "Pod",
            namespace,
            name,
            {"metadata": meta_patch, "spec": {"nodeName": decision.node}},
            field_manager=BINDER,
        )
        scheduler.tracker(self.store).observe(bound)
        now = rfc3339(self.clock.now())
        message = f"Pod bound successfully to node {decision.node}"
        conditions = [
            c
            for c in (bound.get("status") or {}).get("conditions") or []
            if c.get("type") not in ("PodScheduled", "PodBound")
        ]
        conditions = [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
            {
                "type": "PodBound",
                "status": "True",
                "reason": "Bound",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": now,
            },
            *conditions,
        ]
        status: dict = {"conditions": conditions}
        if not (bound.get("status") or {}).get("phase"):
            status["phase"] = "Pending"
        updated = self.store.patch(
            "v1",
            "Pod",
            namespace,
            name,
            {"status": status},
            subresource="status",
            field_manager=BINDER,
        )
        self.pods[key] = updated
        events.record(self.store, updated, "Bound", message, component=BINDER)
        with contextlib.suppress(ApiError):
            self.store.patch(
                BR_API,
                "BindRequest",
                namespace,
                name,
                {"status": {"phase": "Succeeded"}},
                subresource="status",
                field_manager=BINDER,
            )

    def _delete_reservation(self, pod: dict) -> None:
        with contextlib.suppress(ApiError):
            self.store.delete(
                "v1",
                "Pod",
                sharing.RESERVATION_NAMESPACE,
                pod["metadata"]["name"],
                grace=True,
                grace_seconds=0,
            )

    def _sync_groups(self) -> None:
        """The binder's reservation sync: a reservation pod whose group has no live fraction pod
        (and no bind in flight) is deleted; running fraction pods whose reservation is gone are
        deleted too."""
        dirty, self.dirty_groups = self.dirty_groups, set()
        busy = {g for d in self.inflight.values() for g in d.groups}
        by_group = {}
        for pod in self.reservations.values():
            group = (pod["metadata"].get("labels") or {}).get(sharing.GPU_GROUP_LABEL)
            if group:
                by_group[group] = pod
        for group in dirty:
            members = [
                self.pods[k]
                for k in self.group_members.get(group, set())
                if k in self.pods and not _terminal(self.pods[k])
            ]
            reservation = by_group.get(group)
            if reservation is not None:
                if not members and group not in busy and not _deleting(reservation):
                    self._delete_reservation(reservation)
                continue
            for pod in members:
                if _phase(pod) == "Running" and not _deleting(pod):
                    with contextlib.suppress(ApiError):
                        self.store.delete("v1", "Pod", *_key(pod), grace=True)
            if not members:
                self.group_members.pop(group, None)

    # ---- dcgm-exporter's view ----------------------------------------------------------------
    def gpu_sharers(self, reservation_pod: str) -> list[tuple[str, str, str, int]]:
        """(namespace, pod, container, thousandths) of the fraction pods running on the GPU that
        this reservation pod holds."""
        reservation = self.reservations.get(reservation_pod)
        if reservation is None:
            return []
        group = (reservation["metadata"].get("labels") or {}).get(sharing.GPU_GROUP_LABEL)
        node_name = _node_of(reservation)
        node = self.store.try_get("v1", "Node", None, node_name) if node_name else None
        memory = sharing.node_gpu_memory(node) if node else sharing.DEFAULT_GPU_MEMORY_MIB
        out = []
        for key in sorted(self.group_members.get(group or "", set())):
            pod = self.pods.get(key)
            if pod is None or _terminal(pod) or _node_of(pod) != node_name:
                continue
            found = sharing._fraction_container(pod)
            container = found[0].get("name", "") if found else ""
            out.append((key[0], key[1], container, sharing.gpu_request(pod).portion_on(memory)))
        return out

    # ---- scheduler session -------------------------------------------------------------------
    def _requests(self, pod: dict) -> dict[str, int]:
        uid = pod["metadata"].get("uid", "")
        found = self.requests_cache.get(uid)
        if found is None:
            found = scheduler.pod_requests(pod)
            if uid:
                self.requests_cache[uid] = found
        return found

    def _quota_of(self, pod: dict, gpu_memory: int) -> dict[str, int]:
        requests = self._requests(pod)
        return {
            "cpu": requests.get("cpu", 0),
            "memory": requests.get("memory", 0),
            "gpu": sharing.gpu_request(pod).quota(gpu_memory),
        }

    def _session(self) -> None:
        nodes = scheduler._ready_nodes(self.store)
        pools: dict[str, list[dict]] = {}
        for node in nodes:
            pools.setdefault(_pool(node), []).append(node)
        pg_pools: dict[str, list[tuple[tuple[str, str], dict]]] = {}
        for key, pg in self.podgroups.items():
            live = any(
                k in self.pods and not _terminal(self.pods[k]) for k in self.pg_members.get(key, ())
            )
            if live or (pg.get("status") or {}).get("schedulingConditions"):
                pg_pools.setdefault(_pool(pg), []).append((key, pg))
        for pool, pgs in sorted(pg_pools.items()):
            self._session_pool(pool, pools.get(pool, []), pgs)

    def _node_states(self, nodes: list[dict]) -> dict[str, NodeState]:
        track = scheduler.tracker(self.store)
        states: dict[str, NodeState] = {}
        for node in nodes:
            if not _node_ready(node):
                continue
            name = node["metadata"]["name"]
            alloc = scheduler.node_allocatable(node)
            states[name] = NodeState(
                name=name,
                node=node,
                gpu_memory=sharing.node_gpu_memory(node),
                used=track.node_usage(name),
                releasing={},
                groups={},
                releasing_groups={},
                has_gpus=alloc.get(GPU, 0) > 0,
            )
        for node_name, requests in self.releasing.values():
            state = states.get(node_name)
            if state is not None:
                for r, v in requests.items():
                    state.releasing[r] = state.releasing.get(r, 0) + v
        # shared GPUs: reservation pods and the fraction pods on them (bound or being bound)
        for pod in self.reservations.values():
            state = states.get(_node_of(pod))
            group = (pod["metadata"].get("labels") or {}).get(sharing.GPU_GROUP_LABEL)
            if state is not None and group and not _deleting(pod) and not _terminal(pod):
                state.groups.setdefault(group, 0)
        for key, pod in self.pods.items():
            if key in self.inflight or _terminal(pod):
                continue
            state = states.get(_node_of(pod))
            if state is None:
                continue
            groups = sharing.pod_groups(pod)
            if not groups:
                continue
            portion = sharing.gpu_request(pod).portion_on(state.gpu_memory)
            for group in groups:
                state.groups[group] = state.groups.get(group, 0) + portion
                if _deleting(pod):
                    state.releasing_groups[group] = state.releasing_groups.get(group, 0) + portion
        for key, decision in self.inflight.items():
            state = states.get(decision.node)
            pod = self.pods.get(key)
            if state is None or pod is None:
                continue
            for r, v in decision.requests.items():
                state.used[r] = state.used.get(r, 0) + v
            for group in decision.groups:
                if (
                    group not in state.groups
                    and self._reservation_for(decision.node, group) is None
                ):
                    state.used[GPU] = state.used.get(GPU, 0) + 1
                state.groups[group] = state.groups.get(group, 0) + decision.portion
        return states

    def _session_pool(self, pool: str, nodes: list[dict], pgs) -> None:
        states = self._node_states(nodes)
        gpu_memories = [s.gpu_memory for s in states.values() if s.has_gpus]
        min_memory = min(gpu_memories) if gpu_memories else sharing.DEFAULT_GPU_MEMORY_MIB
        max_memory = max(gpu_memories) if gpu_memories else sharing.DEFAULT_GPU_MEMORY_MIB
        # queues of this shard, with what the cluster offers them
        shares = {
            name: QueueShare.from_queue(q) for name, q in self.queues.items() if _pool(q) == pool
        }
        quota.link_children(shares)
        total = quota.zero()
        for state in states.values():
            alloc = scheduler.node_allocatable(state.node)
            total["cpu"] += alloc.get("cpu", 0)
            total["memory"] += alloc.get("memory", 0)
            total["gpu"] += alloc.get(GPU, 0) * 1000
        track = scheduler.tracker(self.store)
        for key, (node_name, requests) in list(track.pods.items()):
            if node_name not in states or key in self.pods:
                continue
            if key[0] == sharing.RESERVATION_NAMESPACE:
                continue  # KAI's own utility pods
            total["cpu"] -= requests.get("cpu", 0)
            total["memory"] -= requests.get("memory", 0)
            total["gpu"] -= requests.get(GPU, 0) * 1000
        # jobs
        jobs: list[Job] = []
        for key, pg in sorted(pgs):
            job = self._job(key, pg, shares, states, min_memory)
            if job is not None:
                jobs.append(job)
        quota.set_fair_shares(shares, total)
        pending_jobs = [j for j in jobs if j.pending]
        if not pending_jobs:
            self._write_job_status(jobs)
            return
        self._allocate(pending_jobs, shares, states, max_memory)
        failed = [j for j in pending_jobs if j.node_fit_failed and j.pending]
        if failed:
            self._reclaim_and_preempt(failed, jobs, shares, states, max_memory)
        self._write_job_status(jobs)

    def _job(self, key, pg: dict, shares, states, min_memory: int) -> Job | None:
        spec = pg.get("spec") or {}
        class_name = spec.get("priorityClassName")
        priority = podgrouper.priority_of(self.store, class_name, self.priority_cache)
        job = Job(
            pg=pg,
            key=key,
            queue=spec.get("queue") or "",
            priority=priority,
            preemptible=podgrouper.is_preemptible(pg, priority),
            min_member=max(1, int(spec.get("minMember") or 1)),
            created=pg["metadata"].get("creationTimestamp") or "",
        )
        for pod_key in sorted(self.pg_members.get(key, ())):
            pod = self.pods.get(pod_key)
            if pod is None or _terminal(pod):
                continue
            if _deleting(pod):
                continue  # releasing: no longer the queue's (its node still counts it)
            job.alive += 1
            if _node_of(pod) or pod_key in self.inflight:
                job.active.append(pod)
                self._charge(shares, job, pod, states, min_memory, allocated=True)
            elif (pod.get("spec") or {}).get("schedulingGates"):
                job.gated += 1
            else:
                job.pending.append(pod)
                self._charge(shares, job, pod, states, min_memory, allocated=False)
        if not job.alive and not job.active:
            return job
        job.pending.sort(key=_task_order)
        return job

    def _charge(self, shares, job: Job, pod: dict, states, min_memory: int, *, allocated: bool):
        """Add the pod to its queue's (and every ancestor's) requested and allocated amounts."""
        node = _node_of(pod) or (self.inflight.get(_key(pod)) or Decision("")).node
        memory = states[node].gpu_memory if node in states else min_memory
        amounts = self._quota_of(pod, memory)
        for queue in quota.chain(shares, job.queue):
            quota.add(queue.request, amounts)
            if allocated:
                quota.add(queue.allocated, amounts)
                if not job.preemptible:
                    quota.add(queue.allocated_np, amounts)

    # -- allocate
    def _tasks(self, job: Job) -> list[dict]:
        if len(job.active) < job.min_member:
            return job.pending[: job.min_member - len(job.active)]
        return job.pending[:1]

    def _allocate(self, jobs: list[Job], shares, states, max_memory: int) -> None:
        by_queue: dict[str, list[Job]] = {}
        for job in sorted(jobs, key=lambda j: (-j.priority, j.created, j.key)):
            if job.queue not in shares:
                job.errors.append(
                    {
                        "reason": "QueueDoesNotExist",
                        "message": f"Queue '{job.queue}' does not exist",
                    }
                )
                continue
            if shares[job.queue].children:
                job.errors.append(
                    {
                        "reason": "Unable to schedule podgroup",
                        "message": f"Queue '{job.queue}' is not a leaf queue",
                    }
                )
                continue
            if job.alive - job.gated < job.min_member:
                self._not_ready(job)
                continue
            by_queue.setdefault(job.queue, []).append(job)
        failed_signatures: dict[tuple, Job] = {}

        def order(name: str) -> tuple:
            head = by_queue[name][0]
            return quota.queue_order_key(shares[name], self._job_quota(head, max_memory))

        while by_queue:
            queue_name = min(by_queue, key=order)
            job = by_queue[queue_name].pop(0)
            if not by_queue[queue_name]:
                del by_queue[queue_name]
            tasks = self._tasks(job)
            if not tasks:
                continue
            signature = self._signature(job, tasks)
            twin = failed_signatures.get(signature)
            if twin is not None:
                self._copy_failure(job, twin, tasks)
                continue
            placed = self._try_allocate(job, tasks, shares, states, max_memory)
            if placed:
                if job.pending:
                    by_queue.setdefault(queue_name, []).insert(0, job)
            elif job.node_fit_failed:
                failed_signatures[signature] = job

    def _job_quota(self, job: Job, max_memory: int) -> dict[str, int]:
        total = quota.zero()
        for pod in self._tasks(job):
            quota.add(total, self._quota_of(pod, max_memory))
        return total

    def _signature(self, job: Job, tasks: list[dict]) -> tuple:
        """Jobs alike for placement: a later twin of a job that found no nodes fails too."""
        spec = tasks[0].get("spec") or {}
        return (
            job.queue,
            len(tasks),
            job.preemptible,
            json.dumps(
                [
                    self._requests(tasks[0]),
                    sharing.gpu_request(tasks[0]).__dict__,
                    spec.get("nodeSelector"),
                    spec.get("affinity"),
                    spec.get("tolerations"),
                ],
                sort_keys=True,
                default=str,
            ),
            len({json.dumps(self._requests(t), sort_keys=True) for t in tasks}),
        )

    def _copy_failure(self, job: Job, twin: Job, tasks: list[dict]) -> None:
        job.request = dict(twin.request)
        self._record_fit_failure(job, tasks, (_key(tasks[0]), dict(twin.fit_reasons), twin.placed))

    def _try_allocate(self, job: Job, tasks, shares, states, max_memory: int) -> bool:
        requested = quota.zero()
        for pod in tasks:
            quota.add(requested, self._quota_of(pod, max_memory))
        job.request = requested
        found = quota.over_limit(shares, job.queue, requested)
        if found is not None:
            queue, r = found
            job.errors.append(
                self._queue_error(
                    "OverLimit",
                    quota.over_limit_message(queue, r, requested),
                    queue,
                    requested,
                    job,
                )
            )
            return False
        if not job.preemptible:
            found = quota.non_preemptible_over_quota(shares, job.queue, requested)
            if found is not None:
                queue, r = found
                job.errors.append(
                    self._queue_error(
                        "NonPreemptibleOverQuota",
                        quota.non_preemptible_message(queue, r, requested),
                        queue,
                        requested,
                        job,
                    )
                )
                return False
        placement, failure = self._place(tasks, states, use_releasing=False)
        if placement is None:
            pipelined, _ = self._place(tasks, states, use_releasing=True)
            if pipelined is not None:
                self._pipeline(job, tasks, pipelined, shares, states)
                return False
            self._record_fit_failure(job, tasks, failure)
            return False
        for pod in tasks:
            decision = placement[_key(pod)]
            self._reserve(states, decision)
            job.pending.remove(pod)
            job.active.append(pod)
            self._account(shares, job, self._quota_of(pod, states[decision.node].gpu_memory))
            self._commit(pod, decision, job)
        self._note_start(job)
        return True

    def _queue_error(self, reason, message, queue: QueueShare, requested, job: Job) -> dict:
        requested_np = requested if not job.preemptible else quota.zero()
        return {
            "reason": reason,
            "message": message,
            "details": {
                "queueDetails": {
                    "name": queue.name,
                    "queueRequestedResources": _resource_list(queue.request),
                    "queueDeservedResources": _resource_list(queue.deserved),
                    "queueAllocatedResources": _resource_list(queue.allocated),
                    "queueAllocatedNonPreemptibleResources": _resource_list(queue.allocated_np),
                    "queueResourceLimits": _resource_list(queue.limit),
                    "podGroupRequestedResources": _resource_list(requested),
                    "podGroupRequestedNonPreemptibleResources": _resource_list(requested_np),
                }
            },
        }

    def _place(self, tasks: list[dict], states: dict[str, NodeState], *, use_releasing: bool):
        """Decisions for all tasks at once (pod key -> Decision), or (None, (the first pod that
        found no node, its reasons with how many nodes gave each, how many pods were placed))."""
        work = {name: state.copy() for name, state in states.items()}
        placement: dict[tuple[str, str], Decision] = {}
        for pod in tasks:
            requests = self._requests(pod)
            wanted = sharing.gpu_request(pod)
            best = None
            reasons: dict[str, int] = {}
            for name, state in work.items():
                used = state.used
                groups = state.groups
                if use_releasing:
                    used = {r: v - state.releasing.get(r, 0) for r, v in used.items()}
                    groups = {g: v - state.releasing_groups.get(g, 0) for g, v in groups.items()}
                problems = scheduler.filter_node(pod, state.node, used, requests)
                if problems:
                    for problem in problems:
                        text = _kai_reason(problem)
                        reasons[text] = reasons.get(text, 0) + 1
                    continue
                choice = None
                if wanted.fractional:
                    if wanted.memory_mib and wanted.memory_mib > state.gpu_memory:
                        text = "node(s) didn't have enough resources: GPU memory"
                        reasons[text] = reasons.get(text, 0) + 1
                        continue
                    choice = _fraction_choice(wanted, state, used, groups)
                    if choice is None:
                        text = "node(s) didn't have enough resources: GPUs"
                        reasons[text] = reasons.get(text, 0) + 1
                        continue
                score = _score(requests, wanted, state, used, choice)
                if best is None or score < best[0]:
                    best = (score, name, choice)
            if best is None:
                return None, (_key(pod), reasons, len(placement))
            _score_value, name, choice = best
            state = work[name]
            decision = Decision(node=name, requests=requests)
            if choice is not None:
                existing, new = choice
                decision.groups = existing + new
                decision.portion = wanted.portion_on(state.gpu_memory)
                decision.devices = wanted.devices
            self._reserve(work, decision)
            placement[_key(pod)] = decision
        return placement, None

    def _reserve(self, states: dict[str, NodeState], decision: Decision) -> None:
        state = states[decision.node]
        for r, v in decision.requests.items():
            state.used[r] = state.used.get(r, 0) + v
        for group in decision.groups:
            if group not in state.groups:
                state.used[GPU] = state.used.get(GPU, 0) + 1
            state.groups[group] = state.groups.get(group, 0) + decision.portion

    def _commit(self, pod: dict, decision: Decision, job: Job) -> None:
        """The scheduler's part of a bind: a BindRequest for the binder, the Scheduled event."""
        key = _key(pod)
        meta = pod["metadata"]
        bind_request = {
            "apiVersion": BR_API,
            "kind": "BindRequest",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "labels": {"selected-node": decision.node},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                    }
                ],
            },
            "spec": {
                "podName": meta["name"],
                "selectedNode": decision.node,
                "receivedResourceType": "Fraction" if decision.fractional else "Regular",
                "receivedGPU": {
                    "count": decision.devices
                    if decision.fractional
                    else sharing.gpu_request(pod).whole,
                    "portion": sharing.portion_text(
                        decision.portion if decision.fractional else 1000
                    ),
                },
            },
        }
        if decision.fractional:
            bind_request["spec"]["selectedGPUGroups"] = list(decision.groups)
        try:
            self.store.create(
                bind_request, namespace=meta.get("namespace"), field_manager=FIELD_MANAGER
            )
        except ApiError as exc:
            if exc.code == 409:
                # a leftover of an earlier attempt for a pod of the same name
                with contextlib.suppress(ApiError):
                    self.store.delete(BR_API, "BindRequest", key[0], key[1])
                with contextlib.suppress(ApiError):
                    self.store.create(
                        bind_request, namespace=meta.get("namespace"), field_manager=FIELD_MANAGER
                    )
            elif exc.code != 404:
                raise
        self.inflight[key] = decision
        pool = _pool(job.pg) or DEFAULT_NODE_POOL
        events.record(
            self.store,
            pod,
            "Scheduled",
            f"Successfully assigned pod {key[0]}/{key[1]} to node {decision.node} at node-pool "
            f"{pool}",
            component=COMPONENT,
        )

    def _note_start(self, job: Job) -> None:
        annotations = job.pg["metadata"].get("annotations") or {}
        now = rfc3339(self.clock.now())
        if annotations.get(LAST_START) == now:
            return
        with contextlib.suppress(ApiError):
            updated = self.store.patch(
                PG_API,
                "PodGroup",
                job.key[0],
                job.key[1],
                {"metadata": {"annotations": {LAST_START: now}}},
                field_manager=FIELD_MANAGER,
            )
            self.podgroups[job.key] = updated
            job.pg = updated

    def _record_fit_failure(self, job: Job, tasks: list[dict], failure) -> None:
        job.node_fit_failed = True
        pod_key, reasons, placed = failure
        job.fit_reasons = dict(reasons)
        job.placed = placed
        counts = sorted(f"{count} {reason}" for reason, count in reasons.items())
        task_error = NO_NODES + (": " + ". \n".join(counts) + "." if counts else "")
        for pod in tasks:
            job.pod_errors[_key(pod)] = (
                task_error if _key(pod) == pod_key else ("Unable to schedule pod")
            )
        pod_name = f"{pod_key[0]}/{pod_key[1]}"
        gang = job.min_member > 1 and len(job.active) < job.min_member
        if not gang:
            message = f"Resources were not found for pod {pod_name} due to: {task_error}"
        else:
            placed += len(job.active)
            message = (
                f"Resources were found for {placed} pods while {job.min_member} are required for "
                f"gang scheduling. Additional pods cannot be scheduled due to: {task_error}"
            )
        job.errors.append({"reason": "PodSchedulingErrors", "message": message})

    def _not_ready(self, job: Job) -> None:
        message = (
            "Job is not ready for scheduling. Waiting for "
            f"{job.min_member} pods, currently {job.alive} exist, {job.gated} are gated"
        )
        self._pg_event(job.pg, "NotReady", message)

    # -- reclaim and preempt
    def _reclaim_and_preempt(
        self, failed: list[Job], jobs: list[Job], shares, states, max_memory: int
    ) -> None:
        running = [j for j in jobs if any(not _deleting(p) and _node_of(p) for p in j.active)]
        failed.sort(
            key=lambda j: (
                (*quota.queue_order_key(shares[j.queue], j.request), -j.priority, j.created, j.key)
            )
        )
        for job in failed:
            if job.queue not in shares:
                continue
            tasks = self._tasks(job)
            if not tasks:
                continue
            requested = quota.zero()
            for pod in tasks:
                quota.add(requested, self._quota_of(pod, max_memory))
            leaf = shares[job.queue]
            victims = None
            action = ""
            if quota.can_reclaim(leaf, requested, job.preemptible):
                victims = self._find_victims(
                    job, tasks, requested, running, shares, states, reclaim=True
                )
                action = "reclaim"
            if victims is None and (
                job.preemptible
                or quota.non_preemptible_over_quota(shares, job.queue, requested) is None
            ):
                victims = self._find_victims(
                    job, tasks, requested, running, shares, states, reclaim=False
                )
                action = "preempt"
            if not victims:
                continue
            self._evict(job, victims, action, shares)
            for state in states.values():
                state.releasing = dict(state.releasing)
                state.releasing_groups = dict(state.releasing_groups)
            for victim in victims:
                running.remove(victim)
                for pod in victim.active:
                    if _deleting(pod) or not _node_of(pod):
                        continue
                    state = states.get(_node_of(pod))
                    memory = state.gpu_memory if state is not None else max_memory
                    self._account(shares, victim, self._quota_of(pod, memory), -1)
                    if state is None:
                        continue
                    for r, v in self._requests(pod).items():
                        state.releasing[r] = state.releasing.get(r, 0) + v
                    for group in sharing.pod_groups(pod):
                        portion = sharing.gpu_request(pod).portion_on(state.gpu_memory)
                        state.releasing_groups[group] = (
                            state.releasing_groups.get(group, 0) + portion
                        )
            # the reclaimer waits (pipelined) for what the victims release
            placement, _ = self._place(tasks, states, use_releasing=True)
            if placement is not None:
                self._pipeline(job, tasks, placement, shares, states)

    def _account(self, shares, job: Job, amounts: dict[str, int], sign: int = 1) -> None:
        for queue in quota.chain(shares, job.queue):
            quota.add(queue.allocated, amounts, sign)
            if not job.preemptible:
                quota.add(queue.allocated_np, amounts, sign)

    def _pipeline(self, job: Job, tasks, placement, shares, states) -> None:
        """Hold what the job will get once terminating pods are gone (bound in a later session)."""
        for pod in tasks:
            decision = placement[_key(pod)]
            self._reserve(states, decision)
            self._account(shares, job, self._quota_of(pod, states[decision.node].gpu_memory))
        job.errors = []
        job.pod_errors = {}
        job.node_fit_failed = False
        job.pipelined = True

    def _find_victims(
        self, job: Job, tasks, requested, running: list[Job], shares, states, *, reclaim: bool
    ) -> list[Job] | None:
        leaf = shares[job.queue]
        candidates = []
        for victim in running:
            if victim is job or not victim.preemptible or victim.queue not in shares:
                continue
            if reclaim:
                if victim.queue == job.queue:
                    continue
                mine, theirs = quota.leveled(shares, job.queue, victim.queue)
                if mine is None or theirs is None or mine.name == theirs.name:
                    continue
                candidates.append(
                    (
                        -theirs.saturation({}),
                        victim.priority,
                        _neg_time(victim.created),
                        victim.key,
                        victim,
                        theirs,
                    )
                )
            else:
                if victim.queue != job.queue or victim.priority >= job.priority:
                    continue
                candidates.append(
                    (0.0, victim.priority, _neg_time(victim.created), victim.key, victim, None)
                )
        if not candidates:
            return None
        candidates.sort(key=lambda c: c[:4])
        remaining = {name: dict(q.allocated) for name, q in shares.items()}
        chosen: list[Job] = []
        freed: dict[str, dict[str, int]] = {}
        freed_groups: dict[str, dict[str, int]] = {}
        for *_order, victim, theirs in candidates[:MAX_VICTIM_JOBS]:
            pods = [p for p in victim.active if _node_of(p) and not _deleting(p)]
            if not pods:
                continue
            amounts = quota.zero()
            for pod in pods:
                node = _node_of(pod)
                memory = states[node].gpu_memory if node in states else 0
                quota.add(amounts, self._quota_of(pod, memory))
            if reclaim:
                if not quota.may_take_from(
                    leaf, requested, theirs, remaining[theirs.name], amounts
                ):
                    continue
                for queue in quota.chain(shares, victim.queue):
                    quota.add(remaining[queue.name], amounts, -1)
            chosen.append(victim)
            for pod in pods:
                node = _node_of(pod)
                state = states.get(node)
                if state is None:
                    continue
                bucket = freed.setdefault(node, {})
                for r, v in self._requests(pod).items():
                    bucket[r] = bucket.get(r, 0) + v
                portion = sharing.gpu_request(pod).portion_on(state.gpu_memory)
                for group in sharing.pod_groups(pod):
                    groups = freed_groups.setdefault(node, {})
                    groups[group] = groups.get(group, 0) + portion
            trial = {}
            for name, state in states.items():
                copy = state.copy()
                copy.releasing = dict(state.releasing)
                copy.releasing_groups = dict(state.releasing_groups)
                for r, v in freed.get(name, {}).items():
                    copy.releasing[r] = copy.releasing.get(r, 0) + v
                for g, v in freed_groups.get(name, {}).items():
                    copy.releasing_groups[g] = copy.releasing_groups.get(g, 0) + v
                trial[name] = copy
            placement, _ = self._place(tasks, trial, use_releasing=True)
            if placement is not None:
                return chosen
        return None

    def _evict(self, job: Job, victims: list[Job], action: str, shares) -> None:
        now = rfc3339(self.clock.now())
        for victim in victims:
            pods = [p for p in victim.active if _node_of(p) and not _deleting(p)]
            for pod in pods:
                pod_name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                if action == "preempt":
                    message = (
                        f"Pod {pod_name} was preempted by higher priority workload "
                        f"{job.key[0]}/{job.key[1]}"
                    )
                else:
                    message = (
                        f"Pod {pod_name} was preempted by workload {job.key[0]}/{job.key[1]}.\n"
                        + _queue_details(shares.get(victim.queue))
                        + "\n"
                        + _queue_details(shares.get(job.queue))
                    )
                events.record(
                    self.store,
                    victim.pg,
                    "Evict",
                    message,
                    component=COMPONENT,
                    annotations={
                        "num-evicted-pods": str(len(pods)),
                        "evictor-action-type": action,
                        "evictor-pod-group-name": job.key[1],
                        "evictor-pod-group-namespace": job.key[0],
                    },
                )
                with contextlib.suppress(ApiError):
                    self.store.delete("v1", "Pod", *_key(pod), grace=True)
            with contextlib.suppress(ApiError):
                self.podgroups[victim.key] = self.store.patch(
                    PG_API,
                    "PodGroup",
                    victim.key[0],
                    victim.key[1],
                    {"metadata": {"annotations": {LAST_EVICTION: now}}},
                    field_manager=FIELD_MANAGER,
                )

    # ---- status ------------------------------------------------------------------------------
    def _write_job_status(self, jobs: list[Job]) -> None:
        for job in jobs:
            waiting = bool(job.pending) or job.gated > 0
            if waiting and job.errors:
                self._mark_unschedulable(job)
            elif not waiting and not any(_key(p) in self.inflight for p in job.active):
                self._clear_condition(job)

    def _mark_unschedulable(self, job: Job) -> None:
        if len(job.errors) == 1:
            error = job.errors[0]
            message = f"{error['reason']}: {error['message']}."
        else:
            message = (
                "Unable to schedule podgroup: "
                + ". \n".join(sorted(e["message"] for e in job.errors))
                + "."
            )
        self._pg_event(job.pg, "Unschedulable", message)
        mark = (job.pg.get("spec") or {}).get("markUnschedulable")
        for pod in job.pending:
            pod_message = job.pod_errors.get(_key(pod), message)
            self._pod_unschedulable(pod, pod_message, mark is not False)
        if any(_node_of(p) and not _deleting(p) for p in job.active):
            return  # KAI leaves the condition alone while pods of the group are allocated
        pool = _pool(job.pg) or DEFAULT_NODE_POOL
        reasons = [
            {k: v for k, v in error.items() if k in ("reason", "message", "details")}
            for error in job.errors
        ]
        current = [c for c in (job.pg.get("status") or {}).get("schedulingConditions") or []]
        same_pool = [c for c in current if c.get("nodePool") == pool]
        last = current[-1] if current else None
        if (
            last is not None
            and last.get("nodePool") == pool
            and last.get("message") == message
            and last.get("reasons") == reasons
            and last.get("status") == "True"
        ):
            return
        try:
            transition = int((last or {}).get("transitionID") or 0) + 1
        except ValueError:
            transition = 1
        condition = {
            "type": "UnschedulableOnNodePool",
            "nodePool": pool,
            "reason": "Unschedulable",
            "message": message,
            "status": "True",
            "reasons": reasons,
            "transitionID": str(transition),
            "lastTransitionTime": rfc3339(self.clock.now()),
        }
        others = [c for c in current if c not in same_pool]
        self._patch_pg_status(job, {"schedulingConditions": [*others, condition]})

    def _clear_condition(self, job: Job) -> None:
        current = (job.pg.get("status") or {}).get("schedulingConditions") or []
        if not current:
            return
        pool = _pool(job.pg) or DEFAULT_NODE_POOL
        kept = [c for c in current if c.get("nodePool") != pool]
        if len(kept) != len(current):
            self._patch_pg_status(job, {"schedulingConditions": kept})

    def _patch_pg_status(self, job: Job, status: dict) -> None:
        try:
            updated = self.store.patch(
                PG_API,
                "PodGroup",
                job.key[0],
                job.key[1],
                {"status": status},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        self.podgroups[job.key] = updated
        job.pg = updated

    def _pod_unschedulable(self, pod: dict, message: str, condition: bool) -> None:
        key = ("pod", pod["metadata"].get("uid"))
        if self.last_messages.get(key) == message:
            return
        self.last_messages[key] = message
        if len(self.last_messages) > 50000:
            self.last_messages.clear()
        events.record(
            self.store, pod, "Unschedulable", message, type="Warning", component=COMPONENT
        )
        if not condition:
            return
        now = rfc3339(self.clock.now())
        conditions = [
            c
            for c in (pod.get("status") or {}).get("conditions") or []
            if c.get("type") != "PodScheduled"
        ]
        status: dict = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                },
                *conditions,
            ]
        }
        if not (pod.get("status") or {}).get("phase"):
            status["phase"] = "Pending"
        with contextlib.suppress(ApiError):
            self.store.patch(
                "v1",
                "Pod",
                *_key(pod),
                {"status": status},
                subresource="status",
                field_manager=COMPONENT,
            )

    def _pg_event(self, pg: dict, reason: str, message: str) -> None:
        key = (pg["metadata"].get("uid"), reason)
        if self.last_messages.get(key) == message:
            return
        self.last_messages[key] = message
        events.record(self.store, pg, reason, message, component=COMPONENT)

    def _write_podgroup_resources(self) -> None:
        """The podgroup-controller: requested (running and pending pods), allocated and
        allocatedNonPreemptible (pods on a node), as ResourceLists."""
        dirty, self.dirty_pgs = self.dirty_pgs, set()
        for key in dirty | (set(self.podgroups) - set(self.pg_resources)):
            pg = self.podgroups.get(key)
            if pg is None:
                continue
            requested: dict[str, int] = {}
            allocated: dict[str, int] = {}
            node_memory: dict[str, int] = {}
            for pod_key in self.pg_members.get(key, ()):
                pod = self.pods.get(pod_key)
                if pod is None or _terminal(pod):
                    continue
                containers = (pod.get("spec") or {}).get("containers") or []
                own: dict[str, int] = {}
                for container in containers:
                    resources = container.get("resources") or {}
                    merged = dict(resources.get("limits") or {})
                    merged.update(resources.get("requests") or {})
                    _add_list(own, merged)
                wanted = sharing.gpu_request(pod)
                asked = dict(own)
                if wanted.portion:
                    asked[GPU] = asked.get(GPU, 0) + wanted.portion * wanted.devices
                elif wanted.memory_mib:
                    asked["run.ai/gpu.memory"] = asked.get("run.ai/gpu.memory", 0) + (
                        wanted.memory_mib * wanted.devices * 1000
                    )
                for name, value in asked.items():
                    requested[name] = requested.get(name, 0) + value
                scheduled = _node_of(pod) and (
                    _phase(pod) == "Running" or _scheduled_condition(pod)
                )
                if scheduled:
                    got = dict(own)
                    annotations = pod["metadata"].get("annotations") or {}
                    if annotations.get(sharing.RECEIVED_TYPE) == "Fraction":
                        node = _node_of(pod)
                        if node not in node_memory:
                            found = self.store.try_get("v1", "Node", None, node)
                            node_memory[node] = sharing.node_gpu_memory(found) if found else 100
                        got[GPU] = got.get(GPU, 0) + wanted.portion_on(node_memory[node])
                    for name, value in got.items():
                        allocated[name] = allocated.get(name, 0) + value
            priority = podgrouper.priority_of(
                self.store, (pg.get("spec") or {}).get("priorityClassName"), self.priority_cache
            )
            preemptible = podgrouper.is_preemptible(pg, priority)
            status = dict((pg.get("status") or {}).get("resourcesStatus") or {})
            status["requested"] = {n: format_milli(n, v) for n, v in sorted(requested.items())}
            status["allocated"] = {n: format_milli(n, v) for n, v in sorted(allocated.items())}
            if not preemptible:
                status["allocatedNonPreemptible"] = dict(status["allocated"])
            queue = (pg.get("spec") or {}).get("queue") or ""
            self.pg_resources[key] = (
                queue,
                status["requested"],
                status["allocated"],
                status.get("allocatedNonPreemptible") or {},
            )
            if status != ((pg.get("status") or {}).get("resourcesStatus") or {}):
                with contextlib.suppress(ApiError):
                    self.podgroups[key] = self.store.patch(
                        PG_API,
                        "PodGroup",
                        key[0],
                        key[1],
                        {"status": {"resourcesStatus": status}},
                        subresource="status",
                        field_manager="podgroup-controller",
                    )

    def _write_queue_status(self) -> None:
        """The queue-controller: a queue's allocated, allocatedNonPreemptible and requested are
        those of its PodGroups plus its children's; childQueues lists its children."""
        own: dict[str, list[dict[str, int]]] = {}
        for queue, requested, allocated, allocated_np in self.pg_resources.values():
            sums = own.setdefault(queue, [{}, {}, {}])
            _add_list(sums[0], allocated)
            _add_list(sums[1], allocated_np)
            _add_list(sums[2], requested)
        children: dict[str, list[str]] = {}
        for name, queue in self.queues.items():
            parent = (queue.get("spec") or {}).get("parentQueue")
            if parent:
                children.setdefault(parent, []).append(name)
        totals: dict[str, list[dict[str, int]]] = {}

        def total_of(name: str, seen: set[str]) -> list[dict[str, int]]:
            if name in totals:
                return totals[name]
            sums = [dict(d) for d in own.get(name, [{}, {}, {}])]
            seen = seen | {name}
            for child in children.get(name, []):
                if child in seen:
                    continue
                for index, part in enumerate(total_of(child, seen)):
                    for r, v in part.items():
                        sums[index][r] = sums[index].get(r, 0) + v
            totals[name] = sums
            return sums

        for name, queue in list(self.queues.items()):
            allocated, allocated_np, requested = total_of(name, set())
            status = dict(queue.get("status") or {})
            status["allocated"] = {n: format_milli(n, v) for n, v in sorted(allocated.items())}
            status["allocatedNonPreemptible"] = {
                n: format_milli(n, v) for n, v in sorted(allocated_np.items())
            }
            status["requested"] = {n: format_milli(n, v) for n, v in sorted(requested.items())}
            kids = sorted(children.get(name, []))
            if kids:
                status["childQueues"] = kids
            else:
                status.pop("childQueues", None)
            if status == (queue.get("status") or {}):
                continue
            try:
                self.queues[name] = self.store.patch(
                    QUEUE_API,
                    "Queue",
                    None,
                    name,
                    {"status": status},
                    subresource="status",
                    field_manager="queue-controller",
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise


# ----------------------------------------------------------------------------------------------
# helpers


def _task_order(pod: dict) -> tuple:
    labels = pod["metadata"].get("labels") or {}
    index = labels.get("batch.kubernetes.io/job-completion-index")
    return (
        int(index) if index and index.isdigit() else 0,
        pod["metadata"].get("creationTimestamp") or "",
        pod["metadata"]["name"],
    )


def _neg_time(timestamp: str) -> tuple:
    """Sorts newer first."""
    return tuple(-ord(c) for c in timestamp)


def _scheduled_condition(pod: dict) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition.get("status") == "True"
    return False


def _kai_reason(reason: str) -> str:
    """kube-scheduler's filter wording as KAI's fit errors say it."""
    if reason == "Too many pods":
        return "node(s) pod number exceeded"
    if reason.startswith("Insufficient "):
        resource = reason[len("Insufficient ") :]
        names = {"cpu": "CPU cores", "memory": "memory", GPU: "GPUs"}
        if resource.startswith("nvidia.com/mig-"):
            return f"node(s) didn't have enough of mig profile: {resource}"
        return f"node(s) didn't have enough resources: {names.get(resource, resource)}"
    return reason


def _fraction_choice(
    wanted: sharing.GpuRequest, state: NodeState, used: dict[str, int], groups: dict[str, int]
):
    """(shared GPU groups to join, new groups on free GPUs) for a fractional pod, or None."""
    portion = wanted.portion_on(state.gpu_memory)
    fitting = sorted(
        (g for g, taken in groups.items() if taken + portion <= 1000),
        key=lambda g: (-groups[g], g),
    )
    existing = fitting[: wanted.devices]
    missing = wanted.devices - len(existing)
    if missing <= 0:
        return existing, []
    alloc = scheduler.node_allocatable(state.node).get(GPU, 0)
    free = alloc - used.get(GPU, 0)
    if free < missing:
        return None
    return existing, [str(uuid.uuid4()) for _ in range(missing)]


def _score(requests, wanted: sharing.GpuRequest, state: NodeState, used, choice) -> tuple:
    """Bin-packing: fuller GPUs and nodes first (fewest free GPUs left); non-GPU pods prefer
    nodes without GPUs."""
    name = state.name
    alloc = scheduler.node_allocatable(state.node)
    free_gpus = alloc.get(GPU, 0) - used.get(GPU, 0)
    if choice is not None:
        existing, new = choice
        fullest = max((state.groups.get(g, 0) for g in existing), default=-1)
        return (0 if existing else 1, -fullest, free_gpus - len(new), name)
    extended = [k for k, v in requests.items() if "/" in k and v > 0]
    if extended:
        left = sum(alloc.get(k, 0) - used.get(k, 0) - requests[k] for k in extended)
        return (0, 0, left, name)
    cpu_alloc = max(alloc.get("cpu", 1), 1)
    ratio = (used.get("cpu", 0) + requests.get("cpu", 0)) / cpu_alloc
    return (1 if state.has_gpus else 0, 0, -ratio, name)


def _queue_details(queue: QueueShare | None) -> str:
    if queue is None:
        return ""

    def text(amounts) -> str:
        gpu = quota.humanize(amounts.get("gpu"), 1000)
        cpu = quota.humanize(amounts.get("cpu"), 1000)
        memory = quota.humanize(amounts.get("memory"), 1_000_000_000)
        return f"GPU: {gpu}, CPU: {cpu} (cores), memory: {memory} (GB)"

    return (
        f"{queue.label} uses <{text(queue.allocated)}> with a quota of <{text(queue.deserved)}>, "
        f"fair-share of <{text(queue.fair)}> and queue priority of <{queue.priority}>."
    )
