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
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.utils import DatabaseError

from jobs import explain
from jobs.manifests import job_selector, object_name
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
    KAI_RESERVATION_NAMESPACE,
    ClusterSnapshot,
    failing_pod,
    job_id_of,
    kai_reservations,
    map_with_pods,
    owner_uids,
)
from jobs.watcher import queues
from jobs.watcher.informer import Change
from jobs.watcher.pod_gpus import pod_records
from portal import observability
from portal.kube import apply as kube
from portal.kube.apply import KubeError

log = logging.getLogger(__name__)
SOURCE = "watcher"

BATCH_JOB = "batch/v1/Job"
VCJOB = "batch.volcano.sh/v1alpha1/Job"
WORKLOAD = "kueue.x-k8s.io/v1beta2/Workload"
PODGROUP = "scheduling.volcano.sh/v1beta1/PodGroup"
KAI_PODGROUP = "scheduling.run.ai/v2alpha2/PodGroup"
POD = "v1/Pod"
EVENT = "v1/Event"
CLUSTER_QUEUE = "kueue.x-k8s.io/v1beta2/ClusterQueue"
VOLCANO_QUEUE = "scheduling.volcano.sh/v1beta1/Queue"
KAI_QUEUE = "scheduling.run.ai/v2/Queue"
JOB_NAME = re.compile(r"gp-job-(\d+)\b")
POSITION_EVERY = 2.0
CURSOR_EVERY = 2.0
LOG_TAIL_LINES = 20
QUOTA_CACHE_SECONDS = 10.0


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
        self.jobs: dict[int, Job] = {}
        self.explained: dict[int, tuple] = {}
        self.pool_models: dict[str, str] = {}
        self.usage_version = 0
        self._batch_since: dict[int, float] = {}
        self.pending_details: dict[int, tuple] = {}
        count = int(getattr(settings, "PORTAL_WATCHER_WRITERS", 4))
        self.writers = ThreadPoolExecutor(count, "watch-writer") if count > 1 else None
        self._quota_cache: tuple[float, list] | None = None
        self.processed = 0
        self.last_positions = 0.0
        self.last_cursor = 0.0
        # Receipt of the first change behind a pending write → seconds until the write (for the
        # heartbeat and metrics: the watcher's own share of the status lag).
        self.dirty_since: dict[int, float] = {}
        self.lag_samples: deque[float] = deque(maxlen=2000)

    # ------------------------------------------------------------------ intake
    def put(self, change: Change) -> None:
        self.inbox.put(change)

    def _absorb(self, change: Change) -> None:
        self.processed += 1
        observability.count("watch_events_total", kind=change.collection)
        if change.resource_version:
            self.cursors[change.collection] = change.resource_version
        if change.type in ("BOOKMARK",):
            return
        if change.type == "RELISTED":
            if change.collection in (BATCH_JOB, VCJOB, WORKLOAD, PODGROUP, KAI_PODGROUP, POD):
                # Whatever happened while we were not looking: re-evaluate every live job.
                self.dirty.update(Job.objects.active().values_list("pk", flat=True).order_by())
            return
        obj = change.obj
        collection = change.collection
        if collection == EVENT:
            if change.type != "DELETED" and _uid(obj):
                self.events[_uid(obj)] = obj
            return
        if collection in (CLUSTER_QUEUE, VOLCANO_QUEUE, KAI_QUEUE):
            store = self.objects[collection]
            if change.type == "DELETED":
                store.pop(_key(obj), None)
            else:
                store[_key(obj)] = obj
            self.queues_dirty = True
            self.usage_version += 1
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
            self.dirty_since.setdefault(job_id, change.received)

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
        name = object_name(job.pk)
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
        if job.backend == "kai":
            podgroup = None
            if batch is not None:
                uid = _uid(batch)
                podgroup = next(
                    (pg for pg in self.objects[KAI_PODGROUP].values() if uid in owner_uids(pg)),
                    None,
                )
            return ClusterSnapshot(
                backend="kai", primary=batch, podgroup=podgroup, pods=pods, expected_pods=job.pods
            )
        workload = None
        if batch is not None:
            key = self.workload_by_owner.get(_uid(batch))
            workload = self.objects[WORKLOAD].get(key) if key else None
        return ClusterSnapshot(
            backend="kueue", primary=batch, workload=workload, pods=pods, expected_pods=job.pods
        )

    # ------------------------------------------------------------------ writes
    def _sync_pods(self, job: Job, snapshot: ClusterSnapshot) -> None:
        written = self.written_pods.setdefault(job.pk, {})
        records = pod_records(
            job.project.namespace,
            snapshot.pods,
            kai_reservations=self._kai_reservations,
            previous=written,
        )
        changed = [r for r in records if written.get(r.uid) != r]
        present = {r.uid for r in records}
        if not changed and set(written) <= present:
            return
        job_record_pods(job_id=job.pk, records=changed, present_uids=present)
        self.written_pods[job.pk] = {r.uid: r for r in records}

    def _kai_reservations(self) -> dict[str, tuple[str, str, str]]:
        """KAI's reservation pods by GPU group (read when a fraction pod needs its GPU)."""
        try:
            pods = kube.list_objects("v1", "Pod", namespace=KAI_RESERVATION_NAMESPACE)
        except KubeError:
            return {}
        return kai_reservations(pods)

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

    def _job(self, job_id: int) -> Job | None:
        """The job row as last read or written by this processor. Its state may be stale (a
        cancel, the reconcile): every write is a compare-and-set on it, and a refused write
        drops it from the cache so the next round re-reads it."""
        job = self.jobs.get(job_id)
        if job is None:
            job = (
                Job.objects.select_related("project", "project__department", "pool")
                .filter(pk=job_id)
                .first()
            )
            if job is not None:
                self.jobs[job_id] = job
        return job

    def sync_job(self, job_id: int) -> None:
        done = self.sync_state(job_id)
        if done is not None:
            self.sync_details(*done)

    def sync_state(self, job_id: int):
        """Write the job's state if the cluster moved it; returns what sync_details needs."""
        job = self._job(job_id)
        if job is None:
            return None
        snapshot = self.snapshot(job)
        if job.is_terminal:
            return job, snapshot, None
        reading = map_with_pods(snapshot)
        if reading.state is None:
            return job, snapshot, None
        if reading.state == JobState.FAILED and failing_pod(snapshot.pods) is None:
            # The pod's last status may still be on its way on the Pod stream: read the pods
            # now so the failure names the exit code.
            snapshot = self._with_fresh_pods(job, snapshot)
            reading = map_with_pods(snapshot)
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
                # Someone else (a cancel, the reconcile) moved it: re-read it next round.
                log.info("job %s changed concurrently; re-reading it", job.pk)
                self.jobs.pop(job.pk, None)
                self.dirty.add(job.pk)
                return None
            since = self._batch_since.get(job.pk)
            if since is not None:
                lag = time.time() - since
                self.lag_samples.append(lag)
                observability.observe("watch_lag_seconds", lag)
                observability.gauge("watch_lag_last_seconds", lag)
            if reading.reason == "OOMKilled":
                # The cluster keeps retrying it (preemption-safe policy); the portal ends it.
                job_mark_for_cleanup(job)
        return job, snapshot, reading

    def _sync_state_safely(self, job_id: int):
        try:
            return self.sync_state(job_id)
        except DatabaseError:
            log.warning("job %s: database error; will retry", job_id, exc_info=True)
            self.dirty.add(job_id)
            connection.close()
        except Exception:
            log.exception("job %s: could not apply the cluster's status", job_id)
        return None

    def sync_details(self, job: Job, snapshot: ClusterSnapshot, reading) -> None:
        """Pods and the waiting explanation: after every state in the batch is written."""
        self._sync_pods(job, snapshot)
        if reading is None:
            return
        if job.state == JobState.QUEUED or job.queue_position is not None or job.explanation:
            self._explain(job, reading.reason, reading.message)

    def _quotas(self) -> list:
        now = time.monotonic()
        if self._quota_cache is None or now - self._quota_cache[0] > QUOTA_CACHE_SECONDS:
            self._quota_cache = (now, queues.project_quotas())
        return self._quota_cache[1]

    def _explain(self, job: Job, reason: str, message: str) -> None:
        if job.state != JobState.QUEUED:
            self.explained.pop(job.pk, None)
            job_set_queue_info(job=job, position=None, length=None, explanation="")
            return
        position, length = self.positions.get(job.pk, (None, None))
        key = (reason, message, position, length, self.usage_version)
        if self.explained.get(job.pk) == key:
            return  # nothing it depends on changed
        self.explained[job.pk] = key
        standing = queues.standing_for(
            job, self.objects[CLUSTER_QUEUE], self._quotas(), self.objects[VOLCANO_QUEUE]
        )
        request = explain.request_for(
            gpus=job.gpus,
            replicas=job.replicas if job.kind == "gang" else 1,
            mig_profile=job.mig_profile,
            gpu_model=job.pool.gpu_model if job.pool else self._pool_model(standing),
            share=float(job.gpu_fraction) if job.gpu_fraction is not None else None,
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

    def _pool_model(self, standing) -> str:
        key = standing.pool if standing else ""
        if key not in self.pool_models:
            self.pool_models[key] = queues.pool_model(standing)
        return self.pool_models[key]

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
        ids = set(Job.objects.filter(state=JobState.QUEUED).values_list("pk", flat=True).order_by())
        for job_id, job in list(self.jobs.items()):
            if job.state == JobState.QUEUED and job_id not in ids:
                self.jobs.pop(job_id, None)  # moved by someone else (e.g. cancelled): re-read
        queued = [j for j in (self._job(i) for i in sorted(ids)) if j is not None]
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

    def lag_summary(self) -> dict[str, float]:
        """p50/p95/p99 seconds from receiving a change to writing the state it implies."""
        values = sorted(self.lag_samples)
        if not values:
            return {}

        def pick(p: float) -> float:
            return round(values[min(len(values) - 1, int(p / 100 * len(values)))], 4)

        return {"p50": pick(50), "p95": pick(95), "p99": pick(99), "n": len(values)}

    def save_cursors(self) -> None:
        for collection, rv in self.cursors.items():
            if collection == EVENT and self.events:
                continue  # Events resume from this cursor: only once all before it are stored
            if self.saved_cursors.get(collection) != rv:
                WatchCursor.objects.update_or_create(
                    key=collection, defaults={"resource_version": rv}
                )
                self.saved_cursors[collection] = rv

    def flush(self) -> None:
        if not self.is_leader():
            return
        dirty, self.dirty = self.dirty, set()
        dirty_since, self.dirty_since = self.dirty_since, {}
        self._batch_since = dirty_since
        # States first (what users and the lag target care about); pods, explanations and
        # timeline events after, and only while no new change waits (a new change's state goes
        # before the rest of this backlog).
        # Jobs are independent and every write is a compare-and-set, so several writers (each
        # with its own database connection) cut the wait when many jobs move at once.
        ordered = sorted(dirty)
        if len(ordered) > 1 and self.writers is not None:
            results = list(self.writers.map(self._sync_state_safely, ordered))
        else:
            results = [self._sync_state_safely(job_id) for job_id in ordered]
        for job_id, done in zip(ordered, results, strict=True):
            if done is not None:
                self.pending_details[job_id] = done
        while (self.pending_details or self.events) and self.inbox.empty():
            if self.pending_details:
                job_id = next(iter(self.pending_details))
                done = self.pending_details.pop(job_id)
                try:
                    self.sync_details(*done)
                except DatabaseError:
                    log.warning("job %s: database error; will retry", job_id, exc_info=True)
                    self.written_pods.pop(job_id, None)
                    self.explained.pop(job_id, None)
                    self.dirty.add(job_id)
                    connection.close()
                    break
                except Exception:
                    log.exception("job %s: could not record its pods", job_id)
                continue
            uid = next(iter(self.events))
            event = self.events.pop(uid)
            try:
                self.record_event(event)
            except DatabaseError:
                log.warning("event %s: database error; will retry", uid, exc_info=True)
                self.events.setdefault(uid, event)
                connection.close()
                break
            except Exception:
                log.exception("event %s: could not record it", uid)
        now = time.monotonic()
        if self.queues_dirty:
            self.queues_dirty = False
            try:
                queues.store_usage(
                    self.objects[CLUSTER_QUEUE],
                    self.objects[VOLCANO_QUEUE],
                    self.objects[KAI_QUEUE],
                )
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
            if self.writers is not None:
                self.writers.shutdown(wait=False, cancel_futures=True)
            connection.close()
