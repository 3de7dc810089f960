"""Turn watched cluster objects into portal writes (through jobs.services only).

One thread consumes the informers' changes in order, keeps the latest object of every watched
collection, and after each batch re-evaluates the jobs the batch touched: the snapshot is built
from the cached objects and mapped by jobs.status (the one mapping), and the result is written as
a compare-and-set on the state the processor read. Kubernetes Events become timeline lines keyed
by their uid (folded, never duplicated); pods become JobPod rows; ClusterQueue and Volcano Queue
status become QueueUsage rows; waiting jobs get their queue position and a plain explanation.
"""

import dataclasses
import logging
import queue
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connection
from django.db.utils import DatabaseError

from jobs import explain
from jobs.manifests import job_selector
from jobs.models import Job, WatchCursor
from jobs.services import (
    InvalidTransition,
    job_mark_for_cleanup,
    job_note_status,
    job_record_cluster_event,
    job_record_pods,
    job_set_queue_info,
    job_transition,
)
from jobs.states import JobState, can_transition
from jobs.status import (
    ClusterSnapshot,
    failing_pod,
    job_id_of,
    map_with_pods,
    owner_uids,
    pod_record,
)
from jobs.watcher import queues
from jobs.watcher.informer import Change
from portal.kube import apply as kube
from portal.kube.apply import KubeError

log = logging.getLogger(__name__)
SOURCE = "watcher"

BATCH_JOB = "batch/v1/Job"
VCJOB = "batch.volcano.sh/v1alpha1/Job"
WORKLOAD = "kueue.x-k8s.io/v1beta2/Workload"
PODGROUP = "scheduling.volcano.sh/v1beta1/PodGroup"
POD = "v1/Pod"
EVENT = "v1/Event"
CLUSTER_QUEUE = "kueue.x-k8s.io/v1beta2/ClusterQueue"
VOLCANO_QUEUE = "scheduling.volcano.sh/v1beta1/Queue"
JOB_NAME = re.compile(r"gp-job-(\d+)\b")
POSITION_EVERY = 2.0
CURSOR_EVERY = 2.0
LOG_TAIL_LINES = 20


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _uid(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("uid") or ""


class Processor(threading.Thread):
    def __init__(
        self,
        *,
        stop: threading.Event,
        is_leader: Callable[[], bool],
        log_tail: Callable[[str, str, str], str] | None = None,
    ):
        super().__init__(name="watch-processor", daemon=True)
        self.inbox: queue.Queue[Change] = queue.Queue()
        self.stop_event = stop
        self.is_leader = is_leader
        self.log_tail = log_tail
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = defaultdict(dict)
        self.uid_to_job: dict[str, int] = {}
        self.pods_by_job: dict[int, set[tuple[str, str]]] = defaultdict(set)
        self.workload_by_owner: dict[str, tuple[str, str]] = {}
        self.dirty: set[int] = set()
        self.events: dict[str, dict[str, Any]] = {}  # uid -> newest Event
        self.queues_dirty = False
        self.cursors: dict[str, str] = {}
        self.saved_cursors: dict[str, str] = {}
        self.written_pods: dict[str, Any] = {}
        self.job_namespaces: dict[int, str | None] = {}
        self.positions: dict[int, tuple[int, int]] = {}
        self.processed = 0
        self.last_positions = 0.0
        self.last_cursor = 0.0
        self.lag_samples: list[float] = []

    # ------------------------------------------------------------------ intake
    def put(self, change: Change) -> None:
        self.inbox.put(change)

    def _absorb(self, change: Change) -> None:
        self.processed += 1
        if change.resource_version:
            self.cursors[change.collection] = change.resource_version
        if change.type in ("BOOKMARK",):
            return
        if change.type == "RELISTED":
            if change.collection in (BATCH_JOB, VCJOB, WORKLOAD, PODGROUP, POD):
                # Whatever happened while we were not looking: re-evaluate every live job.
                self.dirty.update(Job.objects.active().values_list("pk", flat=True).order_by())
            return
        obj = change.obj
        collection = change.collection
        if collection == EVENT:
            if change.type != "DELETED" and _uid(obj):
                self.events[_uid(obj)] = obj
            return
        if collection in (CLUSTER_QUEUE, VOLCANO_QUEUE):
            store = self.objects[collection]
            if change.type == "DELETED":
                store.pop(_key(obj), None)
            else:
                store[_key(obj)] = obj
            self.queues_dirty = True
            return
        store = self.objects[collection]
        key = _key(obj)
        old = store.get(key)
        if change.type == "DELETED":
            store.pop(key, None)
            obj = old or obj
        else:
            store[key] = obj
        if collection == WORKLOAD and change.type != "DELETED":
            for uid in owner_uids(obj):
                self.workload_by_owner[uid] = key
        job_id = self._job_of(obj)
        if collection == POD and job_id is not None:
            if change.type == "DELETED":
                self.pods_by_job[job_id].discard(key)
            else:
                self.pods_by_job[job_id].add(key)
        if job_id is not None:
            if _uid(obj):
                self.uid_to_job[_uid(obj)] = job_id
            self.dirty.add(job_id)

    def _job_of(self, obj: dict[str, Any]) -> int | None:
        job_id = job_id_of(obj)
        if job_id is not None:
            return job_id
        for uid in owner_uids(obj):
            if uid in self.uid_to_job:
                return self.uid_to_job[uid]
        return None

    # ------------------------------------------------------------------ snapshot
    def snapshot(self, job: Job) -> ClusterSnapshot:
        ns = job.project.namespace
        name = f"gp-job-{job.pk}"
        pods = [
            self.objects[POD][k] for k in sorted(self.pods_by_job.get(job.pk, ())) if k[0] == ns
        ]
        if job.backend == "volcano":
            vcjob = self.objects[VCJOB].get((ns, name))
            podgroup = None
            if vcjob is not None:
                uid = _uid(vcjob)
                for pg in self.objects[PODGROUP].values():
                    if job_id_of(pg) == job.pk or uid in owner_uids(pg):
                        podgroup = pg
                        break
            return ClusterSnapshot(
                backend="volcano",
                primary=vcjob,
                podgroup=podgroup,
                pods=pods,
                expected_pods=job.pods,
            )
        batch = self.objects[BATCH_JOB].get((ns, name))
        workload = None
        if batch is not None:
            key = self.workload_by_owner.get(_uid(batch))
            workload = self.objects[WORKLOAD].get(key) if key else None
        return ClusterSnapshot(
            backend="kueue", primary=batch, workload=workload, pods=pods, expected_pods=job.pods
        )

    # ------------------------------------------------------------------ writes
    def _sync_pods(self, job: Job, snapshot: ClusterSnapshot) -> None:
        records = [pod_record(p) for p in snapshot.pods]
        written = self.written_pods.setdefault(job.pk, {})
        changed = [r for r in records if written.get(r.uid) != r]
        present = {r.uid for r in records}
        if not changed and set(written) <= present:
            return
        job_record_pods(job_id=job.pk, records=changed, present_uids=present)
        self.written_pods[job.pk] = {r.uid: r for r in records}

    def _with_fresh_pods(self, job: Job, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        try:
            pods = kube.list_objects(
                "v1", "Pod", namespace=job.project.namespace, label_selector=job_selector(job.pk)
            )
        except KubeError:
            return snapshot
        return dataclasses.replace(snapshot, pods=pods)

    def _failure_message(self, message: str, snapshot: ClusterSnapshot, job: Job) -> str:
        found = failing_pod(snapshot.pods)
        if not found or self.log_tail is None:
            return message
        pod, container = found
        tail = self.log_tail(job.project.namespace, pod, container)
        if not tail:
            return message
        return f"{message}\nLast lines of the log of {pod}:\n{tail}"

    def sync_job(self, job_id: int) -> None:
        job = Job.objects.select_related("project", "pool").filter(pk=job_id).first()
        if job is None:
            return
        snapshot = self.snapshot(job)
        self._sync_pods(job, snapshot)
        if job.is_terminal:
            return
        reading = map_with_pods(snapshot)
        if reading.state is None:
            return
        if reading.state == JobState.FAILED and failing_pod(snapshot.pods) is None:
            # The pod's last status may still be on its way on the Pod stream: read the pods
            # now so the failure names the exit code.
            snapshot = self._with_fresh_pods(job, snapshot)
            reading = map_with_pods(snapshot)
            self._sync_pods(job, snapshot)
        if reading.state == job.state:
            job_note_status(job, reason=reading.reason, message=reading.message)
        elif can_transition(job.state, reading.state):
            message = reading.message
            if reading.state == JobState.FAILED:
                message = self._failure_message(message, snapshot, job)
            try:
                job_transition(
                    job,
                    to=reading.state,
                    reason=reading.reason,
                    message=message,
                    source=SOURCE,
                    expected_from=job.state,
                )
            except InvalidTransition:
                # Someone else (a cancel, the reconcile) moved it: the next change re-reads it.
                log.info("job %s changed concurrently; re-reading later", job.pk)
                return
            if reading.reason == "OOMKilled":
                # The cluster keeps retrying it (preemption-safe policy); the portal ends it.
                job_mark_for_cleanup(job)
        if job.state in (JobState.QUEUED, JobState.ADMITTED) or job.queue_position is not None:
            self._explain(job, reading.reason, reading.message)

    def _explain(self, job: Job, reason: str, message: str) -> None:
        if job.state != JobState.QUEUED:
            job_set_queue_info(job=job, position=None, length=None, explanation="")
            return
        position, length = self.positions.get(job.pk, (None, None))
        standing = queues.standing_for(job, self.objects[CLUSTER_QUEUE])
        request = explain.request_for(
            gpus=job.gpus,
            replicas=job.replicas if job.kind == "gang" else 1,
            mig_profile=job.mig_profile,
            gpu_model=job.pool.gpu_model if job.pool else queues.pool_model(standing),
        )
        sentence = explain.explain_pending(
            reason=reason,
            message=message,
            request=request,
            standing=standing,
            position=position,
            queue_length=length,
        )
        job_set_queue_info(job=job, position=position, length=length, explanation=sentence)

    def _job_namespace(self, job_id: int) -> str | None:
        """The namespace of a portal job (None: no such job)."""
        if job_id not in self.job_namespaces:
            self.job_namespaces[job_id] = (
                Job.objects.filter(pk=job_id).values_list("project__namespace", flat=True).first()
            )
        return self.job_namespaces[job_id]

    def record_event(self, event: dict[str, Any]) -> None:
        involved = event.get("involvedObject") or {}
        job_id = self.uid_to_job.get(involved.get("uid") or "")
        if job_id is None:
            match = JOB_NAME.search(involved.get("name") or "")
            job_id = int(match.group(1)) if match else None
        namespace = (event.get("metadata") or {}).get("namespace") or ""
        # Only events in the job's own namespace: a same-named object elsewhere is not ours.
        if job_id is None or self._job_namespace(job_id) != namespace:
            return
        reason = event.get("reason") or ""
        message = event.get("message") or ""
        sentence = explain.event_sentence(
            reason, message, kind=involved.get("kind") or "", name=involved.get("name") or ""
        )
        warning = event.get("type") == "Warning"
        if sentence is None:
            if not explain.event_is_warning_worthy(event.get("type") or "", reason):
                return
            sentence = explain.generic_sentence(reason, message)
        when = (
            event.get("lastTimestamp")
            or event.get("eventTime")
            or event.get("firstTimestamp")
            or (event.get("metadata") or {}).get("creationTimestamp")
        )
        count = int(event.get("count") or (event.get("series") or {}).get("count") or 1)
        job_record_cluster_event(
            job_id=job_id,
            key=_uid(event),
            reason=reason,
            message=sentence,
            occurred_at=when,
            count=count,
            warning=warning,
        )

    def refresh_positions(self) -> None:
        queued = list(Job.objects.filter(state=JobState.QUEUED).select_related("project", "pool"))
        if not queued:
            self.positions = {}
            return
        workload_job: dict[tuple[str, str], int] = {}
        for key, wl in self.objects[WORKLOAD].items():
            job_id = self._job_of(wl)
            if job_id is not None:
                workload_job[key] = job_id
        self.positions = queues.positions(
            queued, workload_job, self.objects[PODGROUP], self.objects[VCJOB]
        )
        for job in queued:
            if job.pk in self.positions or job.queue_position is not None:
                reading = map_with_pods(self.snapshot(job))
                if reading.state == JobState.QUEUED:
                    self._explain(job, reading.reason, reading.message)

    def save_cursors(self) -> None:
        for collection, rv in self.cursors.items():
            if self.saved_cursors.get(collection) != rv:
                WatchCursor.objects.update_or_create(
                    key=collection, defaults={"resource_version": rv}
                )
                self.saved_cursors[collection] = rv

    def flush(self) -> None:
        if not self.is_leader():
            return
        dirty, self.dirty = self.dirty, set()
        for job_id in sorted(dirty):
            try:
                self.sync_job(job_id)
            except DatabaseError:
                log.warning("job %s: database error; will retry", job_id, exc_info=True)
                self.dirty.add(job_id)
                connection.close()
            except Exception:
                log.exception("job %s: could not apply the cluster's status", job_id)
        events, self.events = self.events, {}
        for uid, event in events.items():
            try:
                self.record_event(event)
            except DatabaseError:
                log.warning("event %s: database error; will retry", uid, exc_info=True)
                self.events.setdefault(uid, event)
                connection.close()
        now = time.monotonic()
        if self.queues_dirty:
            self.queues_dirty = False
            try:
                queues.store_usage(self.objects[CLUSTER_QUEUE], self.objects[VOLCANO_QUEUE])
            except Exception:
                log.exception("could not store queue usage")
                self.queues_dirty = True
        if now - self.last_positions >= POSITION_EVERY:
            self.last_positions = now
            try:
                self.refresh_positions()
            except Exception:
                log.warning("could not refresh queue positions", exc_info=True)
        if now - self.last_cursor >= CURSOR_EVERY:
            self.last_cursor = now
            try:
                self.save_cursors()
            except DatabaseError:
                connection.close()

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    first = self.inbox.get(timeout=0.5)
                except queue.Empty:
                    first = None
                try:
                    if first is not None:
                        self._absorb(first)
                        for _ in range(5000):
                            try:
                                self._absorb(self.inbox.get_nowait())
                            except queue.Empty:
                                break
                    close_old_connections()
                    self.flush()
                except DatabaseError:
                    log.warning("database unavailable; retrying", exc_info=True)
                    connection.close()
                    self.stop_event.wait(1.0)
                except Exception:  # keep watching; the next change or relist repairs it
                    log.exception("watch processor error")
        finally:
            connection.close()
