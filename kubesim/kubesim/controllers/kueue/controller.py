"""Kueue inside kubesim: the batch/v1 Job integration, the workload controller, the scheduler, the
ClusterQueue/LocalQueue status controllers, the webhooks and the visibility API.

The admission arithmetic lives in kueue_engine.py (pure). This module keeps an in-memory view of the
objects (fed synchronously by the store's write listener), reconciles level-triggered in one asyncio
task, and writes what Kueue v0.19 writes: Workloads named job-<name>-<hash5>, their conditions with
Kueue's reasons and messages, the Job's suspend flag and pod-template injections, events, and the
queues' status.

Configuration (Kueue's manager config has these; kubesim reads options or the environment):
waitForPodsReady timeout `options.kueue_pods_ready_timeout` or KUBESIM_KUEUE_PODS_READY_TIMEOUT
(simulated seconds, default 1800 as upstream), requeue backoff KUBESIM_KUEUE_BACKOFF_BASE_SECONDS
(60) and KUBESIM_KUEUE_BACKOFF_MAX_SECONDS (3600).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import heapq
import itertools
import json
import os
import re
import time

from kubesim.api.errors import ApiError
from kubesim.api.selectors import label_selector_from_dict, labels_match
from kubesim.clock import rfc3339
from kubesim.controllers import events
from kubesim.controllers.kueue import partial as kueue_partial
from kubesim.controllers.kueue.engine import (
    ClusterQueue,
    Decision,
    Flavor,
    KueueEngine,
    PodSet,
    ResourceGroup,
    ResourceQuota,
    Workload,
    backoff_seconds,
    cq_path,
    preemption_message,
)
from kubesim.controllers.kueue.quantity import format_milli, requests_of_pod_spec, to_milli
from kubesim.waiting import wait_event

GROUP = "kueue.x-k8s.io"
API = f"{GROUP}/v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
JOB_UID_LABEL = f"{GROUP}/job-uid"
MAX_EXEC_LABEL = f"{GROUP}/max-exec-time-seconds"
MIN_PARALLELISM_ANNOTATION = f"{GROUP}/job-min-parallelism"
PODSET_LABEL = f"{GROUP}/podset"
WORKLOAD_ANNOTATION = f"{GROUP}/workload"
CQ_NAME_LABEL = f"{GROUP}/cluster-queue-name"
LQ_NAME_LABEL = f"{GROUP}/local-queue-name"

FIELD_MANAGER = "kueue"
RESOURCE_IN_USE = f"{GROUP}/resource-in-use"  # finalizer on ClusterQueues holding quota
ADMISSION = "kueue-admission"
WORKLOAD_CONTROLLER = "kueue-workload-controller"
JOB_CONTROLLER = "batch/job-kueue-controller"

VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSION = "v1beta2"

STATUS_INTERVAL = 0.25  # wall seconds between ClusterQueue/LocalQueue status writes
NOT_READY_MSG = "Not all pods are ready or succeeded"
READY_MSG = "All pods reached readiness and the workload is running"
RECOVERY_MSG = "At least one pod has failed, waiting for recovery"

_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def start(ctx) -> asyncio.Task:
    controller = KueueController(ctx)
    controller.install()
    return ctx.spawn(controller.run(), "kueue")


# ------------------------------------------------------------------------------------------------
# small helpers


def _cond(obj: dict, ctype: str) -> dict | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == ctype:
            return condition
    return None


def _is_true(obj: dict, ctype: str) -> bool:
    condition = _cond(obj, ctype)
    return bool(condition) and condition.get("status") == "True"


def _parse_time(value: str | None) -> float:
    if not value:
        return 0.0
    text = value.replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(text).timestamp()


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def _set_condition(conditions: list[dict], new: dict, now: str) -> bool:
    """apimeta.SetStatusCondition: keep lastTransitionTime when the status does not change."""
    for i, existing in enumerate(conditions):
        if existing.get("type") != new["type"]:
            continue
        merged = dict(new)
        if existing.get("status") == new["status"]:
            merged["lastTransitionTime"] = existing.get("lastTransitionTime") or now
        else:
            merged["lastTransitionTime"] = now
        if all(existing.get(k) == merged.get(k) for k in ("status", "reason", "message")):
            return False
        conditions[i] = merged
        return True
    conditions.append({**new, "lastTransitionTime": now})
    return True


def _condition(ctype: str, status: bool, reason: str, message: str, generation=None) -> dict:
    condition = {
        "type": ctype,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:32768],
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def workload_name(job_name: str, job_uid: str, kind: str = "Job", group: str = "batch") -> str:
    """Kueue's GetWorkloadNameForOwnerWithGVK: <kind>-<name>-<first 5 hex of sha1>."""
    digest = hashlib.sha1(
        f"{kind}\n{group}\n{job_name}\n{job_uid}".encode(), usedforsecurity=False
    ).hexdigest()
    prefix = f"{kind.lower()}-{job_name}"[: 253 - 6]
    return f"{prefix}-{digest[:5]}"


def _job_pods_count(job: dict) -> int:
    spec = job.get("spec") or {}
    parallelism = spec.get("parallelism")
    parallelism = 1 if parallelism is None else parallelism
    completions = spec.get("completions")
    if completions is not None:
        return min(parallelism, completions)
    return parallelism


def _job_finished(job: dict) -> tuple[bool, str] | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return condition.get("type") == "Complete", condition.get("message") or ""
    return None


def _job_suspended(job: dict) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def _job_active(job: dict) -> int:
    return int((job.get("status") or {}).get("active") or 0)


def _field_error(path: str, value, message: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value)}: {message}"


def _aggregate(errors: list[str]) -> str:
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def _deny(webhook: str, errors: list[str]) -> ApiError:
    return ApiError(
        403, "Forbidden", f'admission webhook "{webhook}" denied the request: {_aggregate(errors)}'
    )


def _selector_matches(selector: dict | None, labels: dict) -> bool:
    """A ClusterQueue's namespaceSelector: nil matches nothing, {} matches everything."""
    if selector is None:
        return False
    try:
        return labels_match(label_selector_from_dict(selector), labels)
    except ApiError:  # an operator the API would have refused: it selects nothing
        return False


# ------------------------------------------------------------------------------------------------


class KueueController:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.server = ctx.server
        self.engine = KueueEngine()
        options = ctx.options
        self.pods_ready_timeout = float(
            getattr(options, "kueue_pods_ready_timeout", None)
            or os.environ.get("KUBESIM_KUEUE_PODS_READY_TIMEOUT")
            or 1800
        )
        self.backoff_base = float(os.environ.get("KUBESIM_KUEUE_BACKOFF_BASE_SECONDS") or 60)
        self.backoff_max = float(os.environ.get("KUBESIM_KUEUE_BACKOFF_MAX_SECONDS") or 3600)
        # Read-only references to the stored objects, kept current by the write listener.
        self.jobs: dict[tuple[str, str], dict] = {}
        self.job_by_uid: dict[str, tuple[str, str]] = {}
        self.workloads: dict[tuple[str, str], dict] = {}
        # Workloads not Finished: what the queue status counts (finished ones stay in
        # self.workloads until deleted, and a busy cluster holds thousands of them).
        self.unfinished: set[tuple[str, str]] = set()
        self.wl_by_job_uid: dict[str, tuple[str, str]] = {}
        self.cluster_queues: dict[str, dict] = {}
        self.local_queues: dict[tuple[str, str], dict] = {}
        self.flavors: dict[str, dict] = {}
        self.cohorts: dict[str, dict] = {}
        self.priority_classes: dict[str, dict] = {}
        self.namespaces: dict[str, dict] = {}
        self.dirty_jobs: set[tuple[str, str]] = set()
        self.dirty_workloads: set[tuple[str, str]] = set()
        self.config_dirty = True
        self.wake = asyncio.Event()
        self.timers: list[tuple[float, tuple[str, str]]] = []
        self.timer_at: dict[tuple[str, str], float] = {}
        self.job_retries: dict[tuple[str, str], float] = {}
        self.sequence = itertools.count()
        self.first_seen: dict[tuple[str, str], int] = {}
        self.job_sequence: dict[str, int] = {}  # creation order of Jobs, for FIFO ties
        self.written_status: dict[tuple, str] = {}
        self.pending_messages: dict[tuple[str, str], str] = {}
        self.inadmissible: dict[tuple[str, str], tuple[str, str]] = {}
        self.status_next = 0.0
        self.status_interval = STATUS_INTERVAL
        self.status_pending = False

    # ---- wiring ------------------------------------------------------------------------------
    def install(self) -> None:
        self.store.add_admission_hook("batch/v1", "Job", self._job_webhook)
        self.store.add_admission_hook(API, "ClusterQueue", self._cluster_queue_webhook)
        self.store.add_admission_hook(API, "Workload", self._workload_webhook)
        self.store.add_write_listener(self._on_write)
        base = f"/apis/{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
        add_route = getattr(self.server, "add_route", None)
        if add_route is not None:
            add_route("GET", base + "/clusterqueues/{name}/pendingworkloads", self._visibility_cq)
            add_route(
                "GET",
                base + "/namespaces/{namespace}/localqueues/{name}/pendingworkloads",
                self._visibility_lq,
            )
        add_group = getattr(self.server, "add_discovery_group", None)
        if add_group is not None:
            add_group(VISIBILITY_GROUP, VISIBILITY_VERSION, _visibility_resources())
        for rtype_kind, api in (
            ("Namespace", "v1"),
            ("Job", "batch/v1"),
            ("ResourceFlavor", API),
            ("Cohort", API),
            ("ClusterQueue", API),
            ("LocalQueue", API),
            ("WorkloadPriorityClass", API),
            ("Workload", API),
        ):
            try:
                rtype = self.store.registry.by_kind(api, rtype_kind)
            except Exception:  # noqa: S112 - the CRD is not installed: nothing to replay
                continue
            for obj in self.store.select(rtype, None):
                self._on_write("ADDED", rtype, obj, None)

    def _on_write(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        group, kind = rtype.group, rtype.kind
        deleted = event_type == "DELETED"
        if group == "batch" and kind == "Job":
            key = _key(obj)
            uid = obj["metadata"].get("uid")
            if deleted:
                self.jobs.pop(key, None)
                self.job_by_uid.pop(uid, None)
            else:
                self.jobs[key] = obj
                self.job_by_uid[uid] = key
                if uid not in self.job_sequence:
                    self.job_sequence[uid] = next(self.sequence)
            self.dirty_jobs.add(key)
        elif group == GROUP:
            if kind == "Workload":
                key = _key(obj)
                job_uid = (obj["metadata"].get("labels") or {}).get(JOB_UID_LABEL)
                if deleted:
                    self.workloads.pop(key, None)
                    self.unfinished.discard(key)
                    if job_uid and self.wl_by_job_uid.get(job_uid) == key:
                        self.wl_by_job_uid.pop(job_uid, None)
                else:
                    self.workloads[key] = obj
                    if _is_true(obj, "Finished"):
                        self.unfinished.discard(key)
                    else:
                        self.unfinished.add(key)
                    if key not in self.first_seen:
                        self.first_seen[key] = next(self.sequence)
                    if job_uid:
                        self.wl_by_job_uid[job_uid] = key
                self.dirty_workloads.add(key)
                if job_uid and job_uid in self.job_by_uid:
                    self.dirty_jobs.add(self.job_by_uid[job_uid])
            elif kind == "ClusterQueue":
                self._index(self.cluster_queues, obj["metadata"]["name"], obj, deleted)
            elif kind == "LocalQueue":
                self._index(self.local_queues, _key(obj), obj, deleted)
            elif kind == "ResourceFlavor":
                self._index(self.flavors, obj["metadata"]["name"], obj, deleted)
            elif kind == "Cohort":
                self._index(self.cohorts, obj["metadata"]["name"], obj, deleted)
            elif kind == "WorkloadPriorityClass":
                self._index(self.priority_classes, obj["metadata"]["name"], obj, deleted)
                return
            else:
                return
        elif group == "" and kind == "Namespace":
            self._index(self.namespaces, obj["metadata"]["name"], obj, deleted)
        else:
            return
        self.wake.set()

    def _index(self, table: dict, key, obj: dict, deleted: bool) -> None:
        before = table.get(key)
        if deleted:
            table.pop(key, None)
        else:
            table[key] = obj
        # Status-only writes (ours) do not change the configuration.
        if (
            before is None
            or deleted
            or before.get("spec") != obj.get("spec")
            or (before["metadata"].get("labels") != obj["metadata"].get("labels"))
            or before["metadata"].get("deletionTimestamp")
            != obj["metadata"].get("deletionTimestamp")
            or before["metadata"].get("finalizers") != obj["metadata"].get("finalizers")
        ):
            self.config_dirty = True

    # ---- webhooks ----------------------------------------------------------------------------
    def _job_webhook(self, operation: str, job: dict, old: dict | None) -> None:
        if operation == "DELETE":
            return
        meta = job.setdefault("metadata", {})
        labels = meta.get("labels") or {}
        namespace = meta.get("namespace") or ""
        if operation == "CREATE":
            if QUEUE_LABEL not in labels and (namespace, "default") in self.local_queues:
                # LocalQueueDefaulting: a LocalQueue named "default" catches unlabelled Jobs.
                meta.setdefault("labels", {})[QUEUE_LABEL] = "default"
                labels = meta["labels"]
            if QUEUE_LABEL in labels:
                job.setdefault("spec", {})["suspend"] = True
            errors = self._validate_job_create(job)
        else:
            if QUEUE_LABEL not in labels and QUEUE_LABEL not in (
                (old or {}).get("metadata", {}).get("labels") or {}
            ):
                return
            errors = self._validate_job_create(job, creating=False) + self._validate_job_update(
                job, old or {}
            )
        if errors:
            raise _deny("vjob.kb.io", errors)

    @staticmethod
    def _validate_job_create(job: dict, *, creating: bool = True) -> list[str]:
        errors: list[str] = []
        meta = job.get("metadata") or {}
        labels = meta.get("labels") or {}
        queue = labels.get(QUEUE_LABEL)
        if queue is not None and (len(queue) > 253 or not _DNS1123_SUBDOMAIN.match(queue)):
            errors.append(_field_error(f"metadata.labels[{QUEUE_LABEL}]", queue, _SUBDOMAIN_MSG))
        max_exec = labels.get(MAX_EXEC_LABEL)
        if max_exec is not None:
            path = f"metadata.labels[{MAX_EXEC_LABEL}]"
            try:
                if int(max_exec) <= 0:
                    errors.append(_field_error(path, int(max_exec), "should be greater than 0"))
            except ValueError:
                errors.append(
                    _field_error(
                        path, max_exec, f'strconv.Atoi: parsing "{max_exec}": invalid syntax'
                    )
                )
        minimum = (meta.get("annotations") or {}).get(MIN_PARALLELISM_ANNOTATION)
        # on update the range is not checked: a partial admission lowers parallelism to >= min
        if minimum is not None and creating:
            path = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]"
            count = _job_pods_count(job)
            try:
                value = int(minimum)
                if value >= count or value <= 0:
                    errors.append(_field_error(path, value, f"should be between 0 and {count - 1}"))
            except ValueError:
                errors.append(
                    _field_error(
                        path, minimum, f'strconv.Atoi: parsing "{minimum}": invalid syntax'
                    )
                )
        return errors

    @staticmethod
    def _validate_job_update(job: dict, old: dict) -> list[str]:
        errors: list[str] = []
        new_labels = (job.get("metadata") or {}).get("labels") or {}
        old_labels = (old.get("metadata") or {}).get("labels") or {}
        suspended = _job_suspended(job)
        if not suspended and new_labels.get(QUEUE_LABEL) != old_labels.get(QUEUE_LABEL):
            errors.append(
                _field_error(
                    f"metadata.labels[{QUEUE_LABEL}]",
                    new_labels.get(QUEUE_LABEL, ""),
                    "field is immutable",
                )
            )
        path = f"metadata.labels[{PRIORITY_LABEL}]"
        if not suspended and not old_labels.get(PRIORITY_LABEL) and new_labels.get(PRIORITY_LABEL):
            errors.append(
                _field_error(
                    path,
                    new_labels[PRIORITY_LABEL],
                    "WorkloadPriorityClass cannot be added to a non-suspended workload",
                )
            )
        if old_labels.get(PRIORITY_LABEL) and not new_labels.get(PRIORITY_LABEL):
            errors.append(
                _field_error(path, "", "WorkloadPriorityClass cannot be removed from a workload")
            )
        return errors

    def _cluster_queue_webhook(self, operation: str, cq: dict, old: dict | None) -> None:
        if operation == "DELETE":
            return
        spec = cq.get("spec") or {}
        if operation == "UPDATE" and old is not None and (old.get("spec") or {}) == spec:
            return  # a status write
        errors: list[str] = []
        preemption = spec.get("preemption") or {}
        borrow = (preemption.get("borrowWithinCohort") or {}).get("policy") or "Never"
        if (preemption.get("reclaimWithinCohort") or "Never") == "Never" and borrow != "Never":
            errors.append(
                f"spec.preemption: Invalid value: {json.dumps(preemption, sort_keys=True)}: "
                "reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"
            )
        seen_resources: set[str] = set()
        seen_flavors: set[str] = set()
        for i, group in enumerate(spec.get("resourceGroups") or []):
            for j, name in enumerate(group.get("coveredResources") or []):
                if name in seen_resources:
                    errors.append(
                        f'spec.resourceGroups[{i}].coveredResources[{j}]: Duplicate value: "{name}"'
                    )
                seen_resources.add(name)
            covered = group.get("coveredResources") or []
            for j, flavor in enumerate(group.get("flavors") or []):
                path = f"spec.resourceGroups[{i}].flavors[{j}]"
                if flavor.get("name") in seen_flavors:
                    errors.append(f'{path}.name: Duplicate value: "{flavor.get("name")}"')
                seen_flavors.add(flavor.get("name"))
                for k, quota in enumerate(flavor.get("resources") or []):
                    if k >= len(covered):
                        break
                    rpath = f"{path}.resources[{k}]"
                    if quota.get("name") != covered[k]:
                        errors.append(
                            _field_error(
                                f"{rpath}.name",
                                quota.get("name"),
                                "must match the name in coveredResources",
                            )
                        )
                    for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                        value = quota.get(field)
                        if value is None:
                            continue
                        try:
                            negative = to_milli(value) < 0
                        except ValueError:
                            continue
                        if negative:
                            errors.append(
                                _field_error(
                                    f"{rpath}.{field}",
                                    str(value),
                                    "must be greater than or equal to 0",
                                )
                            )
                    if not spec.get("cohortName"):
                        for field in ("borrowingLimit", "lendingLimit"):
                            if quota.get(field) is not None:
                                errors.append(
                                    _field_error(
                                        f"{rpath}.{field}",
                                        str(quota[field]),
                                        "must be nil when cohort is empty",
                                    )
                                )
                    lending = quota.get("lendingLimit")
                    if lending is not None and spec.get("cohortName"):
                        try:
                            if to_milli(lending) > to_milli(quota.get("nominalQuota") or 0):
                                errors.append(
                                    _field_error(
                                        f"{rpath}.lendingLimit",
                                        str(lending),
                                        "must be less than or equal to the nominalQuota",
                                    )
                                )
                        except ValueError:
                            pass
        if errors:
            raise _deny("vclusterqueue.kb.io", errors)

    def _workload_webhook(self, operation: str, wl: dict, old: dict | None) -> None:
        if operation != "UPDATE" or old is None:
            return
        old_spec, new_spec = old.get("spec") or {}, wl.get("spec") or {}
        errors: list[str] = []
        if _is_true(old, "QuotaReserved") and old_spec.get("queueName") != new_spec.get(
            "queueName"
        ):
            errors.append(
                _field_error("spec.queueName", new_spec.get("queueName"), "field is immutable")
            )
        if errors:
            raise _deny("vworkload.kb.io", errors)

    # ---- main loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            timeout = None
            if self.timers:
                due_in = self.timers[0][0] - self.clock.time()
                timeout = max(0.0, due_in / max(self.clock.speed, 1e-9))
            if self.job_retries:
                retry_in = (min(self.job_retries.values()) - self.clock.time()) / max(
                    self.clock.speed, 1e-9
                )
                timeout = max(0.0, retry_in if timeout is None else min(timeout, retry_in))
            if self.status_pending:
                status_in = max(0.0, self.status_next - time.monotonic())
                timeout = status_in if timeout is None else min(timeout, status_in)
            await wait_event(self.wake, timeout)
            self.wake.clear()
            # Let a burst of writes land before reconciling them together.
            await asyncio.sleep(0.005)
            try:
                self.reconcile()
            except Exception as exc:
                import traceback

                traceback.print_exc()
                print(f"kueue: reconcile failed: {exc!r}", flush=True)
                await asyncio.sleep(0.1)
                self.wake.set()

    def _drain_dirty(self, now: float) -> None:
        """Reconcile every dirty Job and Workload; one that fails is retried a moment later
        (a controller's requeue), the others go on."""
        jobs, self.dirty_jobs = self.dirty_jobs, set()
        for key in self._in_creation_order(jobs):
            try:
                self._reconcile_job(key)
            except Exception as exc:
                print(f"kueue: reconciling Job {key[0]}/{key[1]} failed: {exc!r}", flush=True)
                self._timer_job_retry(key)
        workloads, self.dirty_workloads = self.dirty_workloads, set()
        for key in workloads:
            try:
                self._reconcile_workload(key, now)
            except Exception as exc:
                print(f"kueue: reconciling Workload {key[0]}/{key[1]} failed: {exc!r}", flush=True)
                self._timer(now + 1.0, key)

    def _timer_job_retry(self, key: tuple[str, str]) -> None:
        self.job_retries[key] = self.clock.time() + 1.0

    def _in_creation_order(self, keys) -> list[tuple[str, str]]:
        def order(key):
            job = self.jobs.get(key)
            uid = job["metadata"].get("uid") if job else None
            return (self.job_sequence.get(uid, 0), key)

        return sorted(keys, key=order)

    def _timer(self, at: float, key: tuple[str, str]) -> None:
        current = self.timer_at.get(key)
        if current is not None and current <= at:
            return
        self.timer_at[key] = at
        heapq.heappush(self.timers, (at, key))

    def reconcile(self) -> None:
        now = self.clock.time()
        if self.config_dirty:
            self.config_dirty = False
            self._rebuild_config()
            self.dirty_workloads.update(self.workloads.keys())
        # Timers: PodsReady timeouts and requeue backoffs.
        while self.timers and self.timers[0][0] <= now:
            at, key = heapq.heappop(self.timers)
            if self.timer_at.get(key) == at:
                del self.timer_at[key]
            self.dirty_workloads.add(key)
        for key, at in list(self.job_retries.items()):
            if at <= now:
                del self.job_retries[key]
                self.dirty_jobs.add(key)
        for _ in range(5):
            if not (self.dirty_jobs or self.dirty_workloads):
                break
            self._drain_dirty(now)
        self._schedule(now)
        self._sync_finalizers()
        # Newly admitted or evicted workloads: let their Jobs follow right away.
        for _ in range(3):
            if not self.dirty_jobs:
                break
            self._drain_dirty(self.clock.time())
        # Queue status is an aggregate: write it at most every STATUS_INTERVAL wall seconds.
        if time.monotonic() >= self.status_next:
            self.status_pending = False
            written = self._write_queue_status()
            # Many queues changing at once (a busy cluster): space the passes out so that
            # status writes stay a small share of the work (10 ms of interval per write).
            interval = self.status_interval
            if interval:
                interval = max(interval, 0.01 * written)
            self.status_next = time.monotonic() + interval
        else:
            self.status_pending = True

    # ---- finalizers --------------------------------------------------------------------------
    def _sync_finalizers(self) -> None:
        """kueue.x-k8s.io/resource-in-use on ClusterQueues: deleting one in which workloads hold
        quota waits until they are gone. (Kueue keeps the finalizer on every ClusterQueue and
        drops it within moments of an empty one being deleted; kubesim sets it only while quota is
        held, so deleting an idle ClusterQueue is immediate.)"""
        reserving: set[str] = set()
        for wl in self.engine.workloads.values():
            if wl.usage is not None:
                reserving.add(wl.cluster_queue)
        for name, obj in list(self.cluster_queues.items()):
            meta = obj["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            held = RESOURCE_IN_USE in finalizers
            if name in reserving and not held and not meta.get("deletionTimestamp"):
                finalizers.append(RESOURCE_IN_USE)
            elif held and name not in reserving:
                finalizers.remove(RESOURCE_IN_USE)
            else:
                continue
            try:
                self.store.patch(
                    API,
                    "ClusterQueue",
                    None,
                    name,
                    {"metadata": {"finalizers": finalizers}},
                    field_manager=FIELD_MANAGER,
                )
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise

    # ---- configuration -----------------------------------------------------------------------
    def _rebuild_config(self) -> None:
        flavors = []
        for name, obj in self.flavors.items():
            spec = obj.get("spec") or {}
            flavors.append(
                Flavor(
                    name=name,
                    node_labels=spec.get("nodeLabels") or {},
                    node_taints=spec.get("nodeTaints") or [],
                    tolerations=spec.get("tolerations") or [],
                )
            )
        cqs = []
        for name, obj in self.cluster_queues.items():
            spec = obj.get("spec") or {}
            groups, quotas, missing = [], {}, []
            for group in spec.get("resourceGroups") or []:
                covered = list(group.get("coveredResources") or [])
                names = []
                for flavor in group.get("flavors") or []:
                    fname = flavor["name"]
                    names.append(fname)
                    if fname not in self.flavors:
                        missing.append(fname)
                    for quota in flavor.get("resources") or []:
                        quotas[(fname, quota["name"])] = ResourceQuota(
                            to_milli(quota.get("nominalQuota") or 0),
                            None
                            if quota.get("borrowingLimit") is None
                            else to_milli(quota["borrowingLimit"]),
                            None
                            if quota.get("lendingLimit") is None
                            else to_milli(quota["lendingLimit"]),
                        )
                groups.append(ResourceGroup(covered, names))
            preemption = spec.get("preemption") or {}
            cqs.append(
                ClusterQueue(
                    name=name,
                    cohort=spec.get("cohortName") or None,
                    groups=groups,
                    quotas=quotas,
                    strategy=spec.get("queueingStrategy") or "BestEffortFIFO",
                    within_cluster_queue=preemption.get("withinClusterQueue") or "Never",
                    reclaim_within_cohort=preemption.get("reclaimWithinCohort") or "Never",
                    **_borrow_within_cohort(preemption),
                    namespace_selector=spec.get("namespaceSelector"),
                    stop_policy=spec.get("stopPolicy") or "None",
                    missing_flavors=missing,
                    terminating=bool(obj["metadata"].get("deletionTimestamp")),
                )
            )
        cohort_quotas: dict[str, dict] = {}
        for name, obj in self.cohorts.items():
            for group in (obj.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    for quota in flavor.get("resources") or []:
                        cohort_quotas.setdefault(name, {})[(flavor["name"], quota["name"])] = (
                            to_milli(quota.get("nominalQuota") or 0)
                        )
        self.engine.set_config(cqs, flavors, cohort_quotas)

    # ---- Job integration ---------------------------------------------------------------------
    def _reconcile_job(self, key: tuple[str, str]) -> None:
        job = self.jobs.get(key)
        if job is None:
            return
        meta = job["metadata"]
        uid = meta.get("uid")
        labels = meta.get("labels") or {}
        wl_key = self.wl_by_job_uid.get(uid)
        wl = self.workloads.get(wl_key) if wl_key else None
        if QUEUE_LABEL not in labels and wl is None:
            return
        if meta.get("deletionTimestamp"):
            return
        finished = _job_finished(job)
        if wl is None:
            if finished is None and (_job_suspended(job) or _job_active(job) == 0):
                self._create_workload(job)
            return
        if _is_true(wl, "Finished"):
            return
        if finished is not None:
            success, message = finished
            self._finish_workload(wl, success, message)
            events.record(
                self.store,
                job,
                "FinishedWorkload",
                f"Workload '{wl_key[0]}/{wl_key[1]}' is declared finished",
                component=JOB_CONTROLLER,
            )
            return
        admitted = _is_true(wl, "Admitted")
        evicted = _cond(wl, "Evicted")
        if evicted is not None and evicted.get("status") == "True":
            if not _job_suspended(job):
                self._stop_job(job, wl, evicted.get("message") or "")
            elif _is_true(wl, "QuotaReserved") and _job_active(job) == 0:
                self._clear_admission(wl, evicted)
            return
        if admitted:
            self._sync_pods_ready(job, wl)
        if _job_suspended(job):
            if admitted:
                self._start_job(job, wl)
        elif not _is_true(wl, "QuotaReserved"):
            self._stop_job(job, wl, "Not admitted by cluster queue")

    def _create_workload(self, job: dict) -> None:
        meta = job["metadata"]
        labels = meta.get("labels") or {}
        namespace = meta.get("namespace")
        priority, priority_ref = 0, None
        class_name = labels.get(PRIORITY_LABEL)
        if class_name:
            wpc = self.priority_classes.get(class_name)
            if wpc is None:
                # Kueue cannot compose the Workload; it retries and the Job stays suspended.
                events.record(
                    self.store,
                    job,
                    "ErrWorkloadCompose",
                    f'workloadpriorityclasses.kueue.x-k8s.io "{class_name}" not found',
                    type="Warning",
                    component=JOB_CONTROLLER,
                )
                return
            priority = int(wpc.get("value") or 0)
            priority_ref = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": class_name}
        else:
            pod_class = (
                ((job.get("spec") or {}).get("template") or {})
                .get("spec", {})
                .get("priorityClassName")
            )
            if pod_class:
                pc = self.store.try_get("scheduling.k8s.io/v1", "PriorityClass", None, pod_class)
                if pc is not None:
                    priority = int(pc.get("value") or 0)
                    priority_ref = {
                        "group": "scheduling.k8s.io",
                        "kind": "PriorityClass",
                        "name": pod_class,
                    }
        template = (job.get("spec") or {}).get("template") or {}
        template_meta = template.get("metadata") or {}
        podset_template = {
            "metadata": {
                k: v for k, v in template_meta.items() if k in ("labels", "annotations") and v
            },
            "spec": template.get("spec") or {},
        }
        name = workload_name(meta["name"], meta["uid"])
        spec: dict = {
            "active": True,
            "queueName": labels.get(QUEUE_LABEL),
            "podSets": [
                {"name": "main", "count": _job_pods_count(job), "template": podset_template}
            ],
            "priority": priority,
        }
        if priority_ref:
            spec["priorityClassRef"] = priority_ref
        minimum = (meta.get("annotations") or {}).get(MIN_PARALLELISM_ANNOTATION)
        if minimum is not None:
            spec["podSets"][0]["minCount"] = int(minimum)
        if labels.get(MAX_EXEC_LABEL):
            spec["maximumExecutionTimeSeconds"] = int(labels[MAX_EXEC_LABEL])
        workload = {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": spec,
        }
        if class_name:
            workload["metadata"]["labels"][PRIORITY_LABEL] = class_name
        try:
            self.store.create(workload, namespace=namespace, field_manager=FIELD_MANAGER)
        except ApiError as exc:
            if exc.code == 409:
                return
            events.record(
                self.store,
                job,
                "ErrWorkloadCompose",
                exc.message,
                type="Warning",
                component=JOB_CONTROLLER,
            )
            return
        events.record(
            self.store,
            job,
            "CreatedWorkload",
            f"Created Workload: {namespace}/{name}",
            component=JOB_CONTROLLER,
        )

    def _start_job(self, job: dict, wl: dict) -> None:
        admission = (wl.get("status") or {}).get("admission") or {}
        cq_name = admission.get("clusterQueue")
        node_selector, tolerations = {}, []
        for psa in admission.get("podSetAssignments") or []:
            for flavor_name in dict.fromkeys((psa.get("flavors") or {}).values()):
                flavor = (self.flavors.get(flavor_name) or {}).get("spec") or {}
                node_selector.update(flavor.get("nodeLabels") or {})
                for toleration in flavor.get("tolerations") or []:
                    if toleration not in tolerations:
                        tolerations.append(toleration)
        pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        merged_selector = {**(pod_spec.get("nodeSelector") or {}), **node_selector}
        merged_tolerations = list(pod_spec.get("tolerations") or [])
        for toleration in tolerations:
            if toleration not in merged_tolerations:
                merged_tolerations.append(toleration)
        template_meta = ((job.get("spec") or {}).get("template") or {}).get("metadata") or {}
        pod_labels = {
            **(template_meta.get("labels") or {}),
            PODSET_LABEL: "main",
            CQ_NAME_LABEL: cq_name,
            LQ_NAME_LABEL: (wl.get("spec") or {}).get("queueName"),
        }
        pod_annotations = {
            **(template_meta.get("annotations") or {}),
            WORKLOAD_ANNOTATION: wl["metadata"]["name"],
        }
        patch = {
            "spec": {
                "suspend": False,
                "template": {
                    "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                    "spec": {"nodeSelector": merged_selector or None},
                },
            }
        }
        if merged_tolerations:
            patch["spec"]["template"]["spec"]["tolerations"] = merged_tolerations
        kueue_partial.start_patch(job, wl, patch)
        updated = self._patch_job(job, patch)
        if updated is None:
            return
        events.record(
            self.store,
            updated,
            "Started",
            f"Admitted by clusterQueue {cq_name}",
            component=JOB_CONTROLLER,
        )

    def _stop_job(self, job: dict, wl: dict, message: str) -> None:
        """Suspend and restore the pod template Kueue changed, from the Workload's pod set."""
        podsets = (wl.get("spec") or {}).get("podSets") or []
        original = podsets[0].get("template") if podsets else {}
        original_spec = (original or {}).get("spec") or {}
        original_meta = (original or {}).get("metadata") or {}
        current = (job.get("spec") or {}).get("template") or {}
        current_meta = current.get("metadata") or {}
        patch = {
            "spec": {
                "suspend": True,
                "template": {
                    "metadata": {
                        "labels": _restore_map(
                            current_meta.get("labels"), original_meta.get("labels")
                        ),
                        "annotations": _restore_map(
                            current_meta.get("annotations"), original_meta.get("annotations")
                        ),
                    },
                    "spec": {
                        "nodeSelector": _restore_map(
                            (current.get("spec") or {}).get("nodeSelector"),
                            original_spec.get("nodeSelector"),
                        ),
                        "tolerations": original_spec.get("tolerations"),
                    },
                },
            }
        }
        kueue_partial.stop_patch(job, patch)
        updated = self._patch_job(job, patch)
        if updated is None:
            return
        if (updated.get("status") or {}).get("startTime"):
            # Kueue resets startTime so the scheduling directives may change on the next start.
            cleared = self._patch_job(job, {"status": {"startTime": None}}, subresource="status")
            updated = cleared or updated
        events.record(self.store, updated, "Stopped", message, component=JOB_CONTROLLER)

    def _patch_job(self, job: dict, patch: dict, *, subresource: str | None = None) -> dict | None:
        """Merge-patch a Job as Kueue's job reconciler; None when it is gone or changed meanwhile
        (the next event for it brings the reconciler back)."""
        meta = job["metadata"]
        try:
            return self.store.patch(
                "batch/v1",
                "Job",
                meta["namespace"],
                meta["name"],
                patch,
                subresource=subresource,
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.code in (404, 409):
                return None
            raise

    def _sync_pods_ready(self, job: dict, wl: dict) -> None:
        status = job.get("status") or {}
        ready = int(status.get("ready") or 0) + int(status.get("succeeded") or 0)
        pods_ready = ready >= _job_pods_count(job)
        current = _cond(wl, "PodsReady")
        if pods_ready:
            reason = "Started"
            if current and current.get("reason") in ("WaitForRecovery", "Recovered"):
                reason = "Recovered"
            condition = _condition("PodsReady", True, reason, READY_MSG)
        elif current and (
            current.get("status") == "True" or current.get("reason") == "WaitForRecovery"
        ):
            condition = _condition("PodsReady", False, "WaitForRecovery", RECOVERY_MSG)
        else:
            condition = _condition("PodsReady", False, "WaitForStart", NOT_READY_MSG)
        self._patch_conditions(wl, [condition])

    # ---- Workload controller -----------------------------------------------------------------
    def _reconcile_workload(self, key: tuple[str, str], now: float) -> None:
        obj = self.workloads.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            self.engine.remove(key)
            self.pending_messages.pop(key, None)
            self.inadmissible.pop(key, None)
            return
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        if _is_true(obj, "Finished"):
            self.engine.remove(key)
            return
        reserved = _is_true(obj, "QuotaReserved") and status.get("admission")
        requeued = _cond(obj, "Requeued")
        if spec.get("active") is False:
            # Deactivated (e.g. by the portal to stop a job): evict, never requeue.
            if not _is_true(obj, "Evicted"):
                self._evict(obj, "Deactivated", "The workload is deactivated")
                return
            if not reserved:
                self.engine.remove(key)
                return
        elif (
            requeued
            and requeued.get("status") == "False"
            and requeued.get("reason") == ("Deactivated")
        ):
            self._patch_conditions(
                obj, [_condition("Requeued", True, "Reactivated", "The workload was reactivated")]
            )
            return
        cq_name = (status.get("admission") or {}).get("clusterQueue") if reserved else None
        cq_spec = (self.cluster_queues.get(cq_name) or {}).get("spec") or {}
        if (
            reserved
            and cq_spec.get("stopPolicy") == "HoldAndDrain"
            and not _is_true(obj, "Evicted")
        ):
            self._evict(obj, "ClusterQueueStopped", "The ClusterQueue is stopped")
            return
        if (
            requeued
            and requeued.get("status") == "False"
            and requeued.get("reason") == ("ClusterQueueStopped")
        ):
            lq = self.local_queues.get((key[0], spec.get("queueName") or "")) or {}
            lq_cq = self.cluster_queues.get((lq.get("spec") or {}).get("clusterQueue")) or {}
            if (lq_cq.get("spec") or {}).get("stopPolicy") in (None, "None") and lq_cq:
                self._patch_conditions(
                    obj,
                    [
                        _condition(
                            "Requeued",
                            True,
                            "ClusterQueueRestarted",
                            "The ClusterQueue was restarted after being stopped",
                        )
                    ],
                )
                return
        # Requeue backoff after a PodsReady timeout.
        requeue_at = _parse_time((status.get("requeueState") or {}).get("requeueAt"))
        if not reserved and requeued and requeued.get("status") == "False" and requeue_at:
            if requeue_at > now:
                self._timer(requeue_at, key)
            else:
                self._patch_conditions(
                    obj,
                    [
                        _condition(
                            "Requeued", True, "BackoffFinished", "The workload backoff was finished"
                        )
                    ],
                )
        # PodsReady timeout for admitted workloads.
        if reserved and _is_true(obj, "Admitted") and not _is_true(obj, "PodsReady"):
            evicted = _is_true(obj, "Evicted")
            admitted_at = _parse_time((_cond(obj, "Admitted") or {}).get("lastTransitionTime"))
            pods_ready = _cond(obj, "PodsReady")
            if pods_ready and pods_ready.get("reason") == "WaitForRecovery":
                admitted_at = max(admitted_at, _parse_time(pods_ready.get("lastTransitionTime")))
            deadline = admitted_at + self.pods_ready_timeout
            if not evicted:
                if deadline <= now:
                    self._evict_pods_ready_timeout(obj, now)
                    return
                self._timer(deadline, key)
        info = self._engine_workload(obj, bool(reserved), requeue_at)
        if info is None:
            self.engine.remove(key)
            return
        self.engine.upsert(info)

    def _engine_workload(self, obj: dict, reserved: bool, requeue_at: float) -> Workload | None:
        key = _key(obj)
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        namespace, name = key
        lq_name = spec.get("queueName") or ""
        if reserved:
            cq_name = (status.get("admission") or {}).get("clusterQueue")
        else:
            lq = self.local_queues.get((namespace, lq_name))
            if lq is None:
                self._inadmissible(obj, "Inadmissible", f"LocalQueue {lq_name} doesn't exist")
                return None
            cq_name = (lq.get("spec") or {}).get("clusterQueue")
            cq = self.cluster_queues.get(cq_name)
            if cq is None:
                self._inadmissible(obj, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
                return None
            ns_labels = (self.namespaces.get(namespace) or {}).get("metadata", {}).get(
                "labels"
            ) or {"kubernetes.io/metadata.name": namespace}
            if not _selector_matches((cq.get("spec") or {}).get("namespaceSelector"), ns_labels):
                self._inadmissible(
                    obj, "Inadmissible", "workload namespace doesn't match ClusterQueue selector"
                )
                return None
            if (lq.get("spec") or {}).get("stopPolicy", "None") not in ("None", None):
                self._inadmissible(obj, "Inadmissible", f"LocalQueue {lq_name} is inactive")
                return None
        self.inadmissible.pop(key, None)
        podsets = []
        for ps in spec.get("podSets") or []:
            pod_spec = (ps.get("template") or {}).get("spec") or {}
            podsets.append(
                PodSet(
                    name=ps.get("name") or "main",
                    count=int(ps.get("count") if ps.get("count") is not None else 1),
                    requests=requests_of_pod_spec(pod_spec),
                    node_selector=pod_spec.get("nodeSelector") or {},
                    tolerations=pod_spec.get("tolerations") or [],
                    node_affinity_terms=_required_node_affinity_terms(pod_spec),
                )
            )
        timestamp = _parse_time(obj["metadata"].get("creationTimestamp"))
        evicted = _cond(obj, "Evicted")
        if evicted and evicted.get("reason") == "PodsReadyTimeout":
            timestamp = _parse_time(evicted.get("lastTransitionTime")) or timestamp
        usage = None
        if reserved:
            usage = {}
            for psa in (status.get("admission") or {}).get("podSetAssignments") or []:
                flavors = psa.get("flavors") or {}
                for resource, amount in (psa.get("resourceUsage") or {}).items():
                    fr = (flavors.get(resource, ""), resource)
                    usage[fr] = usage.get(fr, 0) + to_milli(amount)
        requeued = _cond(obj, "Requeued")
        eligible_at = 0.0
        if requeued and requeued.get("status") == "False" and requeue_at:
            eligible_at = requeue_at
        workload = Workload(
            namespace=namespace,
            name=name,
            uid=obj["metadata"].get("uid", ""),
            cluster_queue=cq_name,
            local_queue=lq_name,
            priority=int(spec.get("priority") or 0),
            timestamp=timestamp,
            sequence=self.job_sequence.get(
                (obj["metadata"].get("labels") or {}).get(JOB_UID_LABEL, ""),
                self.first_seen.get(key, 0),
            ),
            podsets=podsets,
            job_uid=(obj["metadata"].get("labels") or {}).get(JOB_UID_LABEL, ""),
            usage=usage,
            reserved_at=_parse_time((_cond(obj, "QuotaReserved") or {}).get("lastTransitionTime")),
            evicted=bool(evicted and evicted.get("status") == "True"),
            eligible_at=eligible_at,
        )
        return workload

    def _inadmissible(self, obj: dict, reason: str, message: str) -> None:
        key = _key(obj)
        if self.inadmissible.get(key) == (reason, message):
            return
        self.inadmissible[key] = (reason, message)
        self._set_pending(obj, reason, message)

    def _set_pending(
        self, obj: dict, reason: str, message: str, workload: Workload | None = None
    ) -> None:
        current = _cond(obj, "QuotaReserved")
        if current and current.get("status") == "False" and current.get("message") == message:
            return
        now_text = rfc3339(self.clock.now())
        conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
        generation = obj["metadata"].get("generation")
        _set_condition(
            conditions, _condition("QuotaReserved", False, reason, message, generation), now_text
        )
        status: dict = {"conditions": conditions}
        if workload is not None:
            # What the scheduler tried to fit, per pod set (Kueue's status.resourceRequests).
            status["resourceRequests"] = [
                {
                    "name": ps.name,
                    "resources": {r: format_milli(r, v) for r, v in ps.total().items()},
                }
                for ps in workload.podsets
            ]
        self._patch_status(obj, status)
        events.record(self.store, obj, reason, message, type="Warning", component=ADMISSION)

    # ---- scheduler ---------------------------------------------------------------------------
    def _schedule(self, now: float) -> None:
        decisions = kueue_partial.retry_partial(self, self.engine.schedule(now), now)
        for decision in decisions:
            obj = self.workloads.get(decision.workload.key)
            if obj is None:
                continue
            if decision.kind == "admit":
                self._admit(obj, decision, now)
            else:
                self._set_pending(obj, decision.reason, decision.message, decision.workload)
                for target in decision.targets:
                    victim = self.workloads.get(target.workload.key)
                    if victim is not None and not _is_true(victim, "Evicted"):
                        self._preempt(victim, decision, target)

    def _admit(self, obj: dict, decision: Decision, now: float) -> None:
        wl = decision.workload
        assignment = decision.assignment
        podset_assignments = []
        for ps in assignment.podsets:
            podset_assignments.append(
                {
                    "name": ps.name,
                    "flavors": dict(ps.flavors),
                    "resourceUsage": {r: format_milli(r, v) for r, v in ps.resource_usage.items()},
                    "count": ps.count,
                }
            )
        admission = {"clusterQueue": wl.cluster_queue, "podSetAssignments": podset_assignments}
        now_text = rfc3339(self.clock.now())
        conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
        generation = obj["metadata"].get("generation")
        _set_condition(
            conditions,
            _condition(
                "QuotaReserved",
                True,
                "QuotaReserved",
                f"Quota reserved in ClusterQueue {wl.cluster_queue}",
                generation,
            ),
            now_text,
        )
        for ctype in ("Evicted", "Preempted"):
            previous = next((c for c in conditions if c["type"] == ctype), None)
            if previous and previous.get("status") == "True":
                _set_condition(
                    conditions,
                    _condition(
                        ctype,
                        False,
                        "QuotaReserved",
                        "Previously: " + previous["message"],
                        generation,
                    ),
                    now_text,
                )
        _set_condition(
            conditions,
            _condition("Admitted", True, "Admitted", "The workload is admitted", generation),
            now_text,
        )
        _set_condition(
            conditions, _condition("PodsReady", False, "WaitForStart", NOT_READY_MSG), now_text
        )
        status = {"admission": admission, "conditions": conditions, "resourceRequests": None}
        updated = self._patch_status(obj, status)
        if updated is None:
            self.engine.release(wl.key)
            return
        queued_since = _parse_time(obj["metadata"].get("creationTimestamp"))
        requeued = _cond(obj, "Requeued")
        if requeued and requeued.get("lastTransitionTime"):
            queued_since = _parse_time(requeued["lastTransitionTime"])
        wait = max(0.0, now - queued_since)
        events.record(
            self.store,
            updated,
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {wl.cluster_queue}, "
            f"wait time since queued was {wait:.0f}s",
            component=ADMISSION,
        )
        events.record(
            self.store,
            updated,
            "Admitted",
            f"Admitted by ClusterQueue {wl.cluster_queue}, wait time since reservation was 0s",
            component=ADMISSION,
        )
        self._timer(now + self.pods_ready_timeout, wl.key)

    def _preempt(self, victim: dict, decision: Decision, target) -> None:
        preemptor = decision.workload
        preemptor_cq = self.engine.cluster_queues.get(preemptor.cluster_queue)
        victim_cq_name = target.workload.cluster_queue
        victim_cq = self.engine.cluster_queues.get(victim_cq_name)
        message = preemption_message(
            preemptor,
            target.reason,
            cq_path(preemptor_cq, preemptor.cluster_queue),
            cq_path(victim_cq, victim_cq_name),
        )
        self._evict(
            victim,
            "Preempted",
            message,
            extra=[_condition("Preempted", True, target.reason, message)],
        )
        suffix = (
            f"; preemptor effective priority: {preemptor.priority} (base: {preemptor.priority}, "
            f"boost: 0); preemptee effective priority: {target.workload.priority} "
            f"(base: {target.workload.priority}, boost: 0)"
        )
        events.record(self.store, victim, "Preempted", message + suffix, component=ADMISSION)
        preemptor_obj = self.workloads.get(preemptor.key)
        if preemptor_obj is not None:
            events.record(
                self.store,
                preemptor_obj,
                "PreemptedWorkload",
                f"Preempted workload {victim['metadata']['namespace']}/"
                f"{victim['metadata']['name']} "
                f"(UID: {victim['metadata'].get('uid')}) in ClusterQueue {victim_cq_name}" + suffix,
                component=ADMISSION,
            )

    def _evict_pods_ready_timeout(self, obj: dict, now: float) -> None:
        key = _key(obj)
        state = dict((obj.get("status") or {}).get("requeueState") or {})
        count = int(state.get("count") or 0) + 1
        requeue_at = now + backoff_seconds(count, int(self.backoff_base), int(self.backoff_max))
        state = {
            "count": count,
            "requeueAt": rfc3339(datetime.datetime.fromtimestamp(requeue_at, datetime.UTC)),
        }
        self._evict(
            obj,
            "PodsReadyTimeout",
            f"Exceeded the PodsReady timeout {key[0]}/{key[1]}",
            requeue_state=state,
        )

    def _evict(self, obj: dict, reason: str, message: str, *, extra=(), requeue_state=None):
        now_text = rfc3339(self.clock.now())
        conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
        _set_condition(
            conditions,
            _condition("Evicted", True, reason, message, obj["metadata"].get("generation")),
            now_text,
        )
        for condition in extra:
            _set_condition(conditions, condition, now_text)
        stats = (obj.get("status") or {}).get("schedulingStats") or {}
        evictions = [dict(e) for e in stats.get("evictions") or []]
        for entry in evictions:
            if entry.get("reason") == reason and not entry.get("underlyingCause"):
                entry["count"] = int(entry.get("count") or 0) + 1
                break
        else:
            evictions.append({"reason": reason, "underlyingCause": "", "count": 1})
        status: dict = {"conditions": conditions, "schedulingStats": {"evictions": evictions}}
        if requeue_state is not None:
            status["requeueState"] = requeue_state
        updated = self._patch_status(obj, status)
        if updated is not None:
            events.record(
                self.store, updated, f"EvictedDueTo{reason}", message, component=WORKLOAD_CONTROLLER
            )

    def _clear_admission(self, wl: dict, evicted: dict) -> None:
        """The Job stopped after an eviction: release the quota and requeue the Workload."""
        reason = evicted.get("reason") or ""
        message = evicted.get("message") or ""
        now_text = rfc3339(self.clock.now())
        conditions = [dict(c) for c in (wl.get("status") or {}).get("conditions") or []]
        generation = wl["metadata"].get("generation")
        _set_condition(
            conditions,
            _condition("Requeued", reason == "Preempted", reason, message, generation),
            now_text,
        )
        _set_condition(
            conditions, _condition("QuotaReserved", False, "Pending", message, generation), now_text
        )
        _set_condition(
            conditions,
            _condition(
                "Admitted", False, "NoReservation", "The workload has no reservation", generation
            ),
            now_text,
        )
        _set_condition(
            conditions, _condition("PodsReady", False, "WaitForStart", NOT_READY_MSG), now_text
        )
        self._patch_status(wl, {"admission": None, "conditions": conditions})
        self.engine.release(_key(wl))

    def _finish_workload(self, wl: dict, success: bool, message: str) -> None:
        condition = _condition(
            "Finished",
            True,
            "Succeeded" if success else "Failed",
            message,
            wl["metadata"].get("generation"),
        )
        self._patch_conditions(wl, [condition])
        self.engine.remove(_key(wl))

    # ---- writes ------------------------------------------------------------------------------
    def _patch_conditions(self, obj: dict, new_conditions: list[dict]) -> dict | None:
        now_text = rfc3339(self.clock.now())
        conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
        changed = False
        for condition in new_conditions:
            changed = _set_condition(conditions, condition, now_text) or changed
        if not changed:
            return obj
        return self._patch_status(obj, {"conditions": conditions})

    def _patch_status(self, obj: dict, status: dict) -> dict | None:
        namespace, name = _key(obj)
        try:
            updated = self.store.patch(
                API,
                "Workload",
                namespace,
                name,
                {"status": status},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return updated

    # ---- queue status ------------------------------------------------------------------------
    def _write_queue_status(self) -> int:
        """Write the ClusterQueue and LocalQueue statuses that changed; how many were written."""
        written = 0
        counts: dict[str, list[int]] = {}
        lq_counts: dict[tuple[str, str], list[int]] = {}
        lq_usage: dict[tuple[str, str], dict] = {}
        for key in self.unfinished:
            obj = self.workloads[key]
            status = obj.get("status") or {}
            reserved = _is_true(obj, "QuotaReserved") and status.get("admission")
            lq_key = (key[0], (obj.get("spec") or {}).get("queueName") or "")
            if reserved:
                cq_name = status["admission"].get("clusterQueue")
            else:
                lq = self.local_queues.get(lq_key)
                cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
            if (obj.get("spec") or {}).get("active") is False and not reserved:
                continue
            cq_counts = counts.setdefault(cq_name, [0, 0, 0])
            per_lq = lq_counts.setdefault(lq_key, [0, 0, 0])
            if reserved:
                cq_counts[1] += 1
                per_lq[1] += 1
                if _is_true(obj, "Admitted"):
                    cq_counts[2] += 1
                    per_lq[2] += 1
                usage = lq_usage.setdefault(lq_key, {})
                for psa in status["admission"].get("podSetAssignments") or []:
                    flavors = psa.get("flavors") or {}
                    for resource, amount in (psa.get("resourceUsage") or {}).items():
                        fr = (flavors.get(resource, ""), resource)
                        usage[fr] = usage.get(fr, 0) + to_milli(amount)
            else:
                cq_counts[0] += 1
                per_lq[0] += 1
        for name, obj in self.cluster_queues.items():
            cq = self.engine.cluster_queues.get(name)
            if cq is None:
                continue
            pending, reserving, admitted = counts.get(name, [0, 0, 0])
            flavors_usage = []
            for group in cq.groups:
                for flavor in group.flavors:
                    resources = []
                    for resource in group.covered:
                        fr = (flavor, resource)
                        total = cq.usage.get(fr, 0)
                        borrowed = max(0, total - cq.quota(fr).nominal)
                        resources.append(
                            {
                                "name": resource,
                                "total": format_milli(resource, total),
                                "borrowed": format_milli(resource, borrowed),
                            }
                        )
                    flavors_usage.append({"name": flavor, "resources": resources})
            if cq.active:
                active = _condition("Active", True, "Ready", "Can admit new workloads")
            elif cq.terminating:
                active = _condition(
                    "Active",
                    False,
                    "Terminating",
                    "Can't admit new workloads; clusterQueue is terminating",
                )
            elif cq.missing_flavors:
                active = _condition(
                    "Active",
                    False,
                    "FlavorNotFound",
                    "Can't admit new workloads: references missing ResourceFlavor(s): "
                    + ",".join(cq.missing_flavors)
                    + ".",
                )
            else:
                active = _condition(
                    "Active", False, "Stopped", "Can't admit new workloads: is stopped."
                )
            status = {
                "pendingWorkloads": pending,
                "reservingWorkloads": reserving,
                "admittedWorkloads": admitted,
                "flavorsReservation": flavors_usage,
                "flavorsUsage": flavors_usage,
            }
            written += self._write_status_if_changed(
                "ClusterQueue", None, name, obj, status, active
            )
        for key, obj in self.local_queues.items():
            pending, reserving, admitted = lq_counts.get(key, [0, 0, 0])
            cq_name = (obj.get("spec") or {}).get("clusterQueue")
            cq = self.engine.cluster_queues.get(cq_name)
            usage = lq_usage.get(key, {})
            flavors_usage = []
            if cq is not None:
                for group in cq.groups:
                    for flavor in group.flavors:
                        flavors_usage.append(
                            {
                                "name": flavor,
                                "resources": [
                                    {
                                        "name": r,
                                        "total": format_milli(r, usage.get((flavor, r), 0)),
                                    }
                                    for r in group.covered
                                ],
                            }
                        )
            if (obj.get("spec") or {}).get("stopPolicy") not in (None, "None"):
                active = _condition("Active", False, "Stopped", "LocalQueue is stopped")
            elif cq is None:
                active = _condition(
                    "Active",
                    False,
                    "ClusterQueueDoesNotExist",
                    "Can't submit new workloads to clusterQueue",
                )
            elif not cq.active:
                active = _condition(
                    "Active",
                    False,
                    "ClusterQueueIsInactive",
                    "Can't submit new workloads to clusterQueue",
                )
            else:
                active = _condition(
                    "Active", True, "Ready", "Can submit new workloads to localQueue"
                )
            status = {
                "pendingWorkloads": pending,
                "reservingWorkloads": reserving,
                "admittedWorkloads": admitted,
                "flavorsReservation": flavors_usage,
                "flavorsUsage": flavors_usage,
            }
            written += self._write_status_if_changed(
                "LocalQueue", key[0], key[1], obj, status, active
            )
        return written

    def _write_status_if_changed(self, kind, namespace, name, obj, status, active) -> int:
        fingerprint = json.dumps([status, active], sort_keys=True)
        cache_key = (kind, namespace, name, obj["metadata"].get("uid"))
        if self.written_status.get(cache_key) == fingerprint:
            return 0
        conditions = [dict(c) for c in (obj.get("status") or {}).get("conditions") or []]
        _set_condition(conditions, active, rfc3339(self.clock.now()))
        try:
            self.store.patch(
                API,
                kind,
                namespace,
                name,
                {"status": {**status, "conditions": conditions}},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
            return 0
        self.written_status[cache_key] = fingerprint
        return 1

    # ---- visibility API ----------------------------------------------------------------------
    def pending_summary(self, cq_name: str, lq: tuple[str, str] | None, limit: int, offset: int):
        items = []
        if cq_name in self.engine.cluster_queues:
            per_lq: dict[tuple[str, str], int] = {}
            for position, wl in enumerate(self.engine.pending_in(cq_name)):
                lq_key = (wl.namespace, wl.local_queue)
                lq_position = per_lq.get(lq_key, 0)
                per_lq[lq_key] = lq_position + 1
                if lq is not None and lq_key != lq:
                    continue
                obj = self.workloads.get(wl.key) or {"metadata": {}}
                meta = obj["metadata"]
                items.append(
                    {
                        "metadata": {
                            "name": wl.name,
                            "namespace": wl.namespace,
                            "creationTimestamp": meta.get("creationTimestamp"),
                            "ownerReferences": meta.get("ownerReferences") or [],
                        },
                        "priority": wl.priority,
                        "localQueueName": wl.local_queue,
                        "positionInClusterQueue": position,
                        "positionInLocalQueue": lq_position,
                    }
                )
        return {
            "kind": "PendingWorkloadsSummary",
            "apiVersion": f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}",
            "metadata": {"creationTimestamp": None},
            "items": items[offset : offset + limit],
        }

    async def _visibility_cq(self, request):
        from aiohttp import web

        name = request.match_info["name"]
        if name not in self.cluster_queues:
            err = ApiError(404, "NotFound", f'clusterqueues.{VISIBILITY_GROUP} "{name}" not found')
            return web.json_response(err.status(), status=404)
        limit, offset = _paging(request)
        return web.json_response(self.pending_summary(name, None, limit, offset))

    async def _visibility_lq(self, request):
        from aiohttp import web

        namespace, name = request.match_info["namespace"], request.match_info["name"]
        lq = self.local_queues.get((namespace, name))
        if lq is None:
            err = ApiError(404, "NotFound", f'localqueues.{VISIBILITY_GROUP} "{name}" not found')
            return web.json_response(err.status(), status=404)
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        limit, offset = _paging(request)
        return web.json_response(self.pending_summary(cq_name, (namespace, name), limit, offset))


def _paging(request) -> tuple[int, int]:
    def number(name: str, default: int) -> int:
        try:
            return max(0, int(request.query.get(name, default)))
        except ValueError:
            return default

    return number("limit", 1000), number("offset", 0)


def _visibility_resources() -> list[dict]:
    return [
        {
            "name": "clusterqueues",
            "singularName": "",
            "namespaced": False,
            "kind": "ClusterQueue",
            "verbs": ["get"],
        },
        {
            "name": "clusterqueues/pendingworkloads",
            "singularName": "",
            "namespaced": False,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
        {
            "name": "localqueues",
            "singularName": "",
            "namespaced": True,
            "kind": "LocalQueue",
            "verbs": ["get"],
        },
        {
            "name": "localqueues/pendingworkloads",
            "singularName": "",
            "namespaced": True,
            "kind": "PendingWorkloadsSummary",
            "verbs": ["get"],
        },
    ]


def _borrow_within_cohort(preemption: dict) -> dict:
    """ClusterQueue fields for preemption.borrowWithinCohort (policy, maxPriorityThreshold)."""
    borrow = preemption.get("borrowWithinCohort") or {}
    threshold = borrow.get("maxPriorityThreshold")
    return {
        "borrow_within_cohort": borrow.get("policy") or "Never",
        "borrow_max_priority": None if threshold is None else int(threshold),
    }


def _required_node_affinity_terms(pod_spec: dict) -> list | None:
    """The pod's required node affinity terms (None: no required node affinity)."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    return required.get("nodeSelectorTerms")


def _restore_map(current: dict | None, original: dict | None) -> dict | None:
    """A merge patch that turns the map `current` back into `original` (None: nothing to do)."""
    original = original or {}
    patch: dict = {key: None for key in current or {} if key not in original}
    patch.update(original)
    return patch or None
