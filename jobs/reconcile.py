"""Make the cluster match one job, then read back what the cluster says about it.

Level-triggered and idempotent: everything is derived from the Job row each time. Objects are
created by server-side apply under fixed names, so a second run (or two workers at once) changes
nothing. Drift policy: an object deleted by hand before the job started is recreated; one
deleted after the job was admitted or running marks the job Failed ("ObjectDeleted"), because
recreating it would silently restart a training run from scratch.
"""

import logging
from typing import Any

from django.utils import timezone

from jobs.manifests import job_selector, object_name, primary_manifest
from jobs.models import Job
from jobs.redact import redact_text
from jobs.selectors import job_manifests, jobs_to_resync
from jobs.services import InvalidTransition, job_note_status, job_transition
from jobs.states import JobState, can_transition
from jobs.status import ClusterSnapshot, StatusReading, map_cluster_status
from portal.kube import apply as kube
from portal.kube.apply import PermanentKubeError, RetryableKubeError
from portal.kube.labels import JOB_ID_KEY

log = logging.getLogger(__name__)
SOURCE = "reconciler"
RECREATE_STATES = frozenset({JobState.SUBMITTED, JobState.QUEUED})


def _apply_all(manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        try:
            kube.apply(manifest)
        except PermanentKubeError as exc:
            if exc.status == 404:
                # The project's namespace is not there yet (the quota sync creates it): wait.
                raise RetryableKubeError(f"not ready yet: {exc.message}", status=404) from exc
            raise


def delete_job_objects(job: Job) -> None:
    """Delete every object of the job by name (background propagation removes pods)."""
    ns = job.project.namespace
    name = object_name(job.pk)
    if job.backend == "volcano":
        kube.delete("batch.volcano.sh/v1alpha1", "Job", name, ns)
    else:
        kube.delete("batch/v1", "Job", name, ns)
        if job.kind == "gang":
            kube.delete("v1", "Service", name, ns)


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
            job, to=reading.state, reason=reading.reason, message=reading.message, source=SOURCE
        )
    except InvalidTransition:
        # Somebody (a cancel) moved it meanwhile; the next run sees the new state.
        log.info("job %s changed concurrently; skipping", job.pk)


def _fail(job: Job, reason: str, message: str) -> None:
    # The API server may quote an invalid env value; events and state are shown to viewers.
    message = redact_text(message, job.env)
    try:
        job_transition(job, to=JobState.FAILED, reason=reason, message=message, source=SOURCE)
    except InvalidTransition:
        log.info("job %s already finished; not marking it failed (%s)", job.pk, reason)


def job_reconcile(*, job_id: int) -> str:
    """One level-triggered pass over a job. Returns a short word saying what it did.

    Raises RetryableKubeError when the cluster could not be reached (the task retries);
    permanent rejections mark the job Failed with the API server's message.
    """
    job = Job.objects.select_related("project", "pool").filter(pk=job_id).first()
    if job is None:
        return "gone"
    if job.cleanup_pending:
        delete_job_objects(job)
        Job.objects.filter(pk=job.pk).update(cleanup_pending=False)
        return "deleted"
    if job.is_terminal:
        return "terminal"
    manifests = job_manifests(job)
    if job.applied_at is None:
        try:
            _apply_all(manifests)
        except PermanentKubeError as exc:
            _fail(job, "Rejected", f"the cluster rejected the job: {exc.message}")
            return "rejected"
        now = timezone.now()
        Job.objects.filter(pk=job.pk, applied_at__isnull=True).update(
            applied_at=now, last_reconciled_at=now
        )
        # A cancel that raced with this apply must not leave objects behind.
        if Job.objects.filter(pk=job.pk, cleanup_pending=True).exists():
            delete_job_objects(job)
            Job.objects.filter(pk=job.pk).update(cleanup_pending=False)
            return "deleted"
        return "applied"
    reading = read_status(job)
    Job.objects.filter(pk=job.pk).update(last_reconciled_at=timezone.now())
    if reading.missing:
        if job.state in RECREATE_STATES:
            try:
                _apply_all(manifests)
            except PermanentKubeError as exc:
                _fail(job, "Rejected", f"the cluster rejected the job: {exc.message}")
                return "rejected"
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
    kueue_jobs = [j for j in jobs if j.backend != "volcano"]
    volcano_jobs = [j for j in jobs if j.backend == "volcano"]
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


def resync_jobs(*, enqueue) -> dict[str, int]:
    """The periodic pass: read every namespace with live jobs in bulk, move jobs whose cluster
    status changed, and hand the rest (never applied, cancelled but not cleaned up, drifted,
    failed needing pod exit codes) to `enqueue(job_id)` for a full reconcile.

    A namespace whose reads fail is skipped this round and retried next period.
    """
    counts = {"moved": 0, "enqueued": 0, "unchanged": 0, "skipped": 0}
    by_namespace: dict[str, list[Job]] = {}
    for job in jobs_to_resync().select_related("project", "pool"):
        if job.cleanup_pending or job.applied_at is None:
            enqueue(job.pk)
            counts["enqueued"] += 1
            continue
        by_namespace.setdefault(job.project.namespace, []).append(job)
    for namespace, jobs in sorted(by_namespace.items()):
        try:
            snapshots = _namespace_snapshots(namespace, jobs)
        except RetryableKubeError as exc:
            log.warning("resync: cannot read namespace %s: %s", namespace, exc)
            counts["skipped"] += len(jobs)
            continue
        for job in jobs:
            reading = map_cluster_status(snapshots[job.pk])
            if reading.missing or reading.state == JobState.FAILED:
                enqueue(job.pk)
                counts["enqueued"] += 1
            elif reading.state is None or reading.state == job.state:
                _move(job, reading)
                counts["unchanged"] += 1
            else:
                _move(job, reading)
                counts["moved"] += 1
        Job.objects.filter(pk__in=[j.pk for j in jobs]).update(last_reconciled_at=timezone.now())
    return counts
