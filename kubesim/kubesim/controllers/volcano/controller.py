"""Volcano inside kubesim: the vcjob controller, the scheduler's enqueue/allocate session (gang),
the queue controller and the job admission webhooks, writing what Volcano v1.15 writes.

- Job (batch.volcano.sh/v1alpha1): defaults as the mutating webhook sets them, validation as
  "validatejob.volcano.sh" answers, a PodGroup <job>-<uid> (minMember = minAvailable,
  minResources, queue), pods <job>-<task>-<index> only once the PodGroup has left Pending, plugins
  svc/env/pytorch,
  phases Pending -> Running -> Completed/Failed (Restarting, Aborting/Aborted, Completing) with the
  task counters, and the default policies (PodFailed -> RestartJob/AbortJob, TaskCompleted ->
  CompleteJob when written).
- Scheduler session (every simulated second or on change), configured as the portal needs it
  (README: the capacity plugin with enableHierarchy, no proportion): enqueue (Pending -> Inqueue
  when minResources + allocated + inqueue fit the realCapability of the queue and of every
  ancestor, and the cluster's idle resources x 1.2 (overcommit plugin)), then allocate: the
  pending pods of a gang are bound in one step when at least minAvailable of them fit on the
  nodes, else none is and the PodGroup gets the Unschedulable condition and event "x/y tasks in
  gang unschedulable: ...".
- Queue status: state Open, PodGroup counts per phase and allocated resources, recomputed from
  the pods still bound (a parent queue counts its children; a finished job's resources leave).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json

from kubesim.api.errors import ApiError
from kubesim.clock import rfc3339
from kubesim.controllers import events, scheduler
from kubesim.controllers.kueue.quantity import format_milli, requests_of_pod_spec, to_milli
from kubesim.waiting import wait_event

JOB_API = "batch.volcano.sh/v1alpha1"
PG_API = "scheduling.volcano.sh/v1beta1"
QUEUE_API = "scheduling.volcano.sh/v1beta1"
COMPONENT = "volcano"
CONTROLLER = "vc-controller-manager"
FIELD_MANAGER = "volcano"

JOB_NAME = "volcano.sh/job-name"
JOB_NAMESPACE = "volcano.sh/job-namespace"
TASK_SPEC = "volcano.sh/task-spec"
TASK_INDEX = "volcano.sh/task-index"
QUEUE_NAME = "volcano.sh/queue-name"
JOB_VERSION = "volcano.sh/job-version"
RETRY_COUNT = "volcano.sh/job-retry-count"
TEMPLATE_KEY = "volcano.sh/template-uid"
GROUP_NAME = "scheduling.k8s.io/group-name"

KNOWN_PLUGINS = {"env", "svc", "ssh", "pytorch", "mpi", "tensorflow", "ray"}
VALID_EVENTS = [
    "*",
    "PodPending",
    "PodRunning",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "OutOfSync",
    "CommandIssued",
    "JobUpdated",
]
VALID_ACTIONS = [
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
    "SyncJob",
    "EnqueueJob",
    "SyncQueue",
    "OpenQueue",
    "CloseQueue",
]
TERMINAL = {"Completed", "Failed", "Aborted", "Terminated"}
OVERCOMMIT_FACTOR = 1.2
SCALAR_PREFIXES = ("cpu", "memory", "nvidia.com/", "ephemeral-storage")


def start(ctx) -> asyncio.Task:
    controller = VolcanoController(ctx)
    controller.install()
    return ctx.spawn(controller.run(), "volcano")


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return (meta.get("namespace") or "", meta["name"])


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}"


def podgroup_name(job: dict) -> str:
    return f"{job['metadata']['name']}-{job['metadata']['uid']}"


def _pod_phase(pod: dict) -> str:
    return (pod.get("status") or {}).get("phase") or "Pending"


def _counted(resources: dict[str, int]) -> dict[str, int]:
    return {r: v for r, v in resources.items() if r.startswith(SCALAR_PREFIXES)}


def _milli(scheduler_units: dict[str, int]) -> dict[str, int]:
    """The scheduler's units (millicores for cpu, base units otherwise) as milli-units."""
    return {r: v if r == "cpu" else v * 1000 for r, v in scheduler_units.items()}


def _add(total: dict[str, int], more: dict[str, int], times: int = 1) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value * times


def _resource_list(resources: dict[str, int]) -> dict[str, str]:
    return {name: format_milli(name, value) for name, value in sorted(resources.items())}


def _parse_list(resources: dict | None) -> dict[str, int]:
    parsed = {}
    for name, value in (resources or {}).items():
        try:
            parsed[name] = to_milli(value)
        except ValueError:
            continue
    return parsed


class VolcanoController:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.jobs: dict[tuple[str, str], dict] = {}
        self.podgroups: dict[tuple[str, str], dict] = {}
        self.queues: dict[str, dict] = {}
        self.pods_by_job: dict[tuple[str, str], dict[str, dict]] = {}
        self.dirty_jobs: set[tuple[str, str]] = set()
        self.wake = asyncio.Event()
        self.session_due = True
        self.last_messages: dict[tuple, str] = {}
        self.queue_written: dict[str, str] = {}
        self.commands: dict[tuple[str, str], dict] = {}
        self.job_actions: dict[tuple[str, str], str] = {}
        self.failed_jobs: set[tuple[str, str]] = set()

    # ---- wiring ------------------------------------------------------------------------------
    def install(self) -> None:
        self.store.add_admission_hook(JOB_API, "Job", self._job_webhook)
        self.store.add_admission_hook(QUEUE_API, "Queue", self._queue_webhook)
        self.store.add_write_listener(self._on_write)
        for api, kind in (
            ("v1", "Pod"),
            (PG_API, "PodGroup"),
            (QUEUE_API, "Queue"),
            (JOB_API, "Job"),
        ):
            try:
                rtype = self.store.registry.by_kind(api, kind)
            except ApiError:
                continue
            for obj in self.store.select(rtype, None):
                self._on_write("ADDED", rtype, obj, None)
        self._ensure_default_queue()

    def _ensure_default_queue(self) -> None:
        try:
            self.store.registry.by_kind(QUEUE_API, "Queue")
        except ApiError:
            return
        if self.store.try_get(QUEUE_API, "Queue", None, "default") is None:
            with contextlib.suppress(ApiError):
                self.store.create(
                    {
                        "apiVersion": QUEUE_API,
                        "kind": "Queue",
                        "metadata": {"name": "default"},
                        "spec": {"reclaimable": True, "weight": 1},
                    },
                    field_manager=FIELD_MANAGER,
                )

    def _on_write(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        group, kind = rtype.group, rtype.kind
        deleted = event_type == "DELETED"
        if group == "" and kind == "Pod":
            labels = obj["metadata"].get("labels") or {}
            job_name = labels.get(JOB_NAME)
            if not job_name or TASK_SPEC not in labels:
                if not deleted and old is None:
                    return
                if (obj.get("spec") or {}).get("nodeName") is None:
                    return
                # Any pod leaving a node may make room for a waiting gang.
                self.session_due = True
                self.wake.set()
                return
            job_key = (obj["metadata"].get("namespace") or "", job_name)
            pods = self.pods_by_job.setdefault(job_key, {})
            if deleted:
                pods.pop(obj["metadata"]["name"], None)
            else:
                pods[obj["metadata"]["name"]] = obj
            self.dirty_jobs.add(job_key)
            self.session_due = True
        elif group == "batch.volcano.sh" and kind == "Job":
            key = _key(obj)
            if deleted:
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj
            self.dirty_jobs.add(key)
        elif group == "scheduling.volcano.sh" and kind == "PodGroup":
            key = _key(obj)
            if deleted:
                self.podgroups.pop(key, None)
            else:
                self.podgroups[key] = obj
            self.session_due = True
            owner = next(
                (r for r in obj["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"),
                None,
            )
            if owner:
                self.dirty_jobs.add((key[0], owner["name"]))
        elif group == "bus.volcano.sh" and kind == "Command":
            if not deleted:
                self.commands[_key(obj)] = obj
        elif group == "scheduling.volcano.sh" and kind == "Queue":
            if deleted:
                self.queues.pop(obj["metadata"]["name"], None)
            else:
                self.queues[obj["metadata"]["name"]] = obj
            self.session_due = True
        else:
            return
        self.wake.set()

    # ---- webhooks ----------------------------------------------------------------------------
    def _job_webhook(self, operation: str, job: dict, old: dict | None) -> None:
        if operation == "CREATE":
            self._default_job(job)
            message = self._validate_create(job)
            if message:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'admission webhook "validatejob.volcano.sh" denied the request: {message}',
                )
        elif operation == "UPDATE" and old is not None:
            message = self._validate_update(old, job)
            if message:
                raise ApiError(
                    400,
                    "BadRequest",
                    f'admission webhook "validatejob.volcano.sh" denied the request: {message}',
                )

    def _queue_webhook(self, operation: str, queue: dict, old: dict | None) -> None:
        """validatequeue.volcano.sh: resource relations, hierarchy and undeletable queues."""
        name = queue["metadata"]["name"]

        def deny(message: str) -> ApiError:
            return ApiError(
                400,
                "BadRequest",
                f'admission webhook "validatequeue.volcano.sh" denied the request: {message}',
            )

        if operation == "DELETE":
            if name in ("default", "root"):
                raise deny(f"`{name}` queue can not be deleted")
            children = sorted(
                q for q, obj in self.queues.items() if (obj.get("spec") or {}).get("parent") == name
            )
            if children:
                raise deny(
                    f"queue {name} can not be deleted because it has {len(children)} child "
                    f"queues: {', '.join(children)}"
                )
            return
        spec = queue.get("spec") or {}
        if operation == "UPDATE" and old is not None and (old.get("spec") or {}) == spec:
            return  # a status write
        guarantee = (spec.get("guarantee") or {}).get("resource") or {}
        deserved = spec.get("deserved") or {}
        capability = spec.get("capability") or {}
        errors = []
        path = "requestBody.spec"
        for resource, value in guarantee.items():
            if resource not in deserved:
                errors.append(
                    f'{path}.deserved.{resource}: Invalid value: "<nil>": deserved[{resource}] '
                    f"must be >= guarantee[{resource}]={value}"
                )
            elif to_milli(deserved[resource]) < to_milli(value):
                errors.append(
                    f'{path}.deserved.{resource}: Invalid value: "{deserved[resource]}": '
                    f"deserved[{resource}]={deserved[resource]} must be >= "
                    f"guarantee[{resource}]={value}"
                )
        for resource, value in deserved.items():
            if resource in capability and to_milli(value) > to_milli(capability[resource]):
                errors.append(
                    f'{path}.deserved.{resource}: Invalid value: "{value}": deserved[{resource}]='
                    f"{value} must be <= capability[{resource}]={capability[resource]}"
                )
        if errors:
            raise deny(errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]")
        parent = spec.get("parent")
        if not parent or parent == "root":
            return
        old_parent = ((old or {}).get("spec") or {}).get("parent")
        if operation == "CREATE" or old_parent != parent:
            if parent == name:
                raise deny(f"queue {name} cannot use itself as parent")
            if parent not in self.queues:
                raise deny(
                    f"failed to get parent queue of queue {name}: "
                    f'queue.scheduling.volcano.sh "{parent}" not found'
                )
        for resource, value in capability.items():
            ancestor = parent
            seen: set[str] = set()
            while ancestor and ancestor not in seen:
                seen.add(ancestor)
                ancestor_spec = (self.queues.get(ancestor) or {}).get("spec") or {}
                limit = (ancestor_spec.get("capability") or {}).get(resource)
                if limit is not None:
                    if to_milli(value) > to_milli(limit):
                        raise deny(
                            f"queue {name} capability[{resource}]="
                            f"{_volcano_amount(resource, to_milli(value))} exceeds its "
                            f"ancestor's capability={_volcano_amount(resource, to_milli(limit))}"
                        )
                    break
                ancestor = ancestor_spec.get("parent")

    @staticmethod
    def _default_job(job: dict) -> None:
        spec = job.setdefault("spec", {})
        if not spec.get("queue"):
            spec["queue"] = "default"
        if not spec.get("schedulerName"):
            spec["schedulerName"] = "volcano"
        if not spec.get("maxRetry"):
            spec["maxRetry"] = 3
        tasks = spec.get("tasks") or []
        for index, task in enumerate(tasks):
            if not task.get("name"):
                task["name"] = f"default{index}"
            if task.get("minAvailable") is None:
                task["minAvailable"] = int(task.get("replicas") or 0)
            if not task.get("maxRetry"):
                task["maxRetry"] = 3
        if not spec.get("minAvailable"):
            spec["minAvailable"] = sum(int(t.get("minAvailable") or 0) for t in tasks)
        plugins = spec.get("plugins")
        if plugins is not None:
            if any(p in plugins for p in ("tensorflow", "mpi", "pytorch", "ray")):
                plugins.setdefault("svc", [])
            if "mpi" in plugins:
                plugins.setdefault("ssh", [])

    def _validate_create(self, job: dict) -> str:
        spec = job.get("spec") or {}
        name = job["metadata"].get("name", "")
        tasks = spec.get("tasks") or []
        if not tasks:
            return "No task specified in job spec"
        msg = ""
        names: set[str] = set()
        total = 0
        for index, task in enumerate(tasks):
            replicas = int(task.get("replicas") or 0)
            if task.get("minAvailable") is not None and int(task["minAvailable"]) > replicas:
                msg += (
                    f" 'minAvailable' is greater than 'replicas' in task: {task['name']}, "
                    f"job: {name};"
                )
            total += replicas
            if task["name"] in names:
                msg += f" duplicated task name {task['name']};"
                break
            names.add(task["name"])
            msg += _policy_errors(task.get("policies"), "spec.tasks.policies")
            pod = pod_name(name, task["name"], index)
            if len(pod) > 63:
                msg += (
                    f" create pod with name {pod} validate failed [must be no more than 63 "
                    "characters];"
                )
        if total < int(spec.get("minAvailable") or 0):
            msg += " job 'minAvailable' should not be greater than total replicas in tasks;"
        msg += _policy_errors(spec.get("policies"), "spec.policies")
        for plugin in spec.get("plugins") or {}:
            if plugin not in KNOWN_PLUGINS:
                msg += f" unable to find job plugin: {plugin};"
        queue_name = spec.get("queue") or "default"
        queue = self.queues.get(queue_name)
        if queue is None:
            msg += (
                f' unable to find job queue: queue.scheduling.volcano.sh "{queue_name}" not found;'
            )
        else:
            state = (queue.get("status") or {}).get("state") or "Open"
            if state != "Open":
                msg += (
                    " can only submit job to queue with state `Open`, "
                    f"queue `{queue_name}` status is `{state}`;"
                )
            if queue_name == "root":
                msg += " can not submit job to root queue;"
            else:
                children = [
                    q
                    for q in self.queues.values()
                    if (q.get("spec") or {}).get("parent") == queue_name
                ]
                if children:
                    msg += (
                        " can only submit job to leaf queue, "
                        f"queue `{queue_name}` has {len(children)} child queues;"
                    )
        return msg.strip()

    @staticmethod
    def _validate_update(old: dict, new: dict) -> str:
        old_spec, new_spec = dict(old.get("spec") or {}), dict(new.get("spec") or {})
        if old_spec == new_spec:
            return ""
        old_tasks, new_tasks = old_spec.get("tasks") or [], new_spec.get("tasks") or []
        if len(old_tasks) != len(new_tasks):
            return "job updates may not add or remove tasks"
        total = sum(int(t.get("replicas") or 0) for t in new_tasks)
        if int(new_spec.get("minAvailable") or 0) > total:
            return "job 'minAvailable' must not be greater than total replicas"
        if int(new_spec.get("minAvailable") or 0) < 0:
            return "job 'minAvailable' must be >= 0"
        for spec in (old_spec, new_spec):
            spec.pop("minAvailable", None)
            spec.pop("priorityClassName", None)
            spec["tasks"] = [
                {k: v for k, v in t.items() if k != "replicas"} for t in spec.get("tasks") or []
            ]
        if old_spec != new_spec:
            return (
                "job updates may not change fields other than `minAvailable`, "
                "`tasks[*].replicas under spec` and `PriorityClassName`"
            )
        return ""

    # ---- loop --------------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            # A scheduling session every simulated second (Volcano's schedule-period), and
            # sooner when something changed.
            timeout = max(0.02, 1.0 / max(self.clock.speed, 1e-9))
            if not await wait_event(self.wake, timeout):
                self.session_due = True
            self.wake.clear()
            await asyncio.sleep(0.005)
            try:
                self.reconcile()
            except Exception as exc:
                import traceback

                traceback.print_exc()
                print(f"volcano: reconcile failed: {exc!r}", flush=True)
                await asyncio.sleep(0.1)

    def reconcile(self) -> None:
        if self.commands:
            self._take_commands()
        self._expire_finished()
        if self.failed_jobs:
            self.dirty_jobs |= self.failed_jobs
            self.failed_jobs = set()
        for _ in range(4):
            if not self.dirty_jobs:
                break
            self._sync_dirty()
        if self.session_due:
            self.session_due = False
            if self._session_has_work():
                self._session()
            self._sync_dirty()
        self._write_queue_status()

    def _sync_dirty(self) -> None:
        """Sync every dirty job; one that fails is retried at the next session tick."""
        dirty, self.dirty_jobs = self.dirty_jobs, set()
        for key in sorted(dirty):
            try:
                self._sync_job(key)
            except Exception as exc:
                print(f"volcano: syncing Job {key[0]}/{key[1]} failed: {exc!r}", flush=True)
                self.failed_jobs.add(key)

    def _take_commands(self) -> None:
        """bus.volcano.sh Commands: the controller deletes each Command, then acts on its target
        (what `vcctl job suspend/resume/terminate` and `vcctl queue open/close` create)."""
        commands, self.commands = self.commands, {}
        for (namespace, name), command in commands.items():
            try:
                self.store.delete("bus.volcano.sh/v1alpha1", "Command", namespace, name)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            target = command.get("target") or {}
            action = command.get("action") or ""
            if target.get("kind") == "Job":
                key = (namespace, target.get("name") or "")
                if key in self.jobs:
                    self.job_actions[key] = action
                    self.dirty_jobs.add(key)
            elif target.get("kind") == "Queue":
                queue = self.queues.get(target.get("name") or "")
                if queue is None or action not in ("OpenQueue", "CloseQueue"):
                    continue
                state = "Open" if action == "OpenQueue" else "Closing"
                self._set_queue_state(queue, state)

    def _set_queue_state(self, queue: dict, state: str) -> None:
        name = queue["metadata"]["name"]
        try:
            updated = self.store.patch(
                QUEUE_API,
                "Queue",
                None,
                name,
                {"status": {"state": state}},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        self.queues[name] = updated
        self.queue_written.pop(name, None)

    def _expire_finished(self) -> None:
        """ttlSecondsAfterFinished: delete a Completed/Failed/Terminated job that long after."""
        now = self.clock.time()
        for key, job in list(self.jobs.items()):
            ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
            state = (job.get("status") or {}).get("state") or {}
            if ttl is None or state.get("phase") not in ("Completed", "Failed", "Terminated"):
                continue
            finished_at = state.get("lastTransitionTime")
            if not finished_at:
                continue
            elapsed = (
                now
                - datetime.datetime.fromisoformat(finished_at.replace("Z", "+00:00")).timestamp()
            )
            if elapsed >= float(ttl):
                try:
                    self.store.delete(JOB_API, "Job", key[0], key[1])
                except ApiError as exc:
                    if exc.code != 404:
                        raise

    # ---- job controller ----------------------------------------------------------------------
    def _sync_job(self, key: tuple[str, str]) -> None:
        job = self.jobs.get(key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        namespace, _name = key
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase") or ""
        pg_key = (namespace, podgroup_name(job))
        pg = self.podgroups.get(pg_key)
        if not phase:
            self._on_job_add(job)
            phase = "Pending"
        if pg is None and phase not in TERMINAL:
            pg = self._create_podgroup(job)
        pods = self.pods_by_job.get(key, {})
        counts, per_task = self._count(pods)
        spec = job.get("spec") or {}
        min_available = int(spec.get("minAvailable") or 0)
        new_phase = phase
        retry = int(status.get("retryCount") or 0)
        pg_phase = ((pg or {}).get("status") or {}).get("phase") or "Pending"

        action = self.job_actions.pop(key, None)
        if action is None and phase not in TERMINAL:
            action = self._policy_action(job, pods, per_task)
        if action == "ResumeJob":
            if phase == "Aborted":
                retry += 1
                new_phase = "Restarting"
            action = None
        elif action is not None and phase in TERMINAL:
            action = None  # a finished job takes no more actions
        if action == "RestartJob":
            retry += 1
            self._kill(pods.values())
            new_phase = "Failed" if retry >= int(spec.get("maxRetry") or 3) else "Restarting"
        elif action == "AbortJob":
            self._kill(pods.values())
            new_phase = "Aborting"
        elif action == "TerminateJob":
            self._kill(pods.values())
            new_phase = "Terminating"
        elif action == "CompleteJob":
            self._kill(p for p in pods.values() if _pod_phase(p) not in ("Succeeded", "Failed"))
            new_phase = "Completing"
        elif phase == "Restarting":
            if counts["pending"] + counts["running"] + counts["terminating"] == 0:
                new_phase = "Pending"
        elif phase in ("Aborting", "Terminating", "Completing"):
            if counts["pending"] + counts["running"] + counts["terminating"] == 0:
                new_phase = {"Aborting": "Aborted", "Terminating": "Terminated"}.get(
                    phase, "Completed"
                )
        elif phase in ("Pending", "Running"):
            if pg_phase != "Pending":
                self._create_pods(job, pods, pg)
                pods = self.pods_by_job.get(key, {})
                counts, per_task = self._count(pods)
            total = sum(int(t.get("replicas") or 0) for t in spec.get("tasks") or [])
            finished = counts["succeeded"] + counts["failed"]
            min_success = spec.get("minSuccess")
            if min_success is not None and counts["succeeded"] >= int(min_success):
                self._kill(p for p in pods.values() if _pod_phase(p) not in ("Succeeded", "Failed"))
                new_phase = "Completed"
            elif total and finished >= total and counts["pending"] + counts["running"] == 0:
                new_phase = (
                    "Completed"
                    if counts["succeeded"] >= min_available and self._tasks_met(job, per_task)
                    else "Failed"
                )
            elif (
                phase == "Pending"
                and counts["running"] + finished >= min_available
                and (counts["running"] + finished > 0)
            ):
                new_phase = "Running"
            elif phase == "Running" and counts["pending"] > total - min_available:
                new_phase = "Pending"
        self._write_job_status(job, new_phase, counts, per_task, retry)
        if new_phase in TERMINAL or new_phase in ("Aborting", "Terminating", "Completing"):
            self._sync_podgroup_counts(pg, counts, terminal=new_phase in TERMINAL)
        else:
            self._sync_podgroup_counts(pg, counts, terminal=False)

    def _tasks_met(self, job: dict, per_task: dict) -> bool:
        """Each task with a minAvailable needs that many successes (Volcano's running state)."""
        for task in (job.get("spec") or {}).get("tasks") or []:
            minimum = task.get("minAvailable")
            succeeded = per_task.get(task["name"], {}).get("Succeeded", 0)
            if minimum is not None and succeeded < int(minimum):
                return False
        return True

    def _policy_action(self, job: dict, pods: dict, per_task: dict) -> str | None:
        spec = job.get("spec") or {}
        for task in spec.get("tasks") or []:
            policies = (task.get("policies") or []) + (spec.get("policies") or [])
            task_pods = [
                p
                for p in pods.values()
                if (p["metadata"].get("labels") or {}).get(TASK_SPEC) == task["name"]
            ]
            failed = any(_pod_phase(p) == "Failed" for p in task_pods)
            evicted = any(
                p["metadata"].get("deletionTimestamp")
                and _pod_phase(p) not in ("Succeeded", "Failed")
                for p in task_pods
            )
            completed = len(task_pods) >= int(task.get("replicas") or 0) > 0 and all(
                _pod_phase(p) == "Succeeded" for p in task_pods
            )
            for policy in policies:
                policy_events = policy.get("events") or (
                    [policy["event"]] if policy.get("event") else []
                )
                exit_code = policy.get("exitCode")
                if exit_code is not None and failed:
                    codes = [
                        (cs.get("state") or {}).get("terminated", {}).get("exitCode")
                        for p in task_pods
                        if _pod_phase(p) == "Failed"
                        for cs in (p.get("status") or {}).get("containerStatuses") or []
                    ]
                    if exit_code in codes:
                        return policy.get("action")
                if failed and ("PodFailed" in policy_events or "*" in policy_events):
                    return policy.get("action")
                if evicted and "PodEvicted" in policy_events:
                    return policy.get("action")
                if completed and "TaskCompleted" in policy_events:
                    return policy.get("action")
        return None

    def _count(self, pods: dict) -> tuple[dict, dict]:
        counts = {
            "pending": 0,
            "running": 0,
            "succeeded": 0,
            "failed": 0,
            "terminating": 0,
            "unknown": 0,
        }
        per_task: dict[str, dict[str, int]] = {}
        for pod in pods.values():
            phase = _pod_phase(pod)
            task = (pod["metadata"].get("labels") or {}).get(TASK_SPEC, "")
            if pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
                counts["terminating"] += 1
                continue
            per_task.setdefault(task, {})
            per_task[task][phase] = per_task[task].get(phase, 0) + 1
            if phase in ("Pending", "Running", "Succeeded", "Failed"):
                counts[phase.lower()] += 1
            else:
                counts["unknown"] += 1
        return counts, per_task

    def _on_job_add(self, job: dict) -> None:
        """Plugins' OnJobAdd: the svc plugin's headless Service and hosts ConfigMap."""
        plugins = (job.get("spec") or {}).get("plugins") or {}
        namespace, name = _key(job)
        owner = self._owner(job)
        if "svc" in plugins:
            if self.store.try_get("v1", "Service", namespace, name) is None:
                self._create(
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {
                            "name": name,
                            "namespace": namespace,
                            "ownerReferences": [owner],
                        },
                        "spec": {
                            "clusterIP": "None",
                            "selector": {JOB_NAME: name, JOB_NAMESPACE: namespace},
                            "publishNotReadyAddresses": False,
                        },
                    },
                    namespace,
                )
            if self.store.try_get("v1", "ConfigMap", namespace, f"{name}-svc") is None:
                self._create(
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": f"{name}-svc",
                            "namespace": namespace,
                            "ownerReferences": [owner],
                        },
                        "data": _hosts(job),
                    },
                    namespace,
                )

    def _create(self, obj: dict, namespace: str) -> dict | None:
        try:
            return self.store.create(obj, namespace=namespace, field_manager=FIELD_MANAGER)
        except ApiError as exc:
            if exc.code in (409, 404, 403):
                return None
            raise

    @staticmethod
    def _owner(job: dict) -> dict:
        return {
            "apiVersion": JOB_API,
            "kind": "Job",
            "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def _create_podgroup(self, job: dict) -> dict | None:
        namespace, _ = _key(job)
        spec = job.get("spec") or {}
        min_resources = min_resources_of(spec)
        pg = {
            "apiVersion": PG_API,
            "kind": "PodGroup",
            "metadata": {
                "name": podgroup_name(job),
                "namespace": namespace,
                "labels": dict(job["metadata"].get("labels") or {}),
                "annotations": dict(job["metadata"].get("annotations") or {}),
                "ownerReferences": [self._owner(job)],
            },
            "spec": {
                "minMember": int(spec.get("minAvailable") or 0),
                "minTaskMember": {
                    t["name"]: int(
                        t.get("minAvailable")
                        if t.get("minAvailable") is not None
                        else t.get("replicas") or 0
                    )
                    for t in spec.get("tasks") or []
                },
                "queue": spec.get("queue") or "default",
                "minResources": _resource_list(min_resources),
            },
            "status": {"phase": "Pending"},
        }
        if spec.get("priorityClassName"):
            pg["spec"]["priorityClassName"] = spec["priorityClassName"]
        created = self._create(pg, namespace)
        if created is not None:
            self.podgroups[_key(created)] = created
        return created

    def _create_pods(self, job: dict, pods: dict, pg: dict | None) -> None:
        spec = job.get("spec") or {}
        namespace, name = _key(job)
        status = job.get("status") or {}
        plugins = spec.get("plugins") or {}
        for task_index, task in enumerate(spec.get("tasks") or []):
            for index in range(int(task.get("replicas") or 0)):
                pname = pod_name(name, task["name"], index)
                if pname in pods:
                    continue
                pod = self._build_pod(job, task, task_index, index, pname, pg, plugins, status)
                created = self._create(pod, namespace)
                if created is not None:
                    self.pods_by_job.setdefault((namespace, name), {})[pname] = created
                elif self.store.try_get("v1", "Pod", namespace, pname) is None:
                    # refused (a ResourceQuota, admission): Volcano requeues the job and retries
                    self.failed_jobs.add((namespace, name))

    def _build_pod(self, job, task, task_index, index, pname, pg, plugins, status) -> dict:
        namespace, name = _key(job)
        spec = job.get("spec") or {}
        template = json.loads(json.dumps(task.get("template") or {}))
        meta = template.get("metadata") or {}
        pod_spec = template.get("spec") or {}
        if not pod_spec.get("schedulerName"):
            pod_spec["schedulerName"] = spec.get("schedulerName") or "volcano"
        if not pod_spec.get("priorityClassName") and spec.get("priorityClassName"):
            pod_spec["priorityClassName"] = spec["priorityClassName"]
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        labels.update(
            {
                TASK_INDEX: str(index),
                JOB_NAME: name,
                TASK_SPEC: task["name"],
                JOB_NAMESPACE: namespace,
                QUEUE_NAME: spec.get("queue") or "default",
            }
        )
        annotations.update(
            {
                TASK_INDEX: str(index),
                TASK_SPEC: task["name"],
                GROUP_NAME: (pg or {}).get("metadata", {}).get("name") or podgroup_name(job),
                JOB_NAME: name,
                QUEUE_NAME: spec.get("queue") or "default",
                JOB_VERSION: str(int(status.get("version") or 0)),
                TEMPLATE_KEY: f"{name}-{task['name']}",
                RETRY_COUNT: str(int(status.get("retryCount") or 0)),
            }
        )
        containers = pod_spec.get("containers") or []
        if "env" in plugins:
            for container in containers + (pod_spec.get("initContainers") or []):
                env = container.setdefault("env", [])
                env.append({"name": "VK_TASK_INDEX", "value": str(index)})
                env.append({"name": "VC_TASK_INDEX", "value": str(index)})
        if "svc" in plugins:
            pod_spec.setdefault("hostname", pname)
            pod_spec.setdefault("subdomain", name)
            host_env = []
            for t in spec.get("tasks") or []:
                key = t["name"].replace("-", "_").upper()
                for env_name in (f"VC_{key}_HOSTS", f"VC_{key}_NUM"):
                    host_env.append(
                        {
                            "name": env_name,
                            "valueFrom": {
                                "configMapKeyRef": {"name": f"{name}-svc", "key": env_name}
                            },
                        }
                    )
            volume_name = f"{name}-svc"
            pod_spec.setdefault("volumes", []).append(
                {"name": volume_name, "configMap": {"name": volume_name}}
            )
            for container in containers + (pod_spec.get("initContainers") or []):
                container.setdefault("env", []).extend(host_env)
                container.setdefault("volumeMounts", []).append(
                    {"name": volume_name, "mountPath": "/etc/volcano"}
                )
        if "pytorch" in plugins:
            _pytorch_env(job, task, index, containers, plugins["pytorch"] or [])
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pname,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [self._owner(job)],
            },
            "spec": pod_spec,
        }

    def _kill(self, pods) -> None:
        for pod in list(pods):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            namespace, name = _key(pod)
            try:
                # gracefully: the pod stays Terminating for its grace period
                self.store.delete("v1", "Pod", namespace, name, grace=True)
            except ApiError as exc:
                if exc.code != 404:
                    raise

    def _write_job_status(self, job, phase, counts, per_task, retry) -> None:
        status = dict(job.get("status") or {})
        spec = job.get("spec") or {}
        now = rfc3339(self.clock.now())
        old_phase = (status.get("state") or {}).get("phase")
        new = {
            "minAvailable": int(spec.get("minAvailable") or 0),
            "pending": counts["pending"],
            "running": counts["running"],
            "succeeded": counts["succeeded"],
            "failed": counts["failed"],
            "terminating": counts["terminating"],
            "unknown": counts["unknown"],
            "retryCount": retry,
            "version": int(status.get("version") or 0),
            "taskStatusCount": {task: {"phase": phases} for task, phases in per_task.items()},
        }
        controlled = {}
        for plugin in spec.get("plugins") or {}:
            controlled[f"plugin-{plugin}"] = plugin
        if controlled:
            new["controlledResources"] = controlled
        conditions = list(status.get("conditions") or [])
        state = dict(status.get("state") or {})
        if old_phase != phase:
            state = {"phase": phase, "lastTransitionTime": now}
            conditions = [c for c in conditions if c.get("status") != phase]
            conditions.append({"status": phase, "lastTransitionTime": now})
        new["state"] = state
        new["conditions"] = conditions
        if all(status.get(k) == v for k, v in new.items()):
            return
        namespace, name = _key(job)
        patch = dict(new)
        patch["taskStatusCount"] = _with_removals(
            status.get("taskStatusCount") or {}, new["taskStatusCount"]
        )
        try:
            self.store.patch(
                JOB_API,
                "Job",
                namespace,
                name,
                {"status": patch},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
            return

    def _sync_podgroup_counts(self, pg: dict | None, counts: dict, *, terminal: bool) -> None:
        if pg is None:
            return
        status = dict(pg.get("status") or {})
        new = {
            "running": counts["running"],
            "succeeded": counts["succeeded"],
            "failed": counts["failed"],
        }
        if terminal and status.get("phase") in ("Running", "Inqueue", "Unknown"):
            new["phase"] = "Completed"
        if all(status.get(k) == v for k, v in new.items()):
            return
        self._patch_podgroup(pg, new)

    def _patch_podgroup(self, pg: dict, status: dict) -> None:
        namespace, name = _key(pg)
        try:
            updated = self.store.patch(
                PG_API, "PodGroup", namespace, name, {"status": status}, field_manager=FIELD_MANAGER
            )
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        self.podgroups[(namespace, name)] = updated

    # ---- scheduler session -------------------------------------------------------------------
    def _session_has_work(self) -> bool:
        """A session is needed only while some PodGroup waits to be enqueued or has pods to bind."""
        for (namespace, _), pg in self.podgroups.items():
            phase = (pg.get("status") or {}).get("phase") or "Pending"
            if phase == "Pending":
                return True
            if phase in ("Completed",):
                continue
            owner = next(
                (r for r in pg["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"),
                None,
            )
            pods = self.pods_by_job.get((namespace, owner["name"]), {}) if owner else {}
            if phase == "Inqueue" and not pods:
                return True
            for pod in pods.values():
                if not (pod.get("spec") or {}).get("nodeName") and _pod_phase(pod) == "Pending":
                    return True
        return False

    def _session(self) -> None:
        nodes = scheduler._ready_nodes(self.store)
        usage = {
            n["metadata"]["name"]: scheduler.node_usage(self.store, n["metadata"]["name"])
            for n in nodes
        }
        allocatable: dict[str, int] = {}
        used: dict[str, int] = {}
        for node in nodes:
            if (node.get("spec") or {}).get("unschedulable"):
                continue
            _add(allocatable, _counted(_milli(scheduler.node_allocatable(node))))
            _add(used, _counted(_milli(usage.get(node["metadata"]["name"], {}))))
        idle = {r: allocatable.get(r, 0) - used.get(r, 0) for r in allocatable}
        queue_allocated = self._queue_allocated()
        queue_inqueue: dict[str, dict[str, int]] = {}
        inqueue_total: dict[str, int] = {}
        pending_groups = []
        for key, pg in sorted(
            self.podgroups.items(), key=lambda kv: kv[1]["metadata"].get("creationTimestamp") or ""
        ):
            phase = (pg.get("status") or {}).get("phase") or "Pending"
            queue = (pg.get("spec") or {}).get("queue") or "default"
            minimum = _counted(_parse_list((pg.get("spec") or {}).get("minResources")))
            if phase == "Inqueue":
                _add(queue_inqueue.setdefault(queue, {}), minimum)
                _add(inqueue_total, minimum)
            elif phase == "Pending":
                pending_groups.append((key, pg, queue, minimum))
        # enqueue
        for key, pg, queue_name, minimum in pending_groups:
            queue = self.queues.get(queue_name)
            if queue is None or ((queue.get("status") or {}).get("state") or "Open") != "Open":
                continue
            short = self._capability_shortfall(
                queue_name, minimum, queue_allocated, queue_inqueue, allocatable
            )
            if short:
                self._pg_event(
                    pg,
                    "Unschedulable",
                    "queue resource quota insufficient: "
                    + ", ".join(f"insufficient {r}" for r in short),
                    "Normal",
                )
                continue
            overused = [
                r
                for r, v in minimum.items()
                if v > 0 and v + inqueue_total.get(r, 0) > idle.get(r, 0) * OVERCOMMIT_FACTOR
            ]
            if overused:
                self._pg_event(
                    pg,
                    "Unschedulable",
                    "resource in cluster is overused: "
                    + ", ".join(f"overused {r}" for r in sorted(overused)),
                    "Normal",
                )
                continue
            _add(queue_inqueue.setdefault(queue_name, {}), minimum)
            _add(inqueue_total, minimum)
            self._patch_podgroup(pg, {"phase": "Inqueue"})
            owner = next(
                (r for r in pg["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"),
                None,
            )
            if owner:
                self.dirty_jobs.add((key[0], owner["name"]))
        # allocate
        for key, pg in sorted(
            self.podgroups.items(), key=lambda kv: kv[1]["metadata"].get("creationTimestamp") or ""
        ):
            phase = (pg.get("status") or {}).get("phase") or "Pending"
            if phase not in ("Inqueue", "Running", "Unknown"):
                continue
            owner = next(
                (r for r in pg["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"),
                None,
            )
            if owner is None:
                continue
            pods = self.pods_by_job.get((key[0], owner["name"]), {})
            live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
            waiting = sorted(
                (
                    p
                    for p in live
                    if not (p.get("spec") or {}).get("nodeName") and _pod_phase(p) == "Pending"
                ),
                key=lambda p: (
                    p["metadata"]["labels"].get(TASK_SPEC, ""),
                    int(p["metadata"]["labels"].get(TASK_INDEX, 0)),
                ),
            )
            scheduled = [
                p
                for p in live
                if (p.get("spec") or {}).get("nodeName") or _pod_phase(p) == "Succeeded"
            ]
            min_member = int((pg.get("spec") or {}).get("minMember") or 0)
            if waiting:
                placement, failure = scheduler.place(waiting, nodes, usage)
                need = max(0, min_member - len(scheduled))
                if len(placement) >= need and (placement or need == 0):
                    for pod in waiting:
                        node = placement.get(pod["metadata"]["name"])
                        if node is None:
                            continue
                        scheduler.bind(self.store, pod, node)
                        _add(usage.setdefault(node, {}), scheduler.pod_requests(pod))
                        scheduled.append(pod)
                    if failure is not None:
                        self._mark_unschedulable(
                            [p for p in waiting if p["metadata"]["name"] not in placement],
                            nodes,
                            failure,
                        )
                else:
                    self._gang_unschedulable(
                        pg, live, waiting, min_member, nodes, failure or {}, placement
                    )
                    continue
            if len(scheduled) >= min_member and phase != "Running" and min_member > 0:
                self._set_scheduled(pg)

    def _capability_shortfall(
        self, queue_name, minimum, allocated, inqueue, cluster_total
    ) -> list[str]:
        """Resources for which minResources + allocated + inqueue would pass the realCapability
        of the queue or of one of its ancestors, as the capacity plugin with enableHierarchy
        checks at enqueue (checkJobEnqueueableHierarchically). `cluster_total` is unused: with
        hierarchy the root's capability is its spec's (unlimited when unset), not the nodes'."""
        del cluster_total
        short: set[str] = set()
        memo: dict[tuple[str, str], int | None] = {}
        for name in [queue_name, *self._ancestor_chain(queue_name)]:
            subtree = self._subtree(name)
            for resource, amount in minimum.items():
                if amount <= 0:
                    continue
                limit = self._real_capability(name, resource, memo)
                if limit is None:
                    continue
                in_use = sum(
                    allocated.get(q, {}).get(resource, 0) + inqueue.get(q, {}).get(resource, 0)
                    for q in subtree
                )
                if amount + in_use > limit:
                    short.add(resource)
        return sorted(short)

    def _parent_of(self, name: str) -> str | None:
        """A queue's parent; a queue without one hangs under `root` (None for root itself)."""
        if name == "root":
            return None
        return ((self.queues.get(name) or {}).get("spec") or {}).get("parent") or "root"

    def _ancestor_chain(self, name: str) -> list[str]:
        chain: list[str] = []
        parent = self._parent_of(name)
        while parent and parent not in chain and parent != name:
            chain.append(parent)
            parent = self._parent_of(parent)
        return chain

    def _capability_of(self, name: str, resource: str) -> int | None:
        """spec.capability, inherited from the nearest ancestor that sets it (None: unlimited)."""
        for queue in [name, *self._ancestor_chain(name)]:
            capability = _parse_list(
                ((self.queues.get(queue) or {}).get("spec") or {}).get("capability")
            )
            if resource in capability:
                return capability[resource]
        return None

    def _guarantee_of(self, name: str, resource: str) -> int:
        spec = (self.queues.get(name) or {}).get("spec") or {}
        return _parse_list((spec.get("guarantee") or {}).get("resource")).get(resource, 0)

    def _real_capability(self, name: str, resource: str, memo: dict) -> int | None:
        """The capacity plugin's realCapability (checkHierarchicalQueue): root's is its
        capability; a child's is min(its capability, parent's realCapability − the guarantees of
        all the parent's children + its own guarantee). None: unlimited."""
        key = (name, resource)
        if key in memo:
            return memo[key]
        memo[key] = None  # a cycle (refused by the webhook) counts as unlimited
        parent = self._parent_of(name)
        own = self._capability_of(name, resource)
        if parent is None:
            memo[key] = own
            return own
        from_parent = self._real_capability(parent, resource, memo)
        if from_parent is not None:
            siblings = [q for q in self.queues if q != "root" and self._parent_of(q) == parent]
            guarantees = sum(self._guarantee_of(q, resource) for q in siblings)
            from_parent = from_parent - guarantees + self._guarantee_of(name, resource)
        candidates = [v for v in (own, from_parent) if v is not None]
        memo[key] = min(candidates) if candidates else None
        return memo[key]

    def _ancestors(self, name: str) -> set[str]:
        found: set[str] = set()
        parent = ((self.queues.get(name) or {}).get("spec") or {}).get("parent")
        while parent and parent not in found:
            found.add(parent)
            parent = ((self.queues.get(parent) or {}).get("spec") or {}).get("parent")
        return found

    def _subtree(self, name: str) -> set[str]:
        result = {name}
        changed = True
        while changed:
            changed = False
            for qname, queue in self.queues.items():
                if qname not in result and (queue.get("spec") or {}).get("parent") in result:
                    result.add(qname)
                    changed = True
        return result

    def _queue_allocated(self) -> dict[str, dict[str, int]]:
        allocated: dict[str, dict[str, int]] = {}
        for (_namespace, _job_name), pods in self.pods_by_job.items():
            for pod in pods.values():
                if not (pod.get("spec") or {}).get("nodeName") or _pod_phase(pod) in (
                    "Succeeded",
                    "Failed",
                ):
                    continue
                queue = (pod["metadata"].get("labels") or {}).get(QUEUE_NAME, "default")
                _add(allocated.setdefault(queue, {}), _counted(_milli(scheduler.pod_requests(pod))))
        return allocated

    def _set_scheduled(self, pg: dict) -> None:
        now = rfc3339(self.clock.now())
        conditions = [
            c
            for c in (pg.get("status") or {}).get("conditions") or []
            if c.get("type") != "Unschedulable"
        ]
        conditions = [c for c in conditions if c.get("type") != "Scheduled"]
        conditions.append(
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "tasks in gang are ready to be scheduled",
                "message": "",
                "lastTransitionTime": now,
                "transitionID": pg["metadata"].get("uid", ""),
            }
        )
        self._patch_podgroup(pg, {"phase": "Running", "conditions": conditions})
        self._pg_event(pg, "Scheduled", "pod group is ready", "Normal")

    def _gang_unschedulable(self, pg, live, waiting, min_member, nodes, failure, placement) -> None:
        reasons = _fit_error(len(nodes), failure)
        histogram: dict[str, int] = {}
        for pod in live:
            state = "Pending" if not (pod.get("spec") or {}).get("nodeName") else "Running"
            if _pod_phase(pod) == "Succeeded":
                state = "Succeeded"
            histogram[state] = histogram.get(state, 0) + 1
        histogram["minAvailable"] = min_member
        parts = sorted(f"{v} {k}" for k, v in histogram.items())
        detail = f"pod group is not ready, {', '.join(parts)}"
        if waiting:
            detail += f"; Pending: {len(waiting)} Unschedulable"
        unplaced = [p for p in waiting if p["metadata"]["name"] not in placement]
        if unplaced:
            detail += f". Origin reason is {unplaced[0]['metadata']['name']}: {reasons}"
        # Pods the session could place tentatively count as schedulable (gang plugin).
        unready = min_member - (len(live) - len(waiting)) - len(placement)
        message = f"{unready}/{len(live)} tasks in gang unschedulable: {detail}"
        conditions = [
            c
            for c in (pg.get("status") or {}).get("conditions") or []
            if c.get("type") != "Unschedulable"
        ]
        previous = next(
            (
                c
                for c in (pg.get("status") or {}).get("conditions") or []
                if c.get("type") == "Unschedulable"
            ),
            None,
        )
        if previous is None or previous.get("message") != message:
            conditions.append(
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NotEnoughResources",
                    "message": message,
                    "lastTransitionTime": rfc3339(self.clock.now()),
                    "transitionID": pg["metadata"].get("uid", ""),
                }
            )
            self._patch_podgroup(pg, {"conditions": conditions})
            owner = next(
                (r for r in pg["metadata"].get("ownerReferences") or [] if r.get("kind") == "Job"),
                None,
            )
            job = self.jobs.get((pg["metadata"]["namespace"], owner["name"])) if owner else None
            if job is not None:
                # The job controller's recordPodGroupEvent.
                events.record(
                    self.store,
                    job,
                    "PodGroupPending",
                    f"PodGroup {pg['metadata']['namespace']}:{owner['name']} unschedulable, "
                    f"reason: {message}",
                    type="Warning",
                    component=CONTROLLER,
                )
        self._pg_event(pg, "Unschedulable", message, "Warning")
        for pod in waiting:
            scheduler.mark_unschedulable(self.store, pod, message, component="volcano")

    def _mark_unschedulable(self, pods, nodes, failure) -> None:
        message = _fit_error(len(nodes), failure)
        for pod in pods:
            scheduler.mark_unschedulable(self.store, pod, message, component="volcano")

    def _pg_event(self, pg: dict, reason: str, message: str, type_: str) -> None:
        key = (pg["metadata"].get("uid"), reason)
        if self.last_messages.get(key) == message:
            return
        self.last_messages[key] = message
        events.record(self.store, pg, reason, message, type=type_, component="volcano")

    # ---- queue controller --------------------------------------------------------------------
    def _write_queue_status(self) -> None:
        counts: dict[str, dict[str, int]] = {}
        for pg in self.podgroups.values():
            queue = (pg.get("spec") or {}).get("queue") or "default"
            phase = ((pg.get("status") or {}).get("phase") or "Pending").lower()
            per = counts.setdefault(queue, {})
            per[phase] = per.get(phase, 0) + 1
        allocated = self._queue_allocated()
        for name, queue in list(self.queues.items()):
            subtree = self._subtree(name)
            total: dict[str, int] = {}
            phases: dict[str, int] = {}
            for member in subtree:
                _add(total, allocated.get(member, {}))
                for phase, n in counts.get(member, {}).items():
                    phases[phase] = phases.get(phase, 0) + n
            previous = queue.get("status") or {}
            state = previous.get("state") or "Open"
            live = sum(n for phase, n in phases.items() if phase != "completed")
            if state == "Closing" and live == 0:
                state = "Closed"
            status = {
                "state": state,
                "pending": phases.get("pending", 0),
                "inqueue": phases.get("inqueue", 0),
                "running": phases.get("running", 0),
                "unknown": phases.get("unknown", 0),
                "completed": phases.get("completed", 0),
                # Recomputed from the pods still bound, as the scheduler's updateQueueStatus
                # does at each session's close; cpu and memory are always listed
                # (ConvertRes2ResList), zero when nothing runs.
                "allocated": {"cpu": "0", "memory": "0", **_resource_list(total)},
            }
            fingerprint = json.dumps(status, sort_keys=True)
            if self.queue_written.get(name) == fingerprint:
                continue
            # Volcano replaces the status (UpdateStatus); as a merge patch, a resource no longer
            # allocated must be sent as null or it would keep its last value.
            patch = {
                **status,
                "allocated": _with_removals(previous.get("allocated") or {}, status["allocated"]),
            }
            try:
                updated = self.store.patch(
                    QUEUE_API,
                    "Queue",
                    None,
                    name,
                    {"status": patch},
                    subresource="status",
                    field_manager=FIELD_MANAGER,
                )
            except ApiError as exc:
                if exc.code != 404:
                    raise
                continue
            self.queues[name] = updated
            self.queue_written[name] = fingerprint


def _with_removals(old: dict, new: dict) -> dict:
    """A merge patch from old to new: keys that disappeared are set to null."""
    patch: dict = {}
    for key, value in new.items():
        before = old.get(key)
        patch[key] = (
            _with_removals(before, value)
            if isinstance(value, dict) and isinstance(before, dict)
            else value
        )
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


def min_resources_of(spec: dict) -> dict[str, int]:
    """The requests of the first minAvailable pods, tasks taken in order (as Volcano computes)."""
    remaining = int(spec.get("minAvailable") or 0)
    total: dict[str, int] = {}
    pods = 0
    for task in spec.get("tasks") or []:
        if remaining <= 0:
            break
        task_min = task.get("minAvailable")
        count = int(task_min if task_min is not None else task.get("replicas") or 0)
        count = min(count, remaining)
        requests = requests_of_pod_spec((task.get("template") or {}).get("spec") or {})
        _add(total, requests, count)
        pods += count
        remaining -= count
    if remaining > 0:
        for task in spec.get("tasks") or []:
            task_min = task.get("minAvailable")
            spare = int(task.get("replicas") or 0) - int(
                task_min if task_min is not None else task.get("replicas") or 0
            )
            take = min(spare, remaining)
            if take > 0:
                _add(
                    total,
                    requests_of_pod_spec((task.get("template") or {}).get("spec") or {}),
                    take,
                )
                pods += take
                remaining -= take
    result = {}
    for name, value in total.items():
        result[name] = value
        if name in ("cpu", "memory") or "/" in name:
            result[f"requests.{name}"] = value
    if pods:
        result["pods"] = pods * 1000
        result["count/pods"] = pods * 1000
    return result


def _hosts(job: dict) -> dict[str, str]:
    data = {}
    name = job["metadata"]["name"]
    for task in (job.get("spec") or {}).get("tasks") or []:
        pod_spec = (task.get("template") or {}).get("spec") or {}
        hosts = []
        for i in range(int(task.get("replicas") or 0)):
            host = pod_spec.get("hostname") or pod_name(name, task["name"], i)
            hosts.append(f"{host}.{pod_spec.get('subdomain') or name}")
            if pod_spec.get("hostname"):
                break
        key = task["name"].replace("-", "_")
        data[f"{key}.host"] = "\n".join(hosts)
        data[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        data[f"VC_{key.upper()}_NUM"] = str(len(hosts))
    return data


def _pytorch_env(job: dict, task: dict, index: int, containers: list, arguments: list) -> None:
    options = {"master": "master", "worker": "worker", "port": "23456"}
    for argument in arguments:
        if argument.startswith("--") and "=" in argument:
            key, value = argument[2:].split("=", 1)
            options[key] = value
    tasks = (job.get("spec") or {}).get("tasks") or []
    master = next((t for t in tasks if t["name"] == options["master"]), None)
    if master is None:
        return
    name = job["metadata"]["name"]
    master_spec = (master.get("template") or {}).get("spec") or {}
    master_addr = f"{master_spec.get('hostname') or pod_name(name, master['name'], 0)}." + (
        master_spec.get("subdomain") or name
    )
    world = sum(
        int(t.get("replicas") or 0)
        for t in tasks
        if t["name"] in (options["master"], options["worker"])
    )
    port = int(options["port"])
    for container in containers:
        ports = container.setdefault("ports", [])
        if not any(p.get("containerPort") == port for p in ports):
            ports.append({"name": "pytorchjob-port", "containerPort": port})
        env = container.setdefault("env", [])
        env.append({"name": "MASTER_ADDR", "value": master_addr})
        env.append({"name": "MASTER_PORT", "value": str(port)})
        env.append({"name": "WORLD_SIZE", "value": str(world)})
        if task["name"] == options["worker"]:
            env.append({"name": "RANK", "value": str(index + 1)})
        elif task["name"] == options["master"]:
            env.append({"name": "RANK", "value": "0"})


def _policy_errors(policies, path: str) -> str:
    msg = ""
    seen: set[str] = set()
    for policy in policies or []:
        policy_events = policy.get("events") or ([policy["event"]] if policy.get("event") else [])
        if policy_events and policy.get("exitCode") is not None:
            return (
                "must not specify event and exitCode simultaneously valid events are "
                f"{_go_list(VALID_EVENTS)}, valid actions are {_go_list(VALID_ACTIONS)};"
            )
        for event in policy_events:
            if event not in VALID_EVENTS:
                msg += (
                    f"invalid policy event {event} valid events are {_go_list(VALID_EVENTS)}, "
                    f"valid actions are {_go_list(VALID_ACTIONS)};"
                )
            if event in seen:
                msg += (
                    f"duplicate event {event} across different policy valid events are "
                    f"{_go_list(VALID_EVENTS)}, valid actions are {_go_list(VALID_ACTIONS)};"
                )
            seen.add(event)
        if policy.get("action") and policy["action"] not in VALID_ACTIONS:
            msg += (
                f"invalid policy action {policy['action']} valid events are "
                f"{_go_list(VALID_EVENTS)}, valid actions are {_go_list(VALID_ACTIONS)};"
            )
    return msg


def _volcano_amount(resource: str, milli: int) -> str:
    """How the queue webhook prints an amount (cpu/memory as quantities, others as milli %.2f)."""
    if resource == "cpu":
        return format_milli("cpu", milli)
    if resource == "memory":
        return format_milli("memory", milli)
    return f"{milli:.2f}"


def _go_list(items: list[str]) -> str:
    return "[" + " ".join(items) + "]"


def _fit_error(num_nodes: int, per_node: dict[str, list[str]]) -> str:
    if not per_node:
        return f"0/{num_nodes} nodes are unavailable"
    histogram: dict[str, int] = {}
    for reasons in per_node.values():
        for reason in reasons:
            histogram[reason] = histogram.get(reason, 0) + 1
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    return f"0/{num_nodes} nodes are unavailable: {', '.join(parts)}."
