"""The workload controllers of kube-controller-manager, at the level the simulator needs:

- ReplicaSet and ReplicationController keep `replicas` pods from their template;
- Deployment owns one ReplicaSet per pod-template hash, scales the newest up and the older ones
  down (rollout status follows from its status: updated/ready/available replicas, conditions);
- StatefulSet creates ordinal pods <name>-0..N-1 in order (OrderedReady) and replaces deleted ones;
- DaemonSet runs one pod on every schedulable node its nodeSelector and tolerations admit;
- CronJob creates a Job at each scheduled minute of the simulated clock (5-field cron syntax),
  honours suspend, concurrencyPolicy Forbid/Replace and the history limits.

All are level-triggered: a sync reads the owner and its pods from the store and writes the
difference, so running one twice changes nothing.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import hashlib
import json
import time
import traceback

from kubesim.api.errors import ApiError
from kubesim.clock import rfc3339 as _rfc3339_dt
from kubesim.controllers import events
from kubesim.controllers.context import follow

HASH_LABEL = "pod-template-hash"
REVISION_ANNOTATION = "deployment.kubernetes.io/revision"
STS_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
STS_REVISION_LABEL = "controller-revision-hash"
DS_HASH_LABEL = "controller-revision-hash"
CRONJOB_SCHEDULED_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"

# (apiVersion, kind) of every owner this module syncs
OWNERS = {
    "ReplicaSet": "apps/v1",
    "ReplicationController": "v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "CronJob": "batch/v1",
}


def rfc3339(epoch: float) -> str:
    return _rfc3339_dt(datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC))


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def _controller_ref(obj: dict) -> dict | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def _owner_reference(owner: dict, api_version: str, kind: str) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def template_hash(template: dict) -> str:
    """A short stable hash of a pod template (the pod-template-hash label's role)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    number = int(digest[:16], 16)
    out = ""
    for _ in range(10):
        number, rest = divmod(number, len(alphabet))
        out += alphabet[rest]
    return out


def _pod_active(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


def _pod_ready(pod: dict) -> bool:
    if not _pod_active(pod):
        return False
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


# ---------------------------------------------------------------------------------- cron
_CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def parse_cron(schedule: str) -> list[set[int]]:
    """The five field sets of a cron schedule; ValueError names the bad part."""
    text = _CRON_ALIASES.get(schedule.strip(), schedule.strip())
    if text.startswith(("TZ=", "CRON_TZ=")):
        text = text.split(None, 1)[1] if " " in text else ""
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"expected exactly 5 fields, found {len(fields)}: {schedule}")
    out = []
    for field, (low, high) in zip(fields, _CRON_RANGES, strict=True):
        values: set[int] = set()
        for part in field.split(","):
            base, _, step_text = part.partition("/")
            step = int(step_text) if step_text else 1
            if step <= 0:
                raise ValueError(f"step must be positive: {part}")
            if base in ("*", "?"):
                start, end = low, high
            elif "-" in base:
                a, b = base.split("-", 1)
                start, end = int(a), int(b)
            else:
                start = int(base)
                end = high if step_text else start
            if start < low or end > high or start > end:
                raise ValueError(f"value out of range ({low}-{high}): {part}")
            values.update(range(start, end + 1, step))
        out.append(values)
    if 7 in out[4]:
        out[4].add(0)
    return out


def cron_matches(fields: list[set[int]], epoch_minute: int) -> bool:
    tm = time.gmtime(epoch_minute * 60)
    weekday = (tm.tm_wday + 1) % 7  # cron: Sunday = 0
    return (
        tm.tm_min in fields[0]
        and tm.tm_hour in fields[1]
        and tm.tm_mday in fields[2]
        and tm.tm_mon in fields[3]
        and weekday in fields[4]
    )


def validate_cronjob(operation: str, cronjob: dict, old: dict | None) -> None:
    schedule = (cronjob.get("spec") or {}).get("schedule")
    if schedule is None:
        return
    try:
        parse_cron(str(schedule))
    except ValueError as exc:
        from kubesim.api import errors

        raise errors.invalid(
            "CronJob",
            "batch",
            cronjob["metadata"].get("name", ""),
            [errors.invalid_value("spec.schedule", schedule, str(exc))],
        ) from None


class WorkloadController:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.clock = ctx.clock
        self.dirty: set[tuple[str, str, str]] = set()  # (kind, namespace, name)
        self.wake = asyncio.Event()

    # ------------------------------------------------------------------ events
    def enqueue(self, kind: str, namespace: str, name: str) -> None:
        self.dirty.add((kind, namespace, name))
        self.wake.set()

    def on_owner(self, kind: str):
        def handle(event_type: str, obj: dict) -> None:
            namespace, name = _key(obj)
            if event_type != "DELETED":
                self.enqueue(kind, namespace, name)
            ref = _controller_ref(obj)
            if ref and ref.get("kind") in OWNERS:
                self.enqueue(ref["kind"], namespace, ref["name"])

        return handle

    def on_dependent(self, event_type: str, obj: dict) -> None:
        ref = _controller_ref(obj)
        if ref and ref.get("kind") in OWNERS:
            self.enqueue(ref["kind"], obj["metadata"].get("namespace") or "", ref["name"])

    def on_node(self, event_type: str, node: dict) -> None:
        for ds in self.store.list("apps/v1", "DaemonSet", None):
            self.enqueue("DaemonSet", *_key(ds))

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.01)
            batch = sorted(self.dirty)
            self.dirty.clear()
            for n, (kind, namespace, name) in enumerate(batch):
                try:
                    self.sync(kind, namespace, name)
                except ApiError as exc:
                    if exc.code == 409:
                        self.enqueue(kind, namespace, name)
                    elif exc.code not in (403, 404, 422):
                        traceback.print_exc()
                except Exception:
                    traceback.print_exc()
                if n % 20 == 19:
                    await asyncio.sleep(0)

    async def cron_ticker(self) -> None:
        """Wake the CronJobs once per simulated minute (and at start)."""
        while True:
            for cronjob in self.store.list("batch/v1", "CronJob", None):
                self.enqueue("CronJob", *_key(cronjob))
            now = self.clock.time()
            wait_sim = 60.0 - (now % 60.0) + 0.01
            await asyncio.sleep(max(0.02, wait_sim / self.clock.speed))

    # ------------------------------------------------------------------ helpers
    def _owned(self, api_version: str, kind: str, owner: dict) -> list[dict]:
        uid = owner["metadata"]["uid"]
        namespace = owner["metadata"].get("namespace")
        return [
            obj
            for obj in self.store.list(api_version, kind, namespace)
            if (_controller_ref(obj) or {}).get("uid") == uid
        ]

    def _record(self, obj: dict, reason: str, message: str, component: str, kind: str = "Normal"):
        events.record(self.store, obj, reason, message, type=kind, component=component)

    def _write_status(self, api_version: str, kind: str, obj: dict, status: dict) -> None:
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        namespace, name = _key(obj)
        self.store.patch(
            api_version, kind, namespace or None, name, {"status": status}, subresource="status"
        )

    def _new_pod(self, owner: dict, api_version: str, kind: str, template: dict, **extra) -> dict:
        template = copy.deepcopy(template or {})
        tmeta = template.get("metadata") or {}
        metadata: dict = {
            "namespace": owner["metadata"].get("namespace"),
            "labels": dict(tmeta.get("labels") or {}),
            "ownerReferences": [_owner_reference(owner, api_version, kind)],
        }
        if tmeta.get("annotations"):
            metadata["annotations"] = dict(tmeta["annotations"])
        metadata.update(extra.pop("metadata", {}))
        spec = template.get("spec") or {}
        spec.update(extra.pop("spec", {}))
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}

    def _create(self, owner: dict, obj: dict, component: str) -> dict | None:
        namespace = owner["metadata"].get("namespace")
        try:
            created = self.store.create(obj, namespace=namespace)
        except ApiError as exc:
            if exc.code == 409:
                return None
            self._record(
                owner,
                "FailedCreate",
                f"Error creating: {exc.message}",
                component,
                "Warning",
            )
            raise
        self._record(
            owner,
            "SuccessfulCreate",
            f"Created {obj['kind'].lower()}: {created['metadata']['name']}",
            component,
        )
        return created

    def _delete(self, owner: dict, obj: dict, component: str) -> None:
        namespace, name = _key(obj)
        try:
            self.store.delete(obj["apiVersion"], obj["kind"], namespace or None, name, grace=True)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return
        self._record(owner, "SuccessfulDelete", f"Deleted {obj['kind'].lower()}: {name}", component)

    # ------------------------------------------------------------------ sync
    def sync(self, kind: str, namespace: str, name: str) -> None:
        api_version = OWNERS[kind]
        obj = self.store.try_get(api_version, kind, namespace or None, name)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        getattr(self, "_sync_" + kind.lower())(obj)

    def _sync_replicationcontroller(self, rc: dict) -> None:
        self._sync_replicas(rc, "v1", "ReplicationController", "replication-controller")

    def _sync_replicaset(self, rs: dict) -> None:
        self._sync_replicas(rs, "apps/v1", "ReplicaSet", "replicaset-controller")

    def _sync_replicas(self, owner: dict, api_version: str, kind: str, component: str) -> None:
        spec = owner.get("spec") or {}
        want = int(spec.get("replicas", 1))
        pods = [p for p in self._owned("v1", "Pod", owner) if _pod_active(p)]
        name = owner["metadata"]["name"]
        if len(pods) < want:
            for _ in range(min(want - len(pods), 50)):
                pod = self._new_pod(
                    owner,
                    api_version,
                    kind,
                    spec.get("template"),
                    metadata={"generateName": f"{name}-"},
                )
                if self._create(owner, pod, component) is None:
                    break
        elif len(pods) > want:
            # delete not-ready and newest first, as the controller ranks them
            pods.sort(
                key=lambda p: (_pod_ready(p), p["metadata"].get("creationTimestamp", "")),
            )
            for pod in pods[: len(pods) - want]:
                self._delete(owner, pod, component)
        pods = [p for p in self._owned("v1", "Pod", owner) if _pod_active(p)]
        ready = sum(1 for p in pods if _pod_ready(p))
        labels = (spec.get("template") or {}).get("metadata", {}).get("labels") or {}
        status = {
            "replicas": len(pods),
            "fullyLabeledReplicas": sum(
                1
                for p in pods
                if all(p["metadata"].get("labels", {}).get(k) == v for k, v in labels.items())
            ),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "observedGeneration": owner["metadata"].get("generation", 1),
        }
        if kind == "ReplicaSet":
            status["terminatingReplicas"] = 0
        self._write_status(api_version, kind, owner, status)

    def _sync_deployment(self, deployment: dict) -> None:
        spec = deployment.get("spec") or {}
        want = int(spec.get("replicas", 1))
        template = spec.get("template") or {}
        pod_hash = template_hash(template)
        sets = self._owned("apps/v1", "ReplicaSet", deployment)
        current = next(
            (rs for rs in sets if rs["metadata"].get("labels", {}).get(HASH_LABEL) == pod_hash),
            None,
        )
        revisions = [
            int(rs["metadata"].get("annotations", {}).get(REVISION_ANNOTATION, "0") or 0)
            for rs in sets
        ]
        name = deployment["metadata"]["name"]
        paused = bool(spec.get("paused"))
        if current is None and not paused:
            revision = max(revisions, default=0) + 1
            rs_template = copy.deepcopy(template)
            rs_template.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = pod_hash
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})[HASH_LABEL] = pod_hash
            rs = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-{pod_hash}",
                    "namespace": deployment["metadata"].get("namespace"),
                    "labels": {
                        **(template.get("metadata", {}).get("labels") or {}),
                        HASH_LABEL: pod_hash,
                    },
                    "annotations": {
                        REVISION_ANNOTATION: str(revision),
                        "deployment.kubernetes.io/desired-replicas": str(want),
                    },
                    "ownerReferences": [_owner_reference(deployment, "apps/v1", "Deployment")],
                },
                "spec": {"replicas": want, "selector": selector, "template": rs_template},
            }
            current = self._create(deployment, rs, "deployment-controller")
            if current is not None:
                self._record(
                    deployment,
                    "ScalingReplicaSet",
                    f"Scaled up replica set {rs['metadata']['name']} from 0 to {want}",
                    "deployment-controller",
                )
                sets = self._owned("apps/v1", "ReplicaSet", deployment)
        if current is not None and not paused:
            if int((current.get("spec") or {}).get("replicas", 0)) != want:
                self.store.patch(
                    "apps/v1",
                    "ReplicaSet",
                    current["metadata"].get("namespace"),
                    current["metadata"]["name"],
                    {"spec": {"replicas": want}},
                )
            new_ready = int((current.get("status") or {}).get("readyReplicas", 0))
            recreate = (spec.get("strategy") or {}).get("type") == "Recreate"
            for rs in sets:
                if rs["metadata"]["uid"] == current["metadata"]["uid"]:
                    continue
                old_replicas = int((rs.get("spec") or {}).get("replicas", 0))
                # rolling update: old sets go down as the new one becomes ready
                target = 0 if recreate else max(0, min(old_replicas, want - new_ready))
                if target != old_replicas:
                    self.store.patch(
                        "apps/v1",
                        "ReplicaSet",
                        rs["metadata"].get("namespace"),
                        rs["metadata"]["name"],
                        {"spec": {"replicas": target}},
                    )
                    self._record(
                        deployment,
                        "ScalingReplicaSet",
                        f"Scaled down replica set {rs['metadata']['name']} "
                        f"from {old_replicas} to {target}",
                        "deployment-controller",
                    )
            limit = int(spec.get("revisionHistoryLimit", 10))
            old = [
                rs
                for rs in sets
                if rs["metadata"]["uid"] != current["metadata"]["uid"]
                and int((rs.get("spec") or {}).get("replicas", 0)) == 0
            ]
            old.sort(key=lambda rs: rs["metadata"].get("creationTimestamp", ""))
            for rs in old[: max(0, len(old) - limit)]:
                self._delete(deployment, rs, "deployment-controller")
        sets = self._owned("apps/v1", "ReplicaSet", deployment)
        total = sum(int((rs.get("status") or {}).get("replicas", 0)) for rs in sets)
        ready = sum(int((rs.get("status") or {}).get("readyReplicas", 0)) for rs in sets)
        updated = (
            int((current.get("status") or {}).get("replicas", 0)) if current is not None else 0
        )
        updated_ready = int((current.get("status") or {}).get("readyReplicas", 0)) if current else 0
        now = rfc3339(self.clock.time())
        old_conditions = {
            c.get("type"): c for c in (deployment.get("status") or {}).get("conditions") or []
        }

        def condition(ctype: str, ok: bool, reason: str, message: str) -> dict:
            previous = old_conditions.get(ctype)
            status = "True" if ok else "False"
            since = (
                previous.get("lastTransitionTime")
                if previous and previous.get("status") == status
                else now
            )
            if previous and previous.get("status") == status and previous.get("reason") == reason:
                return previous
            return {
                "type": ctype,
                "status": status,
                "lastUpdateTime": now,
                "lastTransitionTime": since,
                "reason": reason,
                "message": message,
            }

        available = ready >= want
        complete = updated_ready >= want and total == want
        rs_name = current["metadata"]["name"] if current else name
        conditions = [
            condition(
                "Available",
                available,
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
            condition(
                "Progressing",
                True,
                "NewReplicaSetAvailable" if complete else "ReplicaSetUpdated",
                f'ReplicaSet "{rs_name}" has successfully progressed.'
                if complete
                else f'ReplicaSet "{rs_name}" is progressing.',
            ),
        ]
        status = {
            "observedGeneration": deployment["metadata"].get("generation", 1),
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(0, want - ready),
            "terminatingReplicas": 0,
            "conditions": conditions,
        }
        if not status["unavailableReplicas"]:
            del status["unavailableReplicas"]
        self._write_status("apps/v1", "Deployment", deployment, status)

    def _sync_statefulset(self, sts: dict) -> None:
        spec = sts.get("spec") or {}
        want = int(spec.get("replicas", 1))
        name = sts["metadata"]["name"]
        revision = f"{name}-{template_hash(spec.get('template') or {})}"
        pods = {p["metadata"]["name"]: p for p in self._owned("v1", "Pod", sts)}
        parallel = spec.get("podManagementPolicy") == "Parallel"
        for ordinal in range(want):
            pod_name = f"{name}-{ordinal}"
            pod = pods.get(pod_name)
            if pod is not None:
                if not parallel and not _pod_ready(pod):
                    break  # OrderedReady: the next ordinal waits for this one
                continue
            labels = {
                STS_POD_NAME_LABEL: pod_name,
                STS_REVISION_LABEL: revision,
                "apps.kubernetes.io/pod-index": str(ordinal),
            }
            template = copy.deepcopy(spec.get("template") or {})
            template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            pod_spec: dict = {"hostname": pod_name}
            if spec.get("serviceName"):
                pod_spec["subdomain"] = spec["serviceName"]
            volumes = list((template.get("spec") or {}).get("volumes") or [])
            for claim in spec.get("volumeClaimTemplates") or []:
                claim_name = f"{claim['metadata']['name']}-{pod_name}"
                self._ensure_claim(sts, claim, claim_name)
                volumes.append(
                    {
                        "name": claim["metadata"]["name"],
                        "persistentVolumeClaim": {"claimName": claim_name},
                    }
                )
            if volumes:
                pod_spec["volumes"] = volumes
            pod = self._new_pod(
                sts,
                "apps/v1",
                "StatefulSet",
                template,
                metadata={"name": pod_name},
                spec=pod_spec,
            )
            self._create(sts, pod, "statefulset-controller")
            if not parallel:
                break
        for pod_name, pod in pods.items():
            ordinal = pod_name.rsplit("-", 1)[-1]
            if ordinal.isdigit() and int(ordinal) >= want and _pod_active(pod):
                self._delete(sts, pod, "statefulset-controller")
        pods = [p for p in self._owned("v1", "Pod", sts) if _pod_active(p)]
        ready = sum(1 for p in pods if _pod_ready(p))
        status = {
            "observedGeneration": sts["metadata"].get("generation", 1),
            "replicas": len(pods),
            "readyReplicas": ready,
            "currentReplicas": len(pods),
            "updatedReplicas": len(pods),
            "availableReplicas": ready,
            "currentRevision": revision,
            "updateRevision": revision,
            "collisionCount": 0,
        }
        self._write_status("apps/v1", "StatefulSet", sts, status)

    def _ensure_claim(self, sts: dict, template: dict, claim_name: str) -> None:
        namespace = sts["metadata"].get("namespace")
        if self.store.try_get("v1", "PersistentVolumeClaim", namespace, claim_name) is not None:
            return
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim_name,
                "namespace": namespace,
                "labels": dict(
                    ((sts.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                ),
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
        }
        self._create(sts, claim, "statefulset-controller")

    def _sync_daemonset(self, ds: dict) -> None:
        from kubesim.controllers.scheduler import untolerated_taint

        spec = ds.get("spec") or {}
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        selector = pod_spec.get("nodeSelector") or {}
        # DaemonSet pods tolerate unschedulable/not-ready nodes, as the controller adds
        tolerations = [
            *(pod_spec.get("tolerations") or []),
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
        ]
        revision = template_hash(template)
        pods = [p for p in self._owned("v1", "Pod", ds) if _pod_active(p)]
        by_node = {p["spec"].get("nodeName"): p for p in pods}
        wanted_nodes = []
        for node in self.store.list("v1", "Node", None):
            labels = node["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            if untolerated_taint({"spec": {"tolerations": tolerations}}, node) is not None:
                continue
            wanted_nodes.append(node["metadata"]["name"])
        for node_name in wanted_nodes:
            if node_name in by_node:
                continue
            labels = {DS_HASH_LABEL: revision, "pod-template-generation": "1"}
            t = copy.deepcopy(template)
            t.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
            pod = self._new_pod(
                ds,
                "apps/v1",
                "DaemonSet",
                t,
                metadata={"generateName": f"{ds['metadata']['name']}-"},
                spec={"nodeName": node_name},
            )
            self._create(ds, pod, "daemonset-controller")
        for node_name, pod in by_node.items():
            if node_name not in wanted_nodes:
                self._delete(ds, pod, "daemonset-controller")
        pods = [p for p in self._owned("v1", "Pod", ds) if _pod_active(p)]
        ready = sum(1 for p in pods if _pod_ready(p))
        status = {
            "observedGeneration": ds["metadata"].get("generation", 1),
            "desiredNumberScheduled": len(wanted_nodes),
            "currentNumberScheduled": len(pods),
            "updatedNumberScheduled": len(pods),
            "numberReady": ready,
            "numberAvailable": ready,
            "numberMisscheduled": 0,
        }
        if len(wanted_nodes) > ready:
            status["numberUnavailable"] = len(wanted_nodes) - ready
        self._write_status("apps/v1", "DaemonSet", ds, status)

    def _sync_cronjob(self, cronjob: dict) -> None:
        spec = cronjob.get("spec") or {}
        try:
            fields = parse_cron(str(spec.get("schedule", "")))
        except ValueError:
            return
        jobs = self._owned("batch/v1", "Job", cronjob)
        active = [j for j in jobs if not _job_finished(j)]
        now_minute = int(self.clock.time() // 60)
        created_minute = int(_parse_time(cronjob["metadata"].get("creationTimestamp")) // 60)
        status = dict(cronjob.get("status") or {})
        last = status.get("lastScheduleTime")
        last_minute = int(_parse_time(last) // 60) if last else created_minute
        due = None
        # the latest scheduled minute after the last one (missed runs collapse into one)
        for minute in range(now_minute, max(last_minute, now_minute - 24 * 60), -1):
            if cron_matches(fields, minute):
                due = minute
                break
        name = cronjob["metadata"]["name"]
        if due is not None and due > last_minute and not spec.get("suspend"):
            policy = spec.get("concurrencyPolicy") or "Allow"
            deadline = spec.get("startingDeadlineSeconds")
            too_late = deadline is not None and self.clock.time() - due * 60 > float(deadline)
            if policy == "Forbid" and active:
                pass  # skipped: not recorded as scheduled, retried next minute
            elif not too_late:
                if policy == "Replace":
                    for job in active:
                        self._delete(cronjob, job, "cronjob-controller")
                template = copy.deepcopy(spec.get("jobTemplate") or {})
                tmeta = template.get("metadata") or {}
                job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{name}-{due}",
                        "namespace": cronjob["metadata"].get("namespace"),
                        "labels": dict(tmeta.get("labels") or {}),
                        "annotations": {
                            **(tmeta.get("annotations") or {}),
                            CRONJOB_SCHEDULED_ANNOTATION: rfc3339(due * 60),
                        },
                        "ownerReferences": [_owner_reference(cronjob, "batch/v1", "CronJob")],
                    },
                    "spec": template.get("spec") or {},
                }
                self._create(cronjob, job, "cronjob-controller")
                status["lastScheduleTime"] = rfc3339(due * 60)
        jobs = self._owned("batch/v1", "Job", cronjob)
        status["active"] = [
            {
                "kind": "Job",
                "namespace": j["metadata"].get("namespace"),
                "name": j["metadata"]["name"],
                "uid": j["metadata"]["uid"],
                "apiVersion": "batch/v1",
                "resourceVersion": j["metadata"].get("resourceVersion"),
            }
            for j in jobs
            if not _job_finished(j)
        ] or None
        succeeded = [j for j in jobs if _job_finished(j) == "Complete"]
        failed = [j for j in jobs if _job_finished(j) == "Failed"]
        if succeeded:
            times = [
                c.get("lastTransitionTime")
                for j in succeeded
                for c in (j.get("status") or {}).get("conditions") or []
                if c.get("type") == "Complete"
            ]
            if times:
                status["lastSuccessfulTime"] = max(times)
        for finished, limit in (
            (succeeded, int(spec.get("successfulJobsHistoryLimit", 3))),
            (failed, int(spec.get("failedJobsHistoryLimit", 1))),
        ):
            finished.sort(key=lambda j: j["metadata"].get("creationTimestamp", ""))
            for job in finished[: max(0, len(finished) - limit)]:
                namespace, job_name = _key(job)
                try:
                    self.store.delete(
                        "batch/v1", "Job", namespace, job_name, propagation="Background"
                    )
                except ApiError as exc:
                    if exc.code != 404:
                        raise
        if status.get("active") is None:
            status.pop("active", None)
            if (cronjob.get("status") or {}).get("active"):
                status["active"] = None
        self._write_status("batch/v1", "CronJob", cronjob, status)


def _job_finished(job: dict) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return cond["type"]
    return None


def _parse_time(value: str | None) -> float:
    if not value:
        return 0.0
    import calendar

    return float(calendar.timegm(time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")))


def start(ctx) -> WorkloadController:
    controller = WorkloadController(ctx)
    ctx.extras["workloads"] = controller
    ctx.store.add_admission_hook("batch/v1", "CronJob", validate_cronjob)
    for kind, api_version in OWNERS.items():
        ctx.spawn(follow(ctx.store, api_version, kind, controller.on_owner(kind)), f"wl-{kind}")
    ctx.spawn(follow(ctx.store, "v1", "Pod", controller.on_dependent), "wl-pods")
    ctx.spawn(follow(ctx.store, "batch/v1", "Job", controller.on_dependent), "wl-jobs")
    ctx.spawn(follow(ctx.store, "v1", "Node", controller.on_node), "wl-nodes")
    ctx.spawn(controller.loop(), "wl-loop")
    ctx.spawn(controller.cron_ticker(), "wl-cron")
    return controller
