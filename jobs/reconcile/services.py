"""Make the cluster match one job, then read back what the cluster says about it.

Level-triggered and idempotent: everything is derived from the Job row each time. Objects are
created by server-side apply under fixed names, so a second run changes nothing. Each job is
reconciled by one worker at a time
(jobs.reconcile.locking, held across read → apply → record), and its
state is read again after every apply: a job cancelled meanwhile has what was just applied
deleted at once. Drift policy: an object deleted by hand before the job started is recreated; one
deleted after the job was admitted or running marks the job Failed ("ObjectDeleted"), because
recreating it would silently restart a training run from scratch.

The periodic resync also sweeps the cluster: an object carrying the portal's labels whose job is
cancelled or unknown is deleted, and a finished job's objects are removed once the retention
(PORTAL_JOB_RETENTION_SECONDS) has passed and its last log lines are kept.
"""

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from governance.dispatch import member_limit_gate
from governance.member_limits import MEMBER_LIMIT_REASON
from jobs.manifests import job_selector, object_name, primary_manifest
from jobs.models import Job
from jobs.reconcile.locking import JobBusy, job_lock
from jobs.redact import redact_text
from jobs.selectors import job_manifests, jobs_to_resync, projects_to_resync
from jobs.services import (
    InvalidTransition,
    Move,
    enqueue_array_reconcile,
    job_explain_blocked,
    job_mark_cleaned,
    job_note_status,
    job_note_status_many,
    job_record_applied,
    job_record_event,
    job_record_logs,
    job_record_reconciled,
    job_transition,
    job_transition_many,
)
from jobs.states import TERMINAL, JobState, can_transition
from jobs.status import ClusterSnapshot, StatusReading, map_cluster_status
from portal.kube import apply as kube
from portal.kube import discovery
from portal.kube.apply import (
    KubeError,
    PermanentKubeError,
    ResourceNotServed,
    RetryableKubeError,
    is_rbac_denial,
)
from portal.kube.labels import JOB_ID_KEY, is_managed
from tenants.models import Project

log = logging.getLogger(__name__)
SOURCE = "reconciler"
SWEEP_SOURCE = "resync"
RECREATE_STATES = frozenset({JobState.SUBMITTED, JobState.QUEUED})
# The objects the portal creates for a job (pods, Workloads and PodGroups are their dependents).
JOB_OBJECT_KINDS = (
    ("batch/v1", "Job"),
    ("v1", "Service"),
    ("batch.volcano.sh/v1alpha1", "Job"),
)
LOG_PODS = 3
LOG_LINES = 20
LOG_CHARS = 8000
# What the resync reads of each live job (whole rows, JSON fields and all, cost more to load
# than the rest of a steady pass).
RESYNC_FIELDS = (
    "id",
    "project_id",
    "state",
    "state_reason",
    "state_message",
    "backend",
    "kind",
    "replicas",
    "applied_at",
    "array_id",
    "cleanup_pending",
)


def retention_seconds() -> float:
    return float(getattr(settings, "PORTAL_JOB_RETENTION_SECONDS", 86400))


def _not_found_reason(manifest: dict[str, Any], exc: PermanentKubeError) -> RetryableKubeError:
    """A 404 on apply: the API is not served (missing CRD) or the namespace is not there yet."""
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    plural = kube.KINDS.get(kind, (kind.lower() + "s", True))[0]
    served = kube.api_resources(api_version)
    if served is None or plural not in served:
        return ResourceNotServed(f"the cluster does not serve {api_version} {plural}", status=404)
    # The project's namespace is not there yet (the quota sync creates it): wait.
    return RetryableKubeError(f"not ready yet: {exc.message}", status=404)


def _apply_all(manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        try:
            kube.apply(manifest)
        except PermanentKubeError as exc:
            if exc.status == 404:
                raise _not_found_reason(manifest, exc) from exc
            raise


def _check_backend(job: Job) -> None:
    """Tell the job (once) and staff (the log) when the cluster lacks the job's backend."""
    backend = job.backend or "kueue"
    if backend not in discovery.BACKEND_RESOURCES:
        return  # a backend this check does not know: the apply itself will say
    status = discovery.backend_status(backend)
    if status.installed:
        return
    message = f"{status.message}; the job waits until an administrator installs it"
    if job_explain_blocked(job, reason="BackendMissing", message=message, source=SOURCE):
        log.error("job %s cannot be applied: %s", job.pk, status.message)
    raise ResourceNotServed(status.message, status=404)


def _apply(job: Job, manifests: list[dict[str, Any]]) -> str | None:
    """Apply the job's objects. Returns "rejected" when the API server refused them for good
    (the job is Failed with its message); raises RetryableKubeError to try again later, also
    when the portal lacks the permission (the job waits, saying which, until it is granted)."""
    _check_backend(job)
    try:
        _apply_all(manifests)
    except ResourceNotServed:
        discovery.forget()  # removed since we asked: ask again next time
        raise
    except PermanentKubeError as exc:
        if is_rbac_denial(exc):
            message = (
                f"the portal is not allowed to create the job in the cluster ({exc.message}); "
                "it waits until an administrator grants the permission"
            )
            if job_explain_blocked(job, reason="NotPermitted", message=message, source=SOURCE):
                log.error("job %s cannot be applied: %s", job.pk, exc.message)
            raise RetryableKubeError(exc.message, status=403, reason="Forbidden") from exc
        _fail(job, "Rejected", f"the cluster rejected the job: {exc.message}")
        return "rejected"
    return None


def delete_job_objects(job: Job) -> int:
    """Delete every object of the job by name (background propagation removes pods).
    Returns how many were still there."""
    ns = job.project.namespace
    name = object_name(job.pk)
    if job.backend == "volcano":
        return int(kube.delete("batch.volcano.sh/v1alpha1", "Job", name, ns))
    deleted = int(kube.delete("batch/v1", "Job", name, ns))
    if job.kind == "gang":
        deleted += int(kube.delete("v1", "Service", name, ns))
    return deleted


def _save_logs(job: Job) -> None:
    """Keep the last lines of the job's pods' logs (failed pods first) on the Job row.

    Raises RetryableKubeError when the cluster cannot be read now; a refusal (e.g. no RBAC for
    pods/log) keeps no logs rather than keeping the objects forever."""
    ns = job.project.namespace
    try:
        _save_logs_of(job, ns)
    except PermanentKubeError as exc:
        log.warning("job %s: cannot read its pods' logs: %s", job.pk, exc.message)


def _save_logs_of(job: Job, ns: str) -> None:
    pods = kube.list_objects("v1", "Pod", namespace=ns, label_selector=job_selector(job.pk))
    pods.sort(
        key=lambda p: (
            (p.get("status") or {}).get("phase") != "Failed",
            (p.get("metadata") or {}).get("name", ""),
        )
    )
    parts = []
    for pod in pods[:LOG_PODS]:
        name = pod["metadata"]["name"]
        tail = kube.pod_log_tail(ns, name, lines=LOG_LINES).rstrip()
        if tail:
            parts.append(f"==> {name} <==\n{tail}")
    text = "\n".join(parts)
    if len(text) > LOG_CHARS:
        text = "…" + text[-LOG_CHARS:]
    if text:
        job_record_logs(job, tail=text)


def _clean_up(job: Job) -> str:
    """The job was cancelled: keep what its pods printed (best effort), delete its objects."""
    try:
        _save_logs(job)
    except RetryableKubeError:
        log.info("job %s: could not read its logs before deleting it", job.pk)
    try:
        delete_job_objects(job)
    except PermanentKubeError as exc:
        # Kept pending: every resync tries again, and the job says why its objects remain.
        log.error("job %s: cannot delete its cluster objects: %s", job.pk, exc.message)
        job_note_status(
            job,
            reason="CleanupRefused",
            message=f"the cluster refused to delete the job's objects: {exc.message}",
        )
        return "cleanup-refused"
    job_mark_cleaned(job)
    return "deleted"


def _after_apply(job: Job) -> str | None:
    """Read the job again after a cluster write: if it was cancelled (or removed) while we
    applied, delete what was just applied. Returns what was done, None to carry on."""
    fresh = Job.objects.filter(pk=job.pk).values("state", "cleanup_pending").first()
    if fresh is None:
        delete_job_objects(job)
        return "gone"
    if fresh["cleanup_pending"] or fresh["state"] == JobState.CANCELLED:
        job.state = fresh["state"]
        return _clean_up(job)
    return None


def read_snapshot(job: Job, *, with_pods: bool = False) -> ClusterSnapshot:
    ns = job.project.namespace
    name = object_name(job.pk)
    pods: list[dict[str, Any]] = []
    if with_pods:
        pods = kube.list_objects("v1", "Pod", namespace=ns, label_selector=job_selector(job.pk))
    if job.backend == "volcano":
        vcjob = kube.get("batch.volcano.sh/v1alpha1", "Job", name, ns)
        podgroups = []
        if vcjob is not None:
            podgroups = kube.list_objects(
                "scheduling.volcano.sh/v1beta1",
                "PodGroup",
                namespace=ns,
                label_selector=job_selector(job.pk),
            )
            if not podgroups:  # an older controller that does not copy labels: by owner
                uid = vcjob["metadata"].get("uid")
                podgroups = [
                    pg
                    for pg in kube.list_objects(
                        "scheduling.volcano.sh/v1beta1", "PodGroup", namespace=ns
                    )
                    if any(o.get("uid") == uid for o in pg["metadata"].get("ownerReferences", []))
                ]
        return ClusterSnapshot(
            backend="volcano",
            primary=vcjob,
            podgroup=podgroups[0] if podgroups else None,
            pods=pods,
            expected_pods=job.pods,
        )
    batch_job = kube.get("batch/v1", "Job", name, ns)
    if job.backend == "kai":
        return _kai_snapshot(job, batch_job, ns)
    workload = None
    if batch_job is not None:
        uid = batch_job["metadata"].get("uid", "")
        workloads = kube.list_objects(
            "kueue.x-k8s.io/v1beta2",
            "Workload",
            namespace=ns,
            label_selector=f"kueue.x-k8s.io/job-uid={uid}",
        )
        workload = workloads[0] if workloads else None
    return ClusterSnapshot(
        backend="kueue",
        primary=batch_job,
        workload=workload,
        pods=pods,
        expected_pods=job.pods,
    )


KAI_PODGROUP_API = "scheduling.run.ai/v2alpha2"


def _kai_snapshot(job: Job, batch_job: dict[str, Any] | None, ns: str) -> ClusterSnapshot:
    """A KAI job: its Job, its pods (KAI binds them one by one) and the PodGroup KAI's
    podgrouper made for the Job (owned by it)."""
    pods = kube.list_objects("v1", "Pod", namespace=ns, label_selector=job_selector(job.pk))
    podgroup = None
    if batch_job is not None:
        uid = batch_job["metadata"].get("uid", "")
        podgroup = _by_owner_uid(kube.list_objects(KAI_PODGROUP_API, "PodGroup", namespace=ns)).get(
            uid
        )
    return ClusterSnapshot(
        backend="kai", primary=batch_job, podgroup=podgroup, pods=pods, expected_pods=job.pods
    )


def read_status(job: Job) -> StatusReading:
    reading = map_cluster_status(read_snapshot(job))
    if reading.state == JobState.FAILED:
        # Only a failure needs the pods: their exit codes make the message useful.
        reading = map_cluster_status(read_snapshot(job, with_pods=True))
    return reading


def _move(job: Job, reading: StatusReading) -> None:
    if reading.state is None:
        return
    if reading.state == job.state:
        job_note_status(job, reason=reading.reason, message=reading.message)
        return
    if not can_transition(job.state, reading.state):
        log.info(
            "job %s: cluster says %s, portal has %s; ignored", job.pk, reading.state, job.state
        )
        return
    try:
        job_transition(
            job,
            to=reading.state,
            expected_from=job.state,
            reason=reading.reason,
            message=reading.message,
            source=SOURCE,
        )
    except InvalidTransition:
        # Somebody (a cancel) moved it meanwhile; the next run sees the new state.
        log.info("job %s changed concurrently; skipping", job.pk)


def _fail(job: Job, reason: str, message: str) -> None:
    # The API server may quote an invalid env value; events and state are shown to viewers.
    message = redact_text(message, job.env)
    try:
        job_transition(
            job,
            to=JobState.FAILED,
            expected_from=job.state,
            reason=reason,
            message=message,
            source=SOURCE,
        )
    except InvalidTransition:
        log.info("job %s already finished; not marking it failed (%s)", job.pk, reason)


def job_reconcile(*, job_id: int) -> str:
    """One level-triggered pass over a job, holding the job's lock. Returns a short word saying
    what it did.

    Raises RetryableKubeError when the cluster could not be reached or lacks the job's backend,
    and JobBusy when another worker kept the job's lock too long (the task retries both);
    permanent rejections mark the job Failed with the API server's message.
    """
    with job_lock(job_id):
        return _reconcile_locked(job_id)


def _reconcile_locked(job_id: int) -> str:
    job = Job.objects.select_related("project", "pool").filter(pk=job_id).first()
    if job is None:
        return "gone"
    if job.cleanup_pending:
        return _clean_up(job)
    if job.is_terminal:
        return "terminal"
    if job.applied_at is None and job.array_id is not None:
        # An array element is first applied by its array's pass (which keeps the array's
        # parallelism); it may be waiting for a slot.
        enqueue_array_reconcile(job.array_id)
        return "held"
    manifests = job_manifests(job)
    if job.applied_at is None:
        # The submitter's GPU limit in the project (governance): over it, the job waits here.
        with member_limit_gate(job) as gate:
            if waiting := gate.message:
                job_explain_blocked(job, reason=MEMBER_LIMIT_REASON, message=waiting, source=SOURCE)
                return "held"
            if rejected := _apply(job, manifests):
                return rejected
            job_record_applied(job)
        if job.state_reason == MEMBER_LIMIT_REASON:
            job_note_status(job, reason="", message="")
        return _after_apply(job) or "applied"
    try:
        reading = read_status(job)
    except PermanentKubeError as exc:
        # E.g. no permission to read Workloads: the job keeps its state and says why it is
        # not followed; the watcher or a later pass moves it once the cluster can be read.
        log.error("job %s: cannot read its status: %s", job.pk, exc.message)
        job_note_status(
            job,
            reason="StatusUnreadable",
            message=f"the portal cannot read this job's status from the cluster: {exc.message}",
        )
        return "unreadable"
    job_record_reconciled([job.pk])
    if reading.missing:
        if job.state in RECREATE_STATES:
            if rejected := _apply(job, manifests):
                return rejected
            if after := _after_apply(job):
                return after
            log.warning("job %s: %s; recreated", job.pk, reading.message)
            job_note_status(job, reason="Recreated", message=f"{reading.message}; recreated")
            return "recreated"
        kind = primary_manifest(manifests)["kind"]
        _fail(
            job,
            "ObjectDeleted",
            f"the {kind} was deleted outside the portal while the job was {job.state}",
        )
        return "failed"
    _move(job, reading)
    return "synced"


def _by_job_id(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for obj in objects:
        job_id = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_KEY)
        if job_id:
            out[job_id] = obj
    return out


def _by_owner_uid(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for obj in objects:
        meta = obj.get("metadata") or {}
        uid = (meta.get("labels") or {}).get("kueue.x-k8s.io/job-uid")
        if uid:
            out[uid] = obj
        for owner in meta.get("ownerReferences") or []:
            out.setdefault(owner.get("uid", ""), obj)
    return out


def _namespace_snapshots(namespace: str, jobs: list[Job]) -> dict[int, ClusterSnapshot]:
    """Snapshots of many jobs of one namespace from a handful of LIST calls."""
    snapshots: dict[int, ClusterSnapshot] = {}
    kueue_jobs = [j for j in jobs if j.backend not in ("volcano", "kai")]
    volcano_jobs = [j for j in jobs if j.backend == "volcano"]
    kai_jobs = [j for j in jobs if j.backend == "kai"]
    if kai_jobs:
        batch = _by_job_id(kube.list_owned("batch/v1", "Job", namespace=namespace))
        groups = _by_owner_uid(kube.list_objects(KAI_PODGROUP_API, "PodGroup", namespace=namespace))
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in kube.list_owned("v1", "Pod", namespace=namespace):
            job_id = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_ID_KEY)
            pods_by_job.setdefault(job_id or "", []).append(pod)
        for job in kai_jobs:
            primary = batch.get(str(job.pk))
            uid = (primary or {}).get("metadata", {}).get("uid", "")
            snapshots[job.pk] = ClusterSnapshot(
                backend="kai",
                primary=primary,
                podgroup=groups.get(uid) if uid else None,
                pods=pods_by_job.get(str(job.pk), []),
                expected_pods=job.pods,
            )
    if kueue_jobs:
        batch = _by_job_id(kube.list_owned("batch/v1", "Job", namespace=namespace))
        workloads = _by_owner_uid(
            kube.list_objects("kueue.x-k8s.io/v1beta2", "Workload", namespace=namespace)
        )
        for job in kueue_jobs:
            primary = batch.get(str(job.pk))
            uid = (primary or {}).get("metadata", {}).get("uid", "")
            snapshots[job.pk] = ClusterSnapshot(
                backend="kueue",
                primary=primary,
                workload=workloads.get(uid) if uid else None,
                expected_pods=job.pods,
            )
    if volcano_jobs:
        vcjobs = _by_job_id(
            kube.list_owned("batch.volcano.sh/v1alpha1", "Job", namespace=namespace)
        )
        groups = kube.list_objects("scheduling.volcano.sh/v1beta1", "PodGroup", namespace=namespace)
        by_label, by_owner = _by_job_id(groups), _by_owner_uid(groups)
        for job in volcano_jobs:
            primary = vcjobs.get(str(job.pk))
            uid = (primary or {}).get("metadata", {}).get("uid", "")
            snapshots[job.pk] = ClusterSnapshot(
                backend="volcano",
                primary=primary,
                podgroup=by_label.get(str(job.pk)) or (by_owner.get(uid) if uid else None),
                expected_pods=job.pods,
            )
    return snapshots


@dataclass
class _Namespace:
    """One namespace of a resync pass: its jobs to compare and their snapshots being read."""

    namespace: str
    jobs: list[Job]
    snapshots: Future


def resync_jobs(*, enqueue: Callable[[int], Any]) -> dict[str, int]:
    """The periodic pass: read every namespace with live jobs in bulk, move jobs whose cluster
    status changed, and hand the rest (never applied, cancelled but not cleaned up, drifted,
    failed needing pod exit codes) to `enqueue(job_id)` for a full reconcile; then sweep the
    cluster for objects no live job wants.

    The moves compare against the state this pass read (expected_from), so a job a reconcile
    moved on while the namespace was being listed is left alone. A namespace whose reads fail is
    skipped this round and retried next period.

    The next namespace's LISTs are read (one reader thread, no database) while this one's
    changes are written: the pass takes about the longer of the two, not their sum.
    """
    counts = {"moved": 0, "enqueued": 0, "unchanged": 0, "skipped": 0}
    arrays: set[int] = set()
    # One project (namespace) at a time, plus the next one being read: memory holds two
    # namespaces' jobs and objects, not every live job of the cluster.
    with ThreadPoolExecutor(1, thread_name_prefix="resync-read") as reader:
        pending: _Namespace | None = None
        for project_id, namespace in projects_to_resync():
            jobs = _jobs_to_compare(project_id, enqueue, counts, arrays)
            if not jobs:
                continue
            reading = reader.submit(_namespace_snapshots, namespace, jobs)
            ahead = _Namespace(namespace, jobs, reading)
            if pending is not None:
                _resync_namespace(pending, enqueue, counts)
            pending = ahead
        if pending is not None:
            _resync_namespace(pending, enqueue, counts)
    for array_id in sorted(arrays):
        enqueue_array_reconcile(array_id)
    counts["arrays"] = len(arrays)
    counts.update(sweep_cluster_objects())
    return counts


def _jobs_to_compare(
    project_id: int, enqueue: Callable[[int], Any], counts: dict[str, int], arrays: set[int]
) -> list[Job]:
    """The project's applied live jobs; the others are handed on (a reconcile, an array pass)."""
    jobs = []
    for job in jobs_to_resync().filter(project_id=project_id).only(*RESYNC_FIELDS):
        if job.applied_at is None and job.array_id is not None and not job.cleanup_pending:
            arrays.add(job.array_id)  # held elements: one pass per array applies them
            continue
        if job.cleanup_pending or job.applied_at is None:
            enqueue(job.pk)
            counts["enqueued"] += 1
        else:
            jobs.append(job)
    return jobs


def _resync_namespace(
    item: _Namespace, enqueue: Callable[[int], Any], counts: dict[str, int]
) -> None:
    namespace, jobs = item.namespace, item.jobs
    try:
        snapshots = item.snapshots.result()
    except RetryableKubeError as exc:
        log.warning("resync: cannot read namespace %s: %s", namespace, exc)
        counts["skipped"] += len(jobs)
        return
    except PermanentKubeError as exc:  # e.g. a permission missing: every period says so
        log.error("resync: cannot read namespace %s: %s", namespace, exc.message)
        counts["skipped"] += len(jobs)
        return
    moves: list[Move] = []
    notes: list[tuple[Job, str, str]] = []
    for job in jobs:
        reading = map_cluster_status(snapshots[job.pk])
        if reading.missing or reading.state == JobState.FAILED:
            enqueue(job.pk)
            counts["enqueued"] += 1
        elif reading.state is None:
            counts["unchanged"] += 1
        elif reading.state == job.state:
            notes.append((job, reading.reason, reading.message))
            counts["unchanged"] += 1
        elif can_transition(job.state, reading.state):
            moves.append(Move(job, reading.state, reading.reason, reading.message))
        else:
            log.info(
                "job %s: cluster says %s, portal has %s; ignored",
                job.pk,
                reading.state,
                job.state,
            )
            counts["unchanged"] += 1
    # A handful of statements per namespace, not several per job: the moves compare-and-set
    # on the state read, so a job moved meanwhile (a reconcile, the watcher) is left alone.
    moved = {j.pk for j in job_transition_many(moves, source=SOURCE, reconciled=True)}
    counts["moved"] += len(moved)
    counts["unchanged"] += len(moves) - len(moved)
    if len(moved) < len(moves):
        log.info("resync: %d jobs changed concurrently; skipped", len(moves) - len(moved))
    job_note_status_many(notes)
    job_record_reconciled([j.pk for j in jobs if j.pk not in moved])


def _job_id_of(obj: dict[str, Any]) -> int | None:
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_KEY, "")
    return int(value) if value.isdigit() else None


def _describe(obj: dict[str, Any]) -> str:
    return f"{obj['kind']} {obj['metadata']['name']}"


def sweep_cluster_objects() -> dict[str, int]:
    """Delete job objects that no live job wants: those of cancelled jobs, of jobs the portal
    no longer has, and of finished jobs past the retention (after keeping their last log lines).

    Only objects carrying the portal's managed-by and job-id labels, in a namespace of one of
    its projects, are considered; a job id above every id this database has handed out is left
    alone (a restored backup or another portal: not provably ours to delete).
    """
    counts = {"swept": 0, "sweep_skipped": 0}
    namespaces = set(Project.objects.values_list("namespace", flat=True))
    # Read before listing: a job created while the lists are read has a higher id, so its
    # objects count as "not provably ours" this round rather than as orphans.
    highest = Job.objects.aggregate(highest=Max("pk"))["highest"] or 0
    cutoff = timezone.now() - timedelta(seconds=retention_seconds())
    for api_version, kind in JOB_OBJECT_KINDS:
        # A page of objects at a time (the list is paged too): memory stays bounded however
        # many finished jobs' objects the cluster keeps.
        # Metadata only: the sweep decides on labels and names, and a cluster-wide page of full
        # Jobs (pod templates, status) cost most of a resync pass in JSON decoding alone.
        objects = kube.iter_owned(api_version, kind, selector=JOB_ID_KEY, metadata_only=True)
        try:
            for page in _batches(objects, kube.list_page_size()):
                found: dict[tuple[int, str], list[dict[str, Any]]] = {}
                for obj in page:
                    meta = obj.get("metadata") or {}
                    job_id = _job_id_of(obj)
                    if (
                        job_id is None
                        or not is_managed(obj)
                        or meta.get("namespace") not in namespaces
                        or meta.get("deletionTimestamp")
                    ):
                        continue
                    found.setdefault((job_id, meta["namespace"]), []).append(obj)
                if found:
                    _sweep_found(found, highest=highest, cutoff=cutoff, counts=counts)
        except ResourceNotServed:
            continue  # that backend is not installed: nothing of it to sweep
        except KubeError as exc:
            log.warning("sweep: cannot list %s %s: %s", api_version, kind, exc)
            counts["sweep_skipped"] += 1
            continue
    return counts


def _batches(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _sweep_found(
    found: dict[tuple[int, str], list[dict[str, Any]]],
    *,
    highest: int,
    cutoff: Any,
    counts: dict[str, int],
) -> None:
    """Delete what no live job wants among one page of listed objects (by job id, namespace)."""
    # Tuples first: nearly every listed object belongs to a live job that keeps it, and loading
    # whole Job rows for a page of 500 cost more than the page itself.
    rows = {
        pk: (ns, state, cleanup_pending, changed_at)
        for pk, ns, state, cleanup_pending, changed_at in Job.objects.filter(
            pk__in={job_id for job_id, _ in found}
        ).values_list("pk", "project__namespace", "state", "cleanup_pending", "state_changed_at")
    }
    # Then whole rows only for the jobs whose objects may go.
    candidates = [
        pk
        for pk, (_, state, cleanup_pending, changed_at) in rows.items()
        if (state == JobState.CANCELLED and not cleanup_pending)
        or (state in TERMINAL and changed_at <= cutoff)
    ]
    jobs = Job.objects.select_related("project").in_bulk(candidates) if candidates else {}
    for (job_id, namespace), objects in sorted(found.items()):
        row = rows.get(job_id)
        if row is None or row[0] != namespace:
            if job_id > highest:
                log.warning(
                    "sweep: %s in %s is labelled for job %s, newer than any job here; left alone",
                    ", ".join(_describe(o) for o in objects),
                    namespace,
                    job_id,
                )
                continue
            counts["swept"] += _delete_unknown(job_id, namespace, objects)
            continue
        job = jobs.get(job_id)
        if job is None:
            continue  # live, or finished within the retention: its objects stay
        if job.state == JobState.CANCELLED and job.cleanup_pending:
            continue  # its reconcile is deleting them (the resync enqueued it above)
        if job.state == JobState.CANCELLED:
            why = "the job was cancelled"
        elif job.is_terminal and job.state_changed_at <= cutoff:
            why = f"the job finished over {retention_seconds():g} s ago (retention)"
        else:
            continue
        try:
            with job_lock(job.pk, wait=0):
                if job.state != JobState.CANCELLED and not job.logs_tail:
                    _save_logs(job)
                counts["swept"] += _delete_for(job, objects, why)
        except (JobBusy, KubeError) as exc:
            log.warning("sweep: job %s skipped this round: %s", job.pk, exc)
            counts["sweep_skipped"] += 1


def _delete_unknown(job_id: int, namespace: str, objects: list[dict[str, Any]]) -> int:
    deleted = 0
    for obj in objects:
        try:
            if kube.delete_object(obj):
                deleted += 1
                log.warning(
                    "sweep: deleted %s in %s: labelled for job %s, which the portal no longer has",
                    _describe(obj),
                    namespace,
                    job_id,
                )
        except KubeError as exc:
            log.warning("sweep: could not delete %s in %s: %s", _describe(obj), namespace, exc)
    return deleted


def _delete_for(job: Job, objects: list[dict[str, Any]], why: str) -> int:
    """Delete a known job's leftover objects, one JobEvent per object actually removed."""
    deleted = 0
    for obj in objects:
        if kube.delete_object(obj):
            deleted += 1
            reason = "OrphanDeleted" if job.state == JobState.CANCELLED else "RetentionExpired"
            job_record_event(
                job,
                reason=reason,
                message=f"deleted {_describe(obj)} from the cluster: {why}",
                source=SWEEP_SOURCE,
            )
            log.info("sweep: deleted %s of job %s: %s", _describe(obj), job.pk, why)
    return deleted
