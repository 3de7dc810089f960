"""Cluster status → portal job state: the one mapping, pure, with a one-line reason.

Used by the reconcile task today and meant for the live watcher next: give it what the cluster
holds for one job (the batch Job or Volcano Job, the Kueue Workload or Volcano PodGroup, the pods)
and it says which portal state that is and why. Kueue conditions are read in Kueue's order
(Finished, deactivated, Evicted, Admitted/PodsReady, QuotaReserved); the batch Job's own terminal
conditions win because they are what the pods actually did.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from jobs.states import JobState

S = JobState


@dataclass(frozen=True)
class ClusterSnapshot:
    backend: str  # kueue | volcano | kai
    primary: dict[str, Any] | None  # batch/v1 Job or batch.volcano.sh Job; None = not found
    workload: dict[str, Any] | None = None  # Kueue Workload of the Job
    podgroup: dict[str, Any] | None = None  # Volcano PodGroup of the vcjob, KAI's of the Job
    pods: list[dict[str, Any]] = field(default_factory=list)
    expected_pods: int = 1


@dataclass(frozen=True)
class StatusReading:
    """What the cluster says. `state` None means "the object is missing" (drift) or "transient,
    keep what we have" — `missing` tells the two apart."""

    state: str | None
    reason: str
    message: str = ""
    missing: bool = False


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not obj:
        return {}
    items = (obj.get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c for c in items if isinstance(c, dict)}


def _true(conds: dict[str, dict[str, Any]], kind: str) -> dict[str, Any] | None:
    cond = conds.get(kind)
    return cond if cond and cond.get("status") == "True" else None


def pod_failure_summary(pods: list[dict[str, Any]]) -> str:
    """'pod gp-job-7-xyz exited with code 137 (OOMKilled)' for the first failed container."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        name = (pod.get("metadata") or {}).get("name", "?")
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        for status in statuses:
            term = (status.get("state") or {}).get("terminated") or (
                status.get("lastState") or {}
            ).get("terminated")
            if term and term.get("exitCode", 0) != 0:
                why = term.get("reason") or "Error"
                return f"pod {name} exited with code {term.get('exitCode')} ({why})"
        if (pod.get("status") or {}).get("phase") == "Failed":
            reason = (pod.get("status") or {}).get("reason") or "Failed"
            return f"pod {name} failed ({reason})"
    return ""


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _batch_job_terminal(job: dict[str, Any], pods: list[dict[str, Any]]) -> StatusReading | None:
    conds = _conditions(job)
    done = _true(conds, "Complete") or _true(conds, "SuccessCriteriaMet")
    if done and not _true(conds, "Failed"):
        return StatusReading(S.SUCCEEDED, "Completed", done.get("message") or "")
    if failed := (_true(conds, "Failed") or _true(conds, "FailureTarget")):
        reason = failed.get("reason") or "Failed"
        if reason == "DeadlineExceeded":
            text = "exceeded its maximum runtime"
        else:
            text = failed.get("message") or "the job failed"
        return StatusReading(S.FAILED, reason, _join(text, pod_failure_summary(pods)))
    return None


def _batch_job_progress(job: dict[str, Any], expected: int) -> StatusReading:
    status = job.get("status") or {}
    ready = int(status.get("ready") or 0)
    active = int(status.get("active") or 0)
    if active and ready >= expected:
        return StatusReading(S.RUNNING, "PodsRunning", f"{ready}/{expected} pods ready")
    return StatusReading(S.ADMITTED, "PodsStarting", f"{ready}/{expected} pods ready")


def map_kueue(snapshot: ClusterSnapshot) -> StatusReading:
    job = snapshot.primary
    if job is None:
        return StatusReading(None, "ObjectMissing", "the batch Job is gone", missing=True)
    if terminal := _batch_job_terminal(job, snapshot.pods):
        return terminal
    wl = snapshot.workload
    suspended = bool((job.get("spec") or {}).get("suspend"))
    if wl is None:
        if not suspended and (job.get("status") or {}).get("active"):
            return _batch_job_progress(job, snapshot.expected_pods)
        return StatusReading(S.SUBMITTED, "WaitingForWorkload", "Kueue has not picked it up yet")
    conds = _conditions(wl)
    if finished := _true(conds, "Finished"):
        if finished.get("reason") == "Succeeded":
            return StatusReading(S.SUCCEEDED, "Succeeded", finished.get("message") or "")
        return StatusReading(
            S.FAILED,
            finished.get("reason") or "Failed",
            _join(finished.get("message") or "", pod_failure_summary(snapshot.pods)),
        )
    evicted = _true(conds, "Evicted")
    inactive = (wl.get("spec") or {}).get("active") is False
    if inactive or (evicted and evicted.get("reason") == "Deactivated"):
        why = (evicted or {}).get("message") or "the workload was deactivated"
        return StatusReading(S.FAILED, "Deactivated", why)
    if evicted:
        preempted = _true(conds, "Preempted")
        detail = preempted or evicted
        return StatusReading(
            S.PREEMPTED, detail.get("reason") or "Evicted", detail.get("message") or ""
        )
    if _true(conds, "Admitted"):
        if _true(conds, "PodsReady"):
            return StatusReading(S.RUNNING, "PodsReady", "all pods are running")
        return _batch_job_progress(job, snapshot.expected_pods)
    reserved = _true(conds, "QuotaReserved")
    if reserved:
        return StatusReading(S.QUEUED, "AwaitingAdmissionChecks", reserved.get("message") or "")
    pending = conds.get("QuotaReserved") or {}
    return StatusReading(
        S.QUEUED,
        pending.get("reason") or "Pending",
        pending.get("message") or "waiting for quota",
    )


def map_volcano(snapshot: ClusterSnapshot) -> StatusReading:
    vcjob = snapshot.primary
    if vcjob is None:
        return StatusReading(None, "ObjectMissing", "the Volcano Job is gone", missing=True)
    state = (vcjob.get("status") or {}).get("state") or {}
    phase = state.get("phase") or "Pending"
    message = state.get("message") or ""
    if phase == "Completed":
        return StatusReading(S.SUCCEEDED, "Completed", message)
    if phase in ("Failed", "Terminated", "Aborted"):
        return StatusReading(S.FAILED, phase, _join(message, pod_failure_summary(snapshot.pods)))
    if phase == "Running":
        pg_phase = ((snapshot.podgroup or {}).get("status") or {}).get("phase")
        if pg_phase == "Unknown":
            return StatusReading(
                S.RUNNING, "GangDegraded", "some gang members were lost and cannot be placed"
            )
        return StatusReading(S.RUNNING, "Running", message)
    if phase == "Restarting":
        retries = (vcjob.get("status") or {}).get("retryCount", 0)
        return StatusReading(S.PREEMPTED, "Restarting", f"gang restarting (retry {retries})")
    if phase in ("Completing", "Terminating", "Aborting"):
        return StatusReading(None, phase, "transient")
    # Pending: ask the PodGroup whether the gang was let in.
    podgroup = snapshot.podgroup or {}
    pg_status = podgroup.get("status") or {}
    if pg_status.get("phase") in ("Inqueue", "Running"):
        return StatusReading(S.ADMITTED, "GangAdmitted", "the gang is being placed")
    conds = pg_status.get("conditions") or []
    newest = conds[-1] if conds else {}
    return StatusReading(
        S.QUEUED,
        newest.get("reason") or "Pending",
        newest.get("message") or "waiting for the gang to be admitted",
    )


def kai_waiting_reason(podgroup: dict[str, Any] | None) -> tuple[str, str] | None:
    """(reason, message) of the newest reason KAI gives for a PodGroup that waits: its
    UnschedulableOnNodePool scheduling condition (reasons[] first, the deprecated top-level
    reason and message otherwise)."""
    conditions = ((podgroup or {}).get("status") or {}).get("schedulingConditions") or []
    for condition in reversed(conditions):
        if not isinstance(condition, dict) or condition.get("status", "True") != "True":
            continue
        for entry in condition.get("reasons") or []:
            if isinstance(entry, dict) and entry.get("reason"):
                return str(entry["reason"]), str(entry.get("message") or "")
        if condition.get("message") or condition.get("reason"):
            return str(condition.get("reason") or "Unschedulable"), str(
                condition.get("message") or ""
            )
    return None


def map_kai(snapshot: ClusterSnapshot) -> StatusReading:
    """A batch Job under KAI Scheduler: the Job says how it ended, the pods whether KAI bound
    them, the PodGroup why it waits. The Job is never suspended, so its pods exist (Pending)
    while KAI has not placed them."""
    job = snapshot.primary
    if job is None:
        return StatusReading(None, "ObjectMissing", "the batch Job is gone", missing=True)
    if terminal := _batch_job_terminal(job, snapshot.pods):
        return terminal
    status = job.get("status") or {}
    live = [p for p in snapshot.pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    bound = [p for p in live if (p.get("spec") or {}).get("nodeName")]
    ready = int(status.get("ready") or 0)
    expected = snapshot.expected_pods
    if ready >= expected and status.get("active"):
        return StatusReading(S.RUNNING, "PodsRunning", f"{ready}/{expected} pods ready")
    if bound and len(bound) >= expected:
        return StatusReading(S.ADMITTED, "PodsStarting", f"{ready}/{expected} pods ready")
    if len(live) < len(snapshot.pods) and not bound:
        return StatusReading(
            S.PREEMPTED, "Evicted", "KAI Scheduler evicted the job's pods; it waits to run again"
        )
    waiting = kai_waiting_reason(snapshot.podgroup)
    if waiting is not None:
        return StatusReading(S.QUEUED, waiting[0], waiting[1])
    if snapshot.podgroup is None and not status.get("active") and not snapshot.pods:
        return StatusReading(S.SUBMITTED, "WaitingForPods", "the Job has not created its pods")
    return StatusReading(S.QUEUED, "Pending", "waiting for KAI Scheduler to place the job")


def map_cluster_status(snapshot: ClusterSnapshot) -> StatusReading:
    if snapshot.backend == "volcano":
        return map_volcano(snapshot)
    if snapshot.backend == "kai":
        return map_kai(snapshot)
    return map_kueue(snapshot)


# ---------------------------------------------------------------------------------------------
# Out of memory: the kubelet's verdict, read from the pods.
#
# The Job's podFailurePolicy cannot tell an out-of-memory kill from the SIGKILL that ends a
# preempted (suspended) pod after its grace period: both exit 137, and a suspension gives the
# pod no DisruptionTarget condition. So the policy keeps ignoring 137 (preemption requeues) and
# the portal fails the job at once when the kubelet says the container was OOMKilled on a pod
# that is not being deleted.


def _memory_limit(pod: dict[str, Any], container: str) -> str:
    for spec in (pod.get("spec") or {}).get("containers") or []:
        if spec.get("name") == container:
            return str(((spec.get("resources") or {}).get("limits") or {}).get("memory") or "")
    return ""


def oom_killed(pods: list[dict[str, Any]]) -> StatusReading | None:
    """A Failed reading when a container of a live (not deleting) pod was OOMKilled."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or _true(_conditions(pod), "DisruptionTarget"):
            continue
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            term = (status.get("state") or {}).get("terminated") or (
                status.get("lastState") or {}
            ).get("terminated")
            if term and term.get("reason") == "OOMKilled":
                limit = _memory_limit(pod, status.get("name", ""))
                text = "the container ran out of memory" + (f" (limit {limit})" if limit else "")
                return StatusReading(
                    S.FAILED,
                    "OOMKilled",
                    _join(text, f"pod {meta.get('name', '?')} exited with code 137 (OOMKilled)"),
                )
    return None


def map_with_pods(snapshot: ClusterSnapshot) -> StatusReading:
    """map_cluster_status, plus the kubelet's OOM verdict when the pods are known."""
    reading = map_cluster_status(snapshot)
    if reading.state in (S.SUCCEEDED, S.FAILED) or reading.missing:
        return reading
    return oom_killed(snapshot.pods) or reading


# ---------------------------------------------------------------------------------------------
# Building snapshots from watched objects, and where the pods ran.

JOB_ID_LABEL = "gpu-portal.io/job-id"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
VOLCANO_TASK_INDEX = "volcano.sh/task-index"
VOLCANO_TASK_SPEC = "volcano.sh/task-spec"
GPU_UUIDS_ANNOTATIONS = ("kubesim.dev/gpu-uuids", "nvidia.com/gpu-uuids")
GPU_INDICES_ANNOTATIONS = ("kubesim.dev/gpu-indices", "nvidia.com/gpu-indices")
# KAI GPU sharing: a fraction pod's shared GPU is the group its label names; the reservation pod
# of the group (namespace kai-resource-reservation) holds the GPU and its UUID annotation.
KAI_GPU_GROUP_LABEL = "runai-gpu-group"
KAI_RESERVATION_NAMESPACE = "kai-resource-reservation"
KAI_RESERVED_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"


def job_id_of(obj: dict[str, Any]) -> int | None:
    """The portal job id a cluster object belongs to, from the portal's label."""
    value = ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_ID_LABEL)
    return int(value) if value and str(value).isdigit() else None


def owner_uids(obj: dict[str, Any]) -> list[str]:
    meta = obj.get("metadata") or {}
    uids = [o.get("uid", "") for o in meta.get("ownerReferences") or []]
    label = (meta.get("labels") or {}).get(KUEUE_JOB_UID_LABEL)
    return [u for u in ([label] if label else []) + uids if u]


def pod_rank(pod: dict[str, Any]) -> int | None:
    """Rank of a gang pod: the Indexed Job's completion index, or Volcano's master 0 and
    worker i+1; None when the pod says neither."""
    meta = pod.get("metadata") or {}
    annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
    index = annotations.get(COMPLETION_INDEX) or labels.get(COMPLETION_INDEX)
    if index is not None and str(index).isdigit():
        return int(index)
    task = annotations.get(VOLCANO_TASK_SPEC) or labels.get(VOLCANO_TASK_SPEC)
    task_index = annotations.get(VOLCANO_TASK_INDEX) or labels.get(VOLCANO_TASK_INDEX)
    if task and task_index is not None and str(task_index).isdigit():
        return int(task_index) + (0 if task == "master" else 1)
    return None


@dataclass(frozen=True)
class PodRecord:
    """What the portal keeps about one pod (jobs.models.JobPod)."""

    uid: str
    name: str
    rank: int | None
    node: str
    phase: str
    started_at: str | None
    finished_at: str | None
    gpu_uuids: list[str]
    gpu_indices: list[int]
    exit_code: int | None
    reason: str
    message: str
    restart_count: int
    container: str
    gpu_group: str = ""  # KAI: the shared GPU (group) a fraction pod is on


def kai_gpu_group(pod: dict[str, Any]) -> str:
    """The KAI GPU group of a fraction pod: the runai-gpu-group label, or with several devices
    the first runai-gpu-group/<group> label's value; "" for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(KAI_GPU_GROUP_LABEL):
        return str(labels[KAI_GPU_GROUP_LABEL])
    for key in sorted(labels):
        if key.startswith(KAI_GPU_GROUP_LABEL + "/"):
            return str(labels[key])
    return ""


def kai_reservations(reservation_pods: list[dict[str, Any]]) -> dict[str, tuple[str, str, str]]:
    """group → (reservation pod name, node, GPU UUID) from the pods of kai-resource-reservation
    (the UUID is "" until the reservation pod has written it)."""
    out: dict[str, tuple[str, str, str]] = {}
    for pod in reservation_pods:
        meta = pod.get("metadata") or {}
        group = ((meta.get("labels") or {}).get(KAI_GPU_GROUP_LABEL)) or ""
        if not group or meta.get("deletionTimestamp"):
            continue
        uuid = (meta.get("annotations") or {}).get(KAI_RESERVED_GPU_ANNOTATION) or ""
        out[group] = (meta.get("name") or "", (pod.get("spec") or {}).get("nodeName") or "", uuid)
    return out


def with_shared_gpu(record: PodRecord, reservations: dict[str, tuple[str, str, str]]) -> PodRecord:
    """A fraction pod's record with the UUID of the GPU it shares (its device plugin gave the
    GPU to the reservation pod, so the pod itself names none)."""
    if not record.gpu_group or record.gpu_uuids:
        return record
    found = reservations.get(record.gpu_group)
    if not found or not found[2]:
        return record
    return dataclasses.replace(record, gpu_uuids=[found[2]])


def dra_claim_names(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaims made for a DRA pod (status.resourceClaimStatuses); [] for others."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return [str(s["resourceClaimName"]) for s in statuses if s.get("resourceClaimName")]


def with_gpu_uuids(record: PodRecord, uuids: list[str]) -> PodRecord:
    """The record naming these GPUs, unless it names some already (the kubelet's word wins)."""
    if record.gpu_uuids or not uuids:
        return record
    return dataclasses.replace(record, gpu_uuids=list(uuids))


def pod_record(pod: dict[str, Any]) -> PodRecord:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    uuids: list[str] = []
    for key in GPU_UUIDS_ANNOTATIONS:
        if annotations.get(key):
            uuids = [u for u in str(annotations[key]).split(",") if u]
            break
    indices: list[int] = []
    for key in GPU_INDICES_ANNOTATIONS:
        if annotations.get(key):
            indices = [int(i) for i in str(annotations[key]).split(",") if i.strip().isdigit()]
            break
    exit_code, reason, message, container, finished, restarts = None, "", "", "", None, 0
    started = status.get("startTime")
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        restarts += int(cs.get("restartCount") or 0)
        running = (cs.get("state") or {}).get("running")
        if running and running.get("startedAt"):
            started = started or running["startedAt"]
    # The container that failed (else the first) tells the story.
    chosen = None
    for cs in statuses:
        term = (cs.get("state") or {}).get("terminated")
        if term and (chosen is None or int(term.get("exitCode") or 0) != 0):
            chosen = (cs, term)
            if int(term.get("exitCode") or 0) != 0:
                break
    if chosen is not None:
        cs, term = chosen
        exit_code = int(term.get("exitCode") or 0)
        reason = term.get("reason") or ""
        message = term.get("message") or ""
        container = cs.get("name") or ""
        finished = term.get("finishedAt")
    elif statuses:
        waiting = (statuses[0].get("state") or {}).get("waiting") or {}
        reason, message = waiting.get("reason") or "", waiting.get("message") or ""
        container = statuses[0].get("name") or ""
    if not reason and status.get("reason"):
        reason, message = status.get("reason") or "", status.get("message") or ""
    return PodRecord(
        uid=meta.get("uid", ""),
        name=meta.get("name", ""),
        rank=pod_rank(pod),
        node=spec.get("nodeName") or "",
        phase=status.get("phase") or "",
        started_at=started,
        finished_at=finished,
        gpu_uuids=uuids,
        gpu_indices=indices,
        exit_code=exit_code,
        reason=reason,
        message=message,
        restart_count=restarts,
        container=container,
        gpu_group=kai_gpu_group(pod),
    )


def failing_pod(pods: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(pod name, container name) of the first container that ended with a non-zero code."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        record = pod_record(pod)
        if record.exit_code not in (None, 0) and record.container:
            return record.name, record.container
    return None
