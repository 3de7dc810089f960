"""Kueue's pod integration (the `pod` framework of v0.19's default configuration): a plain Pod
labelled `kueue.x-k8s.io/queue-name` is held by a scheduling gate until Kueue admits a Workload
for it; a pod group (label `kueue.x-k8s.io/pod-group-name` and annotation
`kueue.x-k8s.io/pod-group-total-count`) gets one Workload once all its pods exist.

- the webhook (on Pod create, outside kube-system and kueue-system): the
  `kueue.x-k8s.io/admission` scheduling gate, the `kueue.x-k8s.io/managed` label and finalizer; a
  group pod without its total count is refused as Kueue's webhook refuses it;
- the reconciler: creates the Workload (`pod-<name>-<hash>` for a single pod, the group name for a
  group; one pod set per distinct pod shape, owned by the pods), and once the Workload is
  admitted adds the flavor's node labels to the pods' nodeSelector and removes the gate; sets the
  Workload's PodsReady when the pods run, Finished when all of them end (and lets the pods go by
  dropping the finalizer); deletes the running pods of an evicted Workload, as Kueue stops them.

The Workload itself is admitted by the Kueue controller like any other (kueue.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import traceback

from kubesim.api import errors
from kubesim.clock import rfc3339

GROUP = "kueue.x-k8s.io"
API = f"{GROUP}/v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
GROUP_LABEL = f"{GROUP}/pod-group-name"
TOTAL_ANNOTATION = f"{GROUP}/pod-group-total-count"
MANAGED_LABEL = f"{GROUP}/managed"
FINALIZER = f"{GROUP}/managed"
GATE = f"{GROUP}/admission"
ROLE_HASH_ANNOTATION = f"{GROUP}/role-hash"
UNMANAGED_NAMESPACES = ("kube-system", "kueue-system")
FIELD_MANAGER = "kueue-pod-controller"


def _has_workloads(store) -> bool:
    try:
        store.registry.by_kind(API, "Workload")
    except Exception:
        return False
    return True


def _cond(obj: dict, ctype: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def _true(obj: dict, ctype: str) -> bool:
    return (_cond(obj, ctype) or {}).get("status") == "True"


def _terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _ready(pod: dict) -> bool:
    if (pod.get("status") or {}).get("phase") == "Succeeded":
        return True
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def role_hash(pod: dict) -> str:
    """Pods of one shape (requests, selectors, tolerations) share a pod set, as upstream's
    role hash groups them."""
    spec = pod.get("spec") or {}
    shape = {
        "containers": [
            {"resources": (c.get("resources") or {}).get("requests") or {}}
            for c in spec.get("containers") or []
        ],
        "nodeSelector": spec.get("nodeSelector") or {},
        "tolerations": spec.get("tolerations") or [],
        "priorityClassName": spec.get("priorityClassName") or "",
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:8]


def workload_name_for_pod(pod: dict) -> str:
    meta = pod["metadata"]
    digest = hashlib.sha1(f"{meta['name']}/{meta.get('uid', '')}".encode()).hexdigest()[:5]  # noqa: S324 - a name suffix, as Kueue derives it, not a secret
    return f"pod-{meta['name'][:240]}-{digest}"


class PodIntegration:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.dirty: set[tuple[str, str]] = set()  # (namespace, group key)
        self.wake = asyncio.Event()

    # ---------------------------------------------------------------- webhook
    def webhook(self, operation: str, pod: dict, old: dict | None) -> None:
        if operation != "CREATE":
            return
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        if not labels.get(QUEUE_LABEL) or meta.get("namespace") in UNMANAGED_NAMESPACES:
            return
        if not _has_workloads(self.store):
            return
        annotations = meta.get("annotations") or {}
        if labels.get(GROUP_LABEL):
            total = annotations.get(TOTAL_ANNOTATION)
            if total is None or not str(total).isdigit() or int(total) < 1:
                raise errors.forbidden(
                    'admission webhook "mpod.kb.io" denied the request: '
                    f"metadata.annotations[{TOTAL_ANNOTATION}]: "
                    + ("Required value" if total is None else f'Invalid value: "{total}"')
                )
        labels[MANAGED_LABEL] = "true"
        meta["labels"] = labels
        annotations[ROLE_HASH_ANNOTATION] = role_hash(pod)
        meta["annotations"] = annotations
        finalizers = meta.setdefault("finalizers", [])
        if FINALIZER not in finalizers:
            finalizers.append(FINALIZER)
        gates = pod.setdefault("spec", {}).setdefault("schedulingGates", [])
        if not any(g.get("name") == GATE for g in gates):
            gates.append({"name": GATE})

    # ---------------------------------------------------------------- events
    def written(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        if rtype.group == "" and rtype.kind == "Pod":
            labels = obj["metadata"].get("labels") or {}
            if labels.get(MANAGED_LABEL) != "true":
                return
            self._mark(obj)
        elif rtype.group == GROUP and rtype.kind == "Workload":
            for ref in obj["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "Pod":
                    group = (obj["metadata"].get("annotations") or {}).get(GROUP_LABEL)
                    key = group or "pod:" + ref.get("name", "")
                    self.dirty.add((obj["metadata"].get("namespace") or "", key))
                    self.wake.set()
                    break

    def _mark(self, pod: dict) -> None:
        meta = pod["metadata"]
        group = (meta.get("labels") or {}).get(GROUP_LABEL)
        self.dirty.add((meta.get("namespace") or "", group or "pod:" + meta["name"]))
        self.wake.set()

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.02)
            batch = sorted(self.dirty)
            self.dirty.clear()
            for namespace, key in batch:
                try:
                    self.sync(namespace, key)
                except errors.ApiError as exc:
                    if exc.code == 409:
                        self.dirty.add((namespace, key))
                        self.wake.set()
                except Exception:
                    traceback.print_exc()
            await asyncio.sleep(0)

    # ---------------------------------------------------------------- reconcile
    def _pods(self, namespace: str, key: str) -> list[dict]:
        if key.startswith("pod:"):
            pod = self.store.try_get("v1", "Pod", namespace, key[4:])
            return [pod] if pod is not None else []
        return self.store.list("v1", "Pod", namespace, label_selector=f"{GROUP_LABEL}={key}")

    def _workload(self, namespace: str, key: str, pods: list[dict]) -> dict | None:
        if not key.startswith("pod:"):
            return self.store.try_get(API, "Workload", namespace, key)
        if not pods:
            return None
        return self.store.try_get(API, "Workload", namespace, workload_name_for_pod(pods[0]))

    def sync(self, namespace: str, key: str) -> None:
        pods = [
            p
            for p in self._pods(namespace, key)
            if (p["metadata"].get("labels") or {}).get(MANAGED_LABEL) == "true"
        ]
        workload = self._workload(namespace, key, pods)
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp") and not _terminal(pod):
                self._release(pod)  # deleted before it ended: let it go
        if workload is None:
            gated = [p for p in pods if not _terminal(p) and self._gated(p)]
            if gated:
                self._create_workload(namespace, key, pods)
            return
        if _true(workload, "Finished"):
            for pod in pods:
                self._release(pod)
            return
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if _true(workload, "Evicted"):
            for pod in live:
                if not self._gated(pod) and not _terminal(pod):
                    with contextlib.suppress(errors.ApiError):
                        self.store.delete(
                            "v1", "Pod", namespace, pod["metadata"]["name"], grace=True
                        )
            return
        if _true(workload, "QuotaReserved") and _true(workload, "Admitted"):
            for pod in live:
                if self._gated(pod):
                    self._ungate(pod, workload)
            total = self._total(key, pods)
            if pods and all(_terminal(p) for p in pods) and len(pods) >= total:
                self._finish(workload, pods)
            elif (
                len(live) >= total
                and all(_ready(p) for p in live)
                and not _true(workload, "PodsReady")
            ):
                self._set_condition(
                    workload,
                    {
                        "type": "PodsReady",
                        "status": "True",
                        "reason": "PodsReady",
                        "message": "All pods reached readiness and the workload is running",
                    },
                )

    @staticmethod
    def _gated(pod: dict) -> bool:
        return any(
            g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or []
        )

    @staticmethod
    def _total(key: str, pods: list[dict]) -> int:
        if key.startswith("pod:"):
            return 1
        for pod in pods:
            total = (pod["metadata"].get("annotations") or {}).get(TOTAL_ANNOTATION)
            if total and str(total).isdigit():
                return int(total)
        return len(pods)

    def _create_workload(self, namespace: str, key: str, pods: list[dict]) -> None:
        total = self._total(key, pods)
        live = [p for p in pods if not _terminal(p) and not p["metadata"].get("deletionTimestamp")]
        if len(live) < total:
            return  # a group waits for all of its pods
        roles: dict[str, list[dict]] = {}
        for pod in live:
            roles.setdefault(role_hash(pod), []).append(pod)
        first = live[0]
        queue = (first["metadata"].get("labels") or {}).get(QUEUE_LABEL)
        podsets = []
        for index, (role, members) in enumerate(sorted(roles.items())):
            spec = dict(members[0].get("spec") or {})
            spec.pop("schedulingGates", None)
            spec.pop("nodeName", None)
            podsets.append(
                {
                    "name": "main" if len(roles) == 1 else f"{role}"[:63] or f"role-{index}",
                    "count": len(members),
                    "template": {"spec": spec},
                }
            )
        name = key if not key.startswith("pod:") else workload_name_for_pod(first)
        priority = 0
        priority_class = (first.get("spec") or {}).get("priorityClassName")
        if priority_class:
            pc = self.store.try_get("scheduling.k8s.io/v1", "PriorityClass", None, priority_class)
            priority = int((pc or {}).get("value") or 0)
        workload = {
            "apiVersion": API,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": {GROUP_LABEL: key} if not key.startswith("pod:") else {},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": p["metadata"]["name"],
                        "uid": p["metadata"]["uid"],
                        "controller": key.startswith("pod:"),
                        "blockOwnerDeletion": True,
                    }
                    for p in live
                ],
            },
            "spec": {"active": True, "queueName": queue, "podSets": podsets, "priority": priority},
        }
        try:
            self.store.create(workload, namespace=namespace, field_manager=FIELD_MANAGER)
        except errors.ApiError as exc:
            if exc.code != 409:
                raise

    def _ungate(self, pod: dict, workload: dict) -> None:
        selector: dict = {}
        spec = pod.get("spec") or {}
        tolerations = list(spec.get("tolerations") or [])
        admission = (workload.get("status") or {}).get("admission") or {}
        for psa in admission.get("podSetAssignments") or []:
            for flavor_name in sorted(set((psa.get("flavors") or {}).values())):
                flavor = self.store.try_get(API, "ResourceFlavor", None, flavor_name) or {}
                selector.update((flavor.get("spec") or {}).get("nodeLabels") or {})
                for toleration in (flavor.get("spec") or {}).get("tolerations") or []:
                    if toleration not in tolerations:
                        tolerations.append(toleration)
        gates = [g for g in spec.get("schedulingGates") or [] if g.get("name") != GATE]
        patch: dict = {"spec": {"schedulingGates": gates or None}}
        if selector:
            patch["spec"]["nodeSelector"] = {**selector, **(spec.get("nodeSelector") or {})}
        if tolerations != list(spec.get("tolerations") or []):
            patch["spec"]["tolerations"] = tolerations
        with contextlib.suppress(errors.ApiError):
            self.store.patch(
                "v1",
                "Pod",
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                patch,
                field_manager=FIELD_MANAGER,
            )

    def _release(self, pod: dict) -> None:
        finalizers = pod["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        with contextlib.suppress(errors.ApiError):
            self.store.patch(
                "v1",
                "Pod",
                pod["metadata"]["namespace"],
                pod["metadata"]["name"],
                {
                    "metadata": {
                        "finalizers": [f for f in finalizers if f != FINALIZER] or None,
                        "resourceVersion": pod["metadata"]["resourceVersion"],
                    }
                },
            )

    def _finish(self, workload: dict, pods: list[dict]) -> None:
        succeeded = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Succeeded")
        ok = succeeded == len(pods)
        self._set_condition(
            workload,
            {
                "type": "Finished",
                "status": "True",
                "reason": "Succeeded" if ok else "Failed",
                "message": f"Pods succeeded: {succeeded}/{len(pods)}."
                if ok
                else f"Pods failed: {len(pods) - succeeded}/{len(pods)}.",
            },
        )
        for pod in pods:
            self._release(pod)

    def _set_condition(self, workload: dict, condition: dict) -> None:
        now = rfc3339(self.ctx.clock.now())
        conditions = [
            c
            for c in (workload.get("status") or {}).get("conditions") or []
            if c.get("type") != condition["type"]
        ]
        conditions.append(
            {
                **condition,
                "lastTransitionTime": now,
                "observedGeneration": workload["metadata"].get("generation", 1),
            }
        )
        with contextlib.suppress(errors.ApiError):
            self.store.patch(
                API,
                "Workload",
                workload["metadata"]["namespace"],
                workload["metadata"]["name"],
                {"status": {"conditions": conditions}},
                subresource="status",
                field_manager=FIELD_MANAGER,
            )


def install(ctx) -> PodIntegration:
    integration = PodIntegration(ctx)
    ctx.extras["kueue_pods"] = integration
    ctx.store.add_admission_hook("v1", "Pod", integration.webhook)
    ctx.store.add_write_listener(integration.written)
    ctx.spawn(integration.loop(), "kueue-pods")
    return integration
