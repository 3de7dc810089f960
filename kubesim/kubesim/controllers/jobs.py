"""The batch/v1 Job controller, as Kubernetes 1.31+ runs it.

Creates pods for unsuspended Jobs (NonIndexed and Indexed completion modes), within parallelism
and completions; counts finished pods through the batch.kubernetes.io/job-tracking finalizer (a
pod that is deleted before it succeeds counts as failed); recreates failed pods with exponential
back-off until backoffLimit; enforces activeDeadlineSeconds; deletes active pods when a Job is
suspended (this is how Kueue evicts); sets status (active, ready, terminating, succeeded, failed,
completedIndexes, startTime, completionTime) and the conditions SuccessCriteriaMet -> Complete,
FailureTarget -> Failed and Suspended with the upstream reasons and messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import traceback

from kubesim.api.errors import ApiError
from kubesim.clock import parse_rfc3339, rfc3339
from kubesim.controllers import events
from kubesim.controllers.context import follow

FIELD_MANAGER = "job-controller"
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
DEFAULT_BACKOFF = 10.0
MAX_BACKOFF = 360.0

MSG_BACKOFF = "Job has reached the specified backoff limit"
MSG_DEADLINE = "Job was active longer than specified deadline"
MSG_COMPLETIONS = "Reached expected number of succeeded pods"


def default_job(operation: str, job: dict, old: dict | None) -> None:
    """Admission defaults of a Job (what kube-apiserver's defaulting and PrepareForCreate add)."""
    if operation != "CREATE":
        return
    spec = job.setdefault("spec", {})
    meta = job.setdefault("metadata", {})
    spec.setdefault("parallelism", 1)
    if "completions" not in spec and spec.get("completionMode") == "Indexed":
        spec["completions"] = spec["parallelism"]
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    labels = tmeta.setdefault("labels", {})
    uid = meta.get("uid")
    name = meta.get("name") or ""
    if uid and not spec.get("manualSelector"):
        spec.setdefault("selector", {"matchLabels": {CONTROLLER_UID_LABEL: uid}})
        labels.setdefault(CONTROLLER_UID_LABEL, uid)
        labels.setdefault("controller-uid", uid)
    if name:
        labels.setdefault(JOB_NAME_LABEL, name)
        labels.setdefault("job-name", name)
    pod_spec = template.setdefault("spec", {})
    pod_spec.setdefault("restartPolicy", "Never")
    pod_spec.setdefault("terminationGracePeriodSeconds", 30)
    pod_spec.setdefault("dnsPolicy", "ClusterFirst")
    pod_spec.setdefault("schedulerName", "default-scheduler")


def _condition(ctype: str, status: str, reason: str, message: str, now: str) -> dict:
    return {
        "type": ctype,
        "status": status,
        "lastProbeTime": now,
        "lastTransitionTime": now,
        "reason": reason,
        "message": message,
    }


def _has_condition(job: dict, ctype: str, status: str = "True") -> bool:
    return any(
        c.get("type") == ctype and c.get("status") == status
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _ranges(indexes: set[int]) -> str:
    """ "0-2,4" as status.completedIndexes writes it."""
    out: list[str] = []
    items = sorted(indexes)
    i = 0
    while i < len(items):
        j = i
        while j + 1 < len(items) and items[j + 1] == items[j] + 1:
            j += 1
        out.append(str(items[i]) if i == j else f"{items[i]}-{items[j]}")
        i = j + 1
    return ",".join(out)


def _parse_ranges(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            out.update(range(int(low), int(high) + 1))
        else:
            out.add(int(part))
    return out


def _pod_index(pod: dict) -> int | None:
    meta = pod["metadata"]
    value = (meta.get("annotations") or {}).get(INDEX_KEY) or (meta.get("labels") or {}).get(
        INDEX_KEY
    )
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _is_ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _past_backoff_limit_on_failure(spec: dict, active_pods: list[dict], backoff_limit: int) -> bool:
    """restartPolicy OnFailure: container restarts of the active pods count against the limit."""
    template_spec = (spec.get("template") or {}).get("spec") or {}
    if template_spec.get("restartPolicy") != "OnFailure":
        return False
    restarts = sum(
        int(status.get("restartCount") or 0)
        for pod in active_pods
        for key in ("initContainerStatuses", "containerStatuses")
        for status in (pod.get("status") or {}).get(key) or []
    )
    return restarts > 0 if backoff_limit == 0 else restarts >= backoff_limit


def _exit_codes(pod: dict, container_name: str | None) -> list[tuple[str, int]]:
    out = []
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is None or (container_name and cs.get("name") != container_name):
                continue
            out.append((cs.get("name"), int(terminated.get("exitCode") or 0)))
    return out


def _with_disruption_target(pod: dict) -> dict:
    status = dict(pod.get("status") or {})
    status["conditions"] = [
        *(status.get("conditions") or []),
        {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC"},
    ]
    return {**pod, "status": status}


def match_pod_failure_policy(policy: dict | None, pod: dict) -> tuple[str, str]:
    """(action, FailJob message) of the first podFailurePolicy rule a failed pod matches; the
    action is "Count" when no rule matches (or there is no policy)."""
    if not policy:
        return "Count", ""
    meta = pod["metadata"]
    where = f"{meta.get('namespace')}/{meta['name']}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        on_exit = rule.get("onExitCodes")
        if on_exit:
            values = set(on_exit.get("values") or [])
            for name, code in _exit_codes(pod, on_exit.get("containerName")):
                if on_exit.get("operator") == "In":
                    hit = code in values
                else:  # NotIn ignores containers that succeeded
                    hit = code != 0 and code not in values
                if hit:
                    return action, (
                        f"Container {name} for pod {where} failed with exit code {code} "
                        f"matching {action} rule at index {index}"
                    )
            continue
        for pattern in rule.get("onPodConditions") or []:
            wanted = pattern.get("status") or "True"
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if (
                    condition.get("type") == pattern.get("type")
                    and condition.get("status") == wanted
                ):
                    return action, (
                        f"Pod {where} has condition {pattern.get('type')} "
                        f"matching {action} rule at index {index}"
                    )
    return "Count", ""


def _job_owner_uid(pod: dict) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if (
            ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
            and ref.get("controller")
        ):
            return ref.get("uid")
    return None


class JobController:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.pods: dict[str, dict[tuple[str, str], dict]] = {}  # job uid -> pod key -> pod
        self.jobs: dict[str, tuple[str, str]] = {}  # job uid -> (namespace, name)
        self.dirty: set[tuple[str, str]] = set()
        self.wake = asyncio.Event()
        self.failures_at: dict[str, float] = {}  # job uid -> sim time of last counted failure

    # -- events
    def enqueue(self, key: tuple[str, str]) -> None:
        self.dirty.add(key)
        self.wake.set()

    def enqueue_later(self, key: tuple[str, str], sim_seconds: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(max(0.0, sim_seconds) / self.clock.speed + 0.01, self.enqueue, key)

    def on_job(self, event_type: str, job: dict) -> None:
        meta = job["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if event_type == "DELETED":
            uid = meta.get("uid")
            if uid:
                self.jobs.pop(uid, None)
                # Orphaned or garbage-collected pods must not be held by the tracking finalizer.
                for pod in list(self.pods.pop(uid, {}).values()):
                    if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                        self._remove_finalizer(pod)
            return
        self.jobs[meta["uid"]] = key
        self.enqueue(key)

    def on_pod(self, event_type: str, pod: dict) -> None:
        owner = _job_owner_uid(pod) if pod["metadata"].get("ownerReferences") else None
        if owner is None:
            return
        meta = pod["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        pods = self.pods.setdefault(owner, {})
        if event_type == "DELETED":
            pods.pop(key, None)
        else:
            pods[key] = pod
        job_key = self.jobs.get(owner)
        if job_key is not None:
            self.enqueue(job_key)
        elif (
            event_type != "DELETED"
            and meta.get("deletionTimestamp")
            and TRACKING_FINALIZER in (meta.get("finalizers") or [])
            and self._owner_gone(pod, owner)
        ):
            self._remove_finalizer(pod)

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.005)
            batch = list(self.dirty)
            self.dirty.clear()
            for n, key in enumerate(batch):
                try:
                    self.sync(key)
                except ApiError as exc:
                    if exc.code == 409:
                        self.enqueue(key)
                    elif exc.code != 404:
                        traceback.print_exc()
                except Exception:
                    traceback.print_exc()
                if n % 50 == 49:
                    await asyncio.sleep(0)

    # -- sync
    def record(self, job: dict, reason: str, message: str, type: str = "Normal") -> None:
        events.record(self.store, job, reason, message, type=type, component="job-controller")

    def sync(self, key: tuple[str, str]) -> None:
        job = self.store.try_get("batch/v1", "Job", key[0], key[1])
        if job is None:
            return
        if job["metadata"].get("deletionTimestamp"):
            self._release_all(job)
            return
        spec = job.get("spec") or {}
        uid = job["metadata"]["uid"]
        if not spec.get("selector") and not spec.get("manualSelector"):
            # The apiserver generates the selector from the uid, which admission hooks do not see
            # yet; the controller fills it in on first sight.
            job = self.store.patch(
                "batch/v1",
                "Job",
                key[0],
                key[1],
                {"spec": {"selector": {"matchLabels": {CONTROLLER_UID_LABEL: uid}}}},
                field_manager=FIELD_MANAGER,
            )
            spec = job.get("spec") or {}
        status = copy.deepcopy(job.get("status") or {})
        now_dt = self.clock.now()
        now = rfc3339(now_dt)
        pods = list(self.pods.get(uid, {}).values())
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        parallelism = spec.get("parallelism", 1)
        if parallelism is None:
            parallelism = 1
        backoff_limit = spec.get("backoffLimit", 6)
        if backoff_limit is None:
            backoff_limit = 6
        finished = _has_condition(job, "Complete") or _has_condition(job, "Failed")

        # 1. Count finished pods (once each: the tracking finalizer is the marker).
        succeeded = int(status.get("succeeded") or 0)
        failed = int(status.get("failed") or 0)
        completed_indexes = _parse_ranges(status.get("completedIndexes"))
        to_unfinalize: list[dict] = []
        fail_job_message: str | None = None
        for pod in pods:
            meta = pod["metadata"]
            if TRACKING_FINALIZER not in (meta.get("finalizers") or []):
                continue
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Succeeded":
                index = _pod_index(pod)
                if indexed and index is not None:
                    if index not in completed_indexes and (
                        completions is None or index < completions
                    ):
                        completed_indexes.add(index)
                        succeeded += 1
                else:
                    succeeded += 1
                to_unfinalize.append(pod)
            elif phase == "Failed" or meta.get("deletionTimestamp"):
                if phase != "Failed" and not self._terminal_or_gone(pod):
                    continue  # still terminating: counted when the kubelet reports the end
                to_unfinalize.append(pod)
                if phase != "Failed" and spec.get("podFailurePolicy"):
                    # A pod deleted before any kubelet ran it (Pending when its Job was
                    # suspended): upstream's PodGC marks it Failed with DisruptionTarget
                    # (DeletionByPodGC), and with a podFailurePolicy only Failed pods count.
                    pod = _with_disruption_target(pod)
                action, message = match_pod_failure_policy(spec.get("podFailurePolicy"), pod)
                if action == "Ignore":
                    continue
                if action == "FailJob" and fail_job_message is None:
                    fail_job_message = message
                failed += 1
                self.failures_at[uid] = self.clock.time()

        active_pods = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        terminating = [
            p
            for p in pods
            if p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        conditions = list(status.get("conditions") or [])

        def add_condition(cond: dict) -> None:
            nonlocal conditions
            for i, existing in enumerate(conditions):
                if existing.get("type") == cond["type"]:
                    if (
                        existing.get("status") == cond["status"]
                        and existing.get("reason") == cond["reason"]
                    ):
                        return
                    conditions[i] = cond
                    return
            conditions.append(cond)

        def has(ctype: str) -> bool:
            return any(c.get("type") == ctype and c.get("status") == "True" for c in conditions)

        suspended = bool(spec.get("suspend"))
        delete_pods: list[dict] = []
        create_indexes: list[int | None] = []

        if not finished:
            # 2. Terminal decisions (the *Target conditions first, the final one once no pod runs).
            if not has("FailureTarget") and not has("SuccessCriteriaMet"):
                if fail_job_message is not None:
                    add_condition(
                        _condition(
                            "FailureTarget", "True", "PodFailurePolicy", fail_job_message, now
                        )
                    )
                    self.record(job, "PodFailurePolicy", fail_job_message, "Warning")
                elif failed > backoff_limit or _past_backoff_limit_on_failure(
                    spec, active_pods, backoff_limit
                ):
                    add_condition(
                        _condition(
                            "FailureTarget", "True", "BackoffLimitExceeded", MSG_BACKOFF, now
                        )
                    )
                    self.record(job, "BackoffLimitExceeded", MSG_BACKOFF, "Warning")
                elif (
                    spec.get("activeDeadlineSeconds") is not None
                    and status.get("startTime")
                    and not suspended
                    and (now_dt - parse_rfc3339(status["startTime"])).total_seconds()
                    >= spec["activeDeadlineSeconds"]
                ):
                    add_condition(
                        _condition("FailureTarget", "True", "DeadlineExceeded", MSG_DEADLINE, now)
                    )
                    self.record(job, "DeadlineExceeded", MSG_DEADLINE, "Warning")
                elif self._success(indexed, completions, succeeded, completed_indexes, active_pods):
                    add_condition(
                        _condition(
                            "SuccessCriteriaMet", "True", "CompletionsReached", MSG_COMPLETIONS, now
                        )
                    )
            if has("FailureTarget") or has("SuccessCriteriaMet"):
                delete_pods = active_pods
                if (
                    not active_pods
                    and not terminating
                    and not [
                        p
                        for p in pods
                        if TRACKING_FINALIZER in (p["metadata"].get("finalizers") or [])
                        and p not in to_unfinalize
                    ]
                ):
                    target = next(
                        c
                        for c in conditions
                        if c.get("type") in ("FailureTarget", "SuccessCriteriaMet")
                        and c.get("status") == "True"
                    )
                    if target["type"] == "FailureTarget":
                        add_condition(
                            _condition("Failed", "True", target["reason"], target["message"], now)
                        )
                    else:
                        add_condition(
                            _condition("Complete", "True", target["reason"], target["message"], now)
                        )
                        status["completionTime"] = now
                        self.record(job, "Completed", "Job completed")
            elif suspended:
                # startTime stays (Kueue's job reconciler is what clears it on eviction); a
                # resume resets it.
                delete_pods = active_pods
                if not has("Suspended"):
                    add_condition(
                        _condition("Suspended", "True", "JobSuspended", "Job suspended", now)
                    )
                    self.record(job, "Suspended", "Job suspended")
            else:
                if any(
                    c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions
                ):
                    add_condition(
                        _condition("Suspended", "False", "JobResumed", "Job resumed", now)
                    )
                    self.record(job, "Resumed", "Job resumed")
                    status["startTime"] = now
                if not status.get("startTime"):
                    status["startTime"] = now
                if spec.get("activeDeadlineSeconds") is not None:
                    started = parse_rfc3339(status["startTime"])
                    remaining = spec["activeDeadlineSeconds"] - (now_dt - started).total_seconds()
                    self.enqueue_later(key, remaining)
                # 3. Create pods up to parallelism, after the failure back-off.
                delay = self._backoff_delay(uid, failed)
                if delay > 0:
                    self.enqueue_later(key, delay)
                else:
                    create_indexes = self._wanted(
                        indexed,
                        completions,
                        parallelism,
                        succeeded,
                        completed_indexes,
                        active_pods,
                        terminating,
                        spec,
                    )
        else:
            delete_pods = active_pods
            self._expire(job, key)

        # 4. Writes: status first (so counts are never lost), then finalizers, pods.
        status["active"] = (
            len(active_pods)
            - len([p for p in delete_pods if p in active_pods])
            + len(create_indexes)
        )
        status["ready"] = sum(1 for p in active_pods if _is_ready(p) and p not in delete_pods)
        status["terminating"] = len(terminating) + len(delete_pods)
        status["succeeded"] = succeeded
        status["failed"] = failed
        status["uncountedTerminatedPods"] = {}
        if indexed:
            status["completedIndexes"] = _ranges(completed_indexes)
        for field in ("succeeded", "failed", "active", "terminating"):
            if not status.get(field):
                status.pop(field, None)
        status["conditions"] = conditions
        if not conditions:
            status.pop("conditions", None)
        if status != (job.get("status") or {}):
            self._write_status(job, status)
        for pod in to_unfinalize:
            self._remove_finalizer(pod)
        for pod in delete_pods:
            self._delete_pod(job, pod)
        for index in create_indexes:
            self._create_pod(job, index)

    def _owner_gone(self, pod: dict, owner_uid: str) -> bool:
        ref = next(r for r in pod["metadata"]["ownerReferences"] if r.get("uid") == owner_uid)
        job = self.store.try_get("batch/v1", "Job", pod["metadata"].get("namespace"), ref["name"])
        return job is None or job["metadata"].get("uid") != owner_uid

    def _expire(self, job: dict, key: tuple[str, str]) -> None:
        """The TTL-after-finished controller: delete a finished Job once its TTL has passed."""
        ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished_at = next(
            (
                c.get("lastTransitionTime")
                for c in (job.get("status") or {}).get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        if not finished_at:
            return
        remaining = parse_rfc3339(finished_at).timestamp() + ttl - self.clock.time()
        if remaining > 0:
            self.enqueue_later(key, remaining)
            return
        with contextlib.suppress(ApiError):
            self.store.delete(
                "batch/v1",
                "Job",
                key[0],
                key[1],
                propagation="Foreground",
                preconditions={"uid": job["metadata"]["uid"]},
            )

    def _write_status(self, job: dict, status: dict) -> None:
        current = dict(job)
        current["status"] = status
        self.store.update(current, subresource="status", field_manager=FIELD_MANAGER)

    def _terminal_or_gone(self, pod: dict) -> bool:
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed") or not (
            pod.get("spec") or {}
        ).get("nodeName")

    @staticmethod
    def _success(indexed, completions, succeeded, completed_indexes, active_pods) -> bool:
        if indexed:
            return completions is not None and len(completed_indexes) >= completions
        if completions is None:
            return succeeded > 0 and not active_pods
        return succeeded >= completions

    def _backoff_delay(self, uid: str, failed: int) -> float:
        if failed <= 0 or uid not in self.failures_at:
            return 0.0
        backoff = min(DEFAULT_BACKOFF * (2 ** (failed - 1)), MAX_BACKOFF)
        return self.failures_at[uid] + backoff - self.clock.time()

    @staticmethod
    def _wanted(
        indexed,
        completions,
        parallelism,
        succeeded,
        completed_indexes,
        active_pods,
        terminating,
        spec,
    ):
        active = len(active_pods)
        if spec.get("podReplacementPolicy") == "Failed":
            active += len(terminating)
        if indexed:
            busy = {_pod_index(p) for p in active_pods}
            if spec.get("podReplacementPolicy") == "Failed":
                busy |= {_pod_index(p) for p in terminating}
            free = [
                i for i in range(completions or 0) if i not in completed_indexes and i not in busy
            ]
            room = max(0, parallelism - active)
            return free[:room]
        if completions is None:
            if succeeded > 0:
                return []
            want = parallelism
        else:
            want = min(parallelism, completions - succeeded)
        return [None] * max(0, want - active)

    def _create_pod(self, job: dict, index: int | None) -> None:
        meta = job["metadata"]
        name = meta["name"]
        template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
        tmeta = template.get("metadata") or {}
        pod_spec = template.get("spec") or {}
        labels = dict(tmeta.get("labels") or {})
        labels.setdefault(CONTROLLER_UID_LABEL, meta["uid"])
        labels.setdefault(JOB_NAME_LABEL, name)
        labels.setdefault("controller-uid", meta["uid"])
        labels.setdefault("job-name", name)
        annotations = dict(tmeta.get("annotations") or {})
        generate = f"{name}-"
        if index is not None:
            annotations[INDEX_KEY] = str(index)
            labels[INDEX_KEY] = str(index)
            generate = f"{name}-{index}-"
            pod_spec["hostname"] = f"{name}-{index}"
            for container in (pod_spec.get("initContainers") or []) + (
                pod_spec.get("containers") or []
            ):
                env = container.setdefault("env", [])
                if not any(e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
                    # appended, from the index label (PodIndexLabel, GA in 1.32)
                    env.append(
                        {
                            "name": "JOB_COMPLETION_INDEX",
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": f"metadata.labels['{INDEX_KEY}']",
                                }
                            },
                        },
                    )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": generate,
                "namespace": meta.get("namespace"),
                "labels": labels,
                "annotations": annotations,
                "finalizers": [TRACKING_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec,
        }
        if not annotations:
            del pod["metadata"]["annotations"]
        try:
            created = self.store.create(pod, namespace=meta.get("namespace"))
        except ApiError as exc:
            self.record(job, "FailedCreate", f"Error creating: {exc.message}", "Warning")
            if exc.code in (403, 422):  # quota, admission: retry later as the real controller does
                self.enqueue_later((meta.get("namespace") or "", name), 10.0)
                return
            raise
        self.pods.setdefault(meta["uid"], {})[
            (created["metadata"].get("namespace") or "", created["metadata"]["name"])
        ] = created
        self.record(job, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")

    def _delete_pod(self, job: dict, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            deleted = self.store.delete(
                "v1", "Pod", meta.get("namespace"), meta["name"], grace=True
            )
        except ApiError as exc:
            if exc.code == 404:
                return
            raise
        if deleted is not None:
            self.pods.setdefault(job["metadata"]["uid"], {})[
                (meta.get("namespace") or "", meta["name"])
            ] = deleted
        self.record(job, "SuccessfulDelete", f"Deleted pod: {meta['name']}")

    def _remove_finalizer(self, pod: dict) -> None:
        meta = pod["metadata"]
        current = self.store.try_get("v1", "Pod", meta.get("namespace"), meta["name"])
        if current is None:
            return
        finalizers = [
            f for f in current["metadata"].get("finalizers") or [] if f != TRACKING_FINALIZER
        ]
        with contextlib.suppress(ApiError):
            self.store.patch(
                "v1",
                "Pod",
                meta.get("namespace"),
                meta["name"],
                {
                    "metadata": {
                        "finalizers": finalizers or None,
                        "resourceVersion": current["metadata"]["resourceVersion"],
                    }
                },
            )

    def _release_all(self, job: dict) -> None:
        """A Job being deleted: let its pods go (GC deletes them; the finalizer must not block)."""
        for pod in list(self.pods.get(job["metadata"]["uid"], {}).values()):
            if TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                self._remove_finalizer(pod)


def start(ctx) -> JobController:
    controller = JobController(ctx)
    ctx.extras["jobs"] = controller
    ctx.store.add_admission_hook("batch/v1", "Job", default_job)
    ctx.spawn(follow(ctx.store, "v1", "Pod", controller.on_pod), "jobs-pods")
    ctx.spawn(follow(ctx.store, "batch/v1", "Job", controller.on_job), "jobs-jobs")
    ctx.spawn(controller.loop(), "jobs-loop")
    return controller
