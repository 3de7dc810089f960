"""The admission plugins kube-apiserver runs on a new pod, after the API defaults (admission.py):

- ServiceAccount: the pod's service account must exist (the namespace's `default` one is
  created on demand, as the serviceaccount controller would have);
- RuntimeClass: a named RuntimeClass must exist (403 "pod rejected: RuntimeClass "x" not
  found"); its overhead and scheduling constraints are added to the pod;
- LimitRanger: Container defaults (`default` limits, `defaultRequest` requests) are applied, and
  min/max are enforced with upstream's messages;
- ResourceQuota: the namespace's quotas are enforced for pods (requests.*, limits.*, cpu/memory,
  extended resources, `pods`, `count/pods`) and for `count/<resource>` of other objects, with
  upstream's "exceeded quota" and "must specify" messages; the quota controller keeps
  `status.hard` and `status.used` current;
- PodSecurity: the namespace's `pod-security.kubernetes.io/enforce` level refuses pods; its `warn`
  level (and `enforce`, for pod templates of workloads) adds warnings, as upstream.

The GPU Operator's `nvidia` RuntimeClass exists from the start, as on a cluster it manages.
"""

from __future__ import annotations

import asyncio
import contextlib

from kubesim.api import errors
from kubesim.api.quantity import Quantity, QuantityError
from kubesim.controllers.apiserver import pod_security
from kubesim.controllers.scheduler import is_terminal

NVIDIA_RUNTIME_CLASS = "nvidia"
# resources whose requests are counted under the bare name in a quota (cpu == requests.cpu)
_STANDARD_REQUESTS = ("cpu", "memory", "ephemeral-storage")
# pod-template kinds PodSecurity warns about (it only enforces on pods)
TEMPLATE_KINDS = {
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("batch", "Job"),
    ("", "ReplicationController"),
    ("", "PodTemplate"),
}
# kinds whose object count a quota may cap (count/<plural>[.<group>] and the legacy names)
COUNTED = {
    ("", "ConfigMap"): ("configmaps", "count/configmaps"),
    ("", "Secret"): ("secrets", "count/secrets"),
    ("", "Service"): ("services", "count/services"),
    ("", "PersistentVolumeClaim"): ("persistentvolumeclaims", "count/persistentvolumeclaims"),
    ("", "ReplicationController"): ("replicationcontrollers", "count/replicationcontrollers"),
    ("batch", "Job"): (None, "count/jobs.batch"),
    ("batch", "CronJob"): (None, "count/cronjobs.batch"),
    ("apps", "Deployment"): (None, "count/deployments.apps"),
    ("apps", "StatefulSet"): (None, "count/statefulsets.apps"),
    ("apps", "ReplicaSet"): (None, "count/replicasets.apps"),
    ("apps", "DaemonSet"): (None, "count/daemonsets.apps"),
}


def _q(value) -> Quantity:
    return Quantity.parse(value)


def _fmt(value: Quantity) -> str:
    return str(value)


def _containers(spec: dict) -> list[dict]:
    return [c for c in spec.get("containers") or [] if isinstance(c, dict)]


def pod_usage(pod: dict) -> dict[str, Quantity]:
    """What a pod counts against a quota: requests.X/limits.X (max of init and sum), pods."""
    spec = pod.get("spec") or {}
    usage: dict[str, Quantity] = {}

    def add(total: dict, key: str, value, *, maximum: bool = False) -> None:
        try:
            amount = _q(value)
        except QuantityError:
            return
        if maximum:
            if key not in total or total[key] < amount:
                total[key] = amount
        else:
            total[key] = total[key] + amount if key in total else amount

    main: dict[str, Quantity] = {}
    init: dict[str, Quantity] = {}
    for target, containers, maximum in (
        (main, spec.get("containers") or [], False),
        (init, spec.get("initContainers") or [], True),
    ):
        for c in containers:
            resources = c.get("resources") or {}
            requests = dict(resources.get("limits") or {})
            requests.update(resources.get("requests") or {})
            for name, value in requests.items():
                add(target, f"requests.{name}", value, maximum=maximum)
            for name, value in (resources.get("limits") or {}).items():
                add(target, f"limits.{name}", value, maximum=maximum)
    for key in set(main) | set(init):
        a, b = main.get(key), init.get(key)
        usage[key] = a if b is None or (a is not None and b < a) else b
    for name, value in (spec.get("overhead") or {}).items():
        for prefix in ("requests.", "limits."):
            if prefix + name in usage:
                add(usage, prefix + name, value)
    for name in _STANDARD_REQUESTS:
        if f"requests.{name}" in usage:
            usage[name] = usage[f"requests.{name}"]
    usage["pods"] = _q(1)
    usage["count/pods"] = _q(1)
    return usage


class PodAdmission:
    def __init__(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.dirty_quota_namespaces: set[str] = set()
        self._pod_being_admitted: dict = {}
        self.wake = asyncio.Event()
        # The pods a quota counts (neither terminal nor deleting), per namespace, kept by the
        # write listener: a quota check looks at these, not at every pod the namespace ever had
        # (finished pods stay until their Job goes, so a busy namespace holds thousands).
        self.live_pods: dict[str, dict[str, dict]] = {}
        self._rtypes: dict[tuple[str, str], object] = {}

    def track_pod(self, event_type: str, pod: dict) -> None:
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        live = (
            event_type != "DELETED" and not is_terminal(pod) and not meta.get("deletionTimestamp")
        )
        if live:
            self.live_pods.setdefault(namespace, {})[meta["name"]] = pod
        else:
            bucket = self.live_pods.get(namespace)
            if bucket is not None:
                bucket.pop(meta["name"], None)
                if not bucket:
                    del self.live_pods[namespace]

    def _stored(self, api_version: str, kind: str, namespace: str) -> list[dict]:
        """The stored objects (read-only, no copies) of a kind in a namespace."""
        rtype = self._rtypes.get((api_version, kind))
        if rtype is None:
            rtype = self._rtypes[(api_version, kind)] = self.store.registry.by_kind(
                api_version, kind
            )
        return self.store.select(rtype, namespace)

    # ---------------------------------------------------------------- pods
    def admit_pod(self, operation: str, pod: dict, old: dict | None) -> None:
        if operation != "CREATE":
            return
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        name = meta.get("name", "")
        spec = pod.setdefault("spec", {})
        self._service_account(namespace, name, spec)
        self._runtime_class(name, spec)
        self._limit_ranges(namespace, name, spec)
        self._pod_security(namespace, name, pod)
        self._pod_being_admitted = pod
        self._quota(namespace, name, "pods", pod_usage(pod))

    def _service_account(self, namespace: str, name: str, spec: dict) -> None:
        account = spec.get("serviceAccountName") or "default"
        if self.store.try_get("v1", "ServiceAccount", namespace, account) is not None:
            return
        if account == "default":
            with contextlib.suppress(errors.ApiError):
                self.store.create(
                    {
                        "apiVersion": "v1",
                        "kind": "ServiceAccount",
                        "metadata": {"name": "default", "namespace": namespace},
                    },
                    namespace=namespace,
                )
            return
        raise errors.forbidden(
            f'pods "{name}" is forbidden: error looking up service account '
            f'{namespace}/{account}: serviceaccount "{account}" not found',
            details={"name": name, "kind": "pods"},
        )

    def _runtime_class(self, name: str, spec: dict) -> None:
        class_name = spec.get("runtimeClassName")
        if not class_name:
            return
        runtime_class = self.store.try_get("node.k8s.io/v1", "RuntimeClass", None, class_name)
        if runtime_class is None:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: pod rejected: RuntimeClass "{class_name}" not found',
                details={"name": name, "kind": "pods"},
            )
        overhead = (runtime_class.get("overhead") or {}).get("podFixed")
        if overhead:
            if spec.get("overhead") and spec["overhead"] != overhead:
                raise errors.forbidden(
                    f"pods \"{name}\" is forbidden: pod rejected: Pod's Overhead doesn't match "
                    "RuntimeClass's defined Overhead",
                    details={"name": name, "kind": "pods"},
                )
            spec["overhead"] = dict(overhead)
        scheduling = runtime_class.get("scheduling") or {}
        for key, value in (scheduling.get("nodeSelector") or {}).items():
            selector = spec.setdefault("nodeSelector", {})
            if selector.get(key, value) != value:
                raise errors.forbidden(
                    f'pods "{name}" is forbidden: pod rejected: conflict: '
                    f"runtimeClass.scheduling.nodeSelector[{key}] = {value}; "
                    f"pod.spec.nodeSelector[{key}] = {selector[key]}",
                    details={"name": name, "kind": "pods"},
                )
            selector[key] = value
        for toleration in scheduling.get("tolerations") or []:
            tolerations = spec.setdefault("tolerations", [])
            if toleration not in tolerations:
                tolerations.append(toleration)

    def _limit_ranges(self, namespace: str, name: str, spec: dict) -> None:
        ranges = self.store.list("v1", "LimitRange", namespace)
        if not ranges:
            return
        problems: list[str] = []
        for limit_range in ranges:
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                if item.get("type") != "Container":
                    continue
                for key in ("initContainers", "containers"):
                    for c in spec.get(key) or []:
                        resources = c.setdefault("resources", {})
                        for res, value in (item.get("default") or {}).items():
                            resources.setdefault("limits", {}).setdefault(res, value)
                        requests = resources.setdefault("requests", {})
                        for res, value in (item.get("defaultRequest") or {}).items():
                            requests.setdefault(res, value)
                        # a limit without a request makes the request (API defaulting)
                        for res, value in (resources.get("limits") or {}).items():
                            requests.setdefault(res, value)
                        if not requests:
                            del resources["requests"]
                        problems.extend(_min_max(item, resources))
        if problems:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: [' + ", ".join(problems) + "]"
                if len(problems) > 1
                else f'pods "{name}" is forbidden: {problems[0]}',
                details={"name": name, "kind": "pods"},
            )

    def _pod_security(self, namespace: str, name: str, pod: dict) -> None:
        ns = self.store.try_get("v1", "Namespace", None, namespace)
        labels = (ns or {}).get("metadata", {}).get("labels") or {}
        if not any(k.startswith("pod-security.kubernetes.io/") for k in labels):
            return
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        enforce = pod_security.level_of(labels, pod_security.ENFORCE)
        violations = pod_security.check(spec, meta, enforce)
        if violations:
            raise errors.forbidden(
                f'pods "{name}" is forbidden: ' + pod_security.message(enforce, violations),
                details={"name": name, "kind": "pods"},
            )
        warn = pod_security.level_of(labels, pod_security.WARN)
        if warn != "privileged":
            found = pod_security.check(spec, meta, warn)
            if found:
                self.store.warnings.append(f"would {pod_security.message(warn, found)}")

    def template_warnings(self, operation: str, obj: dict, old: dict | None) -> None:
        """PodSecurity on a workload's pod template: warnings only (pods are enforced)."""
        namespace = obj["metadata"].get("namespace")
        ns = self.store.try_get("v1", "Namespace", None, namespace) if namespace else None
        labels = (ns or {}).get("metadata", {}).get("labels") or {}
        if not any(k.startswith("pod-security.kubernetes.io/") for k in labels):
            return
        spec = obj.get("spec") or {}
        template = spec.get("template") or (spec.get("jobTemplate") or {}).get("spec", {}).get(
            "template"
        )
        if not isinstance(template, dict):
            return
        levels = {
            pod_security.level_of(labels, pod_security.ENFORCE),
            pod_security.level_of(labels, pod_security.WARN),
        }
        level = "restricted" if "restricted" in levels else "baseline"
        if levels == {"privileged"}:
            return
        found = pod_security.check(
            template.get("spec") or {}, template.get("metadata") or {}, level
        )
        if found:
            self.store.warnings.append(f"would {pod_security.message(level, found)}")

    # ---------------------------------------------------------------- quota
    def _quotas(self, namespace: str) -> list[dict]:
        return self._stored("v1", "ResourceQuota", namespace)

    def _used(self, namespace: str, quota_keys: set[str]) -> dict[str, Quantity]:
        used: dict[str, Quantity] = {key: _q(0) for key in quota_keys}
        if any(not k.startswith("count/") or k == "count/pods" for k in quota_keys):
            for pod in list(self.live_pods.get(namespace, {}).values()):
                for key, amount in pod_usage(pod).items():
                    if key in used:
                        used[key] = used[key] + amount
        for (group, kind), (legacy, count_key) in COUNTED.items():
            if legacy in quota_keys or count_key in quota_keys:
                api_version = f"{group}/v1" if group else "v1"
                number = _q(len(self._stored(api_version, kind, namespace)))
                for key in (legacy, count_key):
                    if key in used:
                        used[key] = number
        if "requests.storage" in quota_keys:
            total = _q(0)
            for claim in self._stored("v1", "PersistentVolumeClaim", namespace):
                storage = (
                    ((claim.get("spec") or {}).get("resources") or {})
                    .get("requests", {})
                    .get("storage")
                )
                if storage is not None:
                    total = total + _q(storage)
            used["requests.storage"] = total
        return used

    def _quota(self, namespace: str, name: str, plural: str, usage: dict[str, Quantity]) -> None:
        for quota in self._quotas(namespace):
            hard = (quota.get("spec") or {}).get("hard") or {}
            if not hard:
                continue
            if plural == "pods":
                missing = _missing_compute(hard, self._pod_being_admitted)
                if missing:
                    raise errors.forbidden(
                        f'pods "{name}" is forbidden: failed quota: '
                        f"{quota['metadata']['name']}: must specify {missing}",
                        details={"name": name, "kind": plural},
                    )
            relevant = {k for k in hard if k in usage}
            if not relevant:
                continue
            used = self._used(namespace, relevant)
            over = []
            for key in sorted(relevant):
                try:
                    limit = _q(hard[key])
                except QuantityError:
                    continue
                if limit < used[key] + usage[key]:
                    over.append(key)
            if over:
                requested = ",".join(f"{k}={_fmt(usage[k])}" for k in over)
                current = ",".join(f"{k}={_fmt(used[k])}" for k in over)
                limited = ",".join(f"{k}={_fmt(_q(hard[k]))}" for k in over)
                raise errors.forbidden(
                    f'{plural} "{name}" is forbidden: exceeded quota: '
                    f"{quota['metadata']['name']}, requested: {requested}, used: {current}, "
                    f"limited: {limited}",
                    details={"name": name, "kind": plural},
                )

    def count_hook(self, plural: str, keys: tuple):
        def hook(operation: str, obj: dict, old: dict | None) -> None:
            if operation != "CREATE":
                return
            namespace = obj["metadata"].get("namespace") or "default"
            usage = {key: _q(1) for key in keys if key}
            if plural == "persistentvolumeclaims":
                storage = (
                    ((obj.get("spec") or {}).get("resources") or {})
                    .get("requests", {})
                    .get("storage")
                )
                if storage is not None:
                    with contextlib.suppress(QuantityError):
                        usage["requests.storage"] = _q(storage)
            self._quota(namespace, obj["metadata"].get("name", ""), plural, usage)

        return hook

    # quota status: hard and used, refreshed when pods or quotas change
    def on_change(self, event_type: str, obj: dict) -> None:
        namespace = obj["metadata"].get("namespace")
        if namespace and self._quotas(namespace):
            self.dirty_quota_namespaces.add(namespace)
            self.wake.set()

    async def quota_status_loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.05)
            namespaces = list(self.dirty_quota_namespaces)
            self.dirty_quota_namespaces.clear()
            for namespace in namespaces:
                for quota in self._quotas(namespace):
                    hard = dict((quota.get("spec") or {}).get("hard") or {})
                    used = self._used(namespace, set(hard))
                    status = {
                        "hard": {k: _fmt(_q(v)) for k, v in hard.items()},
                        "used": {k: _fmt(used[k]) for k in hard},
                    }
                    if quota.get("status") == status:
                        continue
                    with contextlib.suppress(errors.ApiError):
                        self.store.patch(
                            "v1",
                            "ResourceQuota",
                            namespace,
                            quota["metadata"]["name"],
                            {"status": status},
                            subresource="status",
                        )
                await asyncio.sleep(0)


def _missing_compute(hard: dict, pod: dict) -> str:
    """'limits.cpu for: main; requests.memory for: main' when a quota tracks a compute resource
    that containers of the pod leave unset, worded as upstream."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or [] if isinstance(c, dict)]
    parts = []
    for key in sorted(hard):
        kind, _, base = (
            key.partition(".")
            if key.startswith(("requests.", "limits."))
            else (
                "requests",
                "",
                key,
            )
        )
        if base not in _STANDARD_REQUESTS:
            continue
        names = []
        for c in containers:
            resources = c.get("resources") or {}
            values = dict(resources.get("limits") or {})
            if kind == "requests":
                values.update(resources.get("requests") or {})
            if base not in values:
                names.append(c.get("name", ""))
        if names:
            parts.append(f"{kind}.{base} for: {','.join(names)}")
    return "; ".join(parts)


def _min_max(item: dict, resources: dict) -> list[str]:
    problems = []
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    for res, value in (item.get("max") or {}).items():
        limit = limits.get(res)
        if limit is None:
            problems.append(f"maximum {res} usage per Container is {value}.  No limit is specified")
        elif _q(value) < _q(limit):
            problems.append(f"maximum {res} usage per Container is {value}, but limit is {limit}")
    for res, value in (item.get("min") or {}).items():
        request = requests.get(res)
        if request is None:
            problems.append(
                f"minimum {res} usage per Container is {value}.  No request is specified"
            )
        elif _q(request) < _q(value):
            problems.append(
                f"minimum {res} usage per Container is {value}, but request is {request}"
            )
    return problems


def install(ctx) -> PodAdmission:
    admission = PodAdmission(ctx)
    store = ctx.store
    store.add_admission_hook("v1", "Pod", admission.admit_pod)
    for group, kind in TEMPLATE_KINDS:
        store.add_admission_hook(
            f"{group}/v1" if group else "v1", kind, admission.template_warnings
        )
    for (group, kind), (legacy, count_key) in COUNTED.items():
        plural = legacy or count_key.split("/", 1)[1].split(".", 1)[0]
        store.add_admission_hook(
            f"{group}/v1" if group else "v1",
            kind,
            admission.count_hook(plural, (legacy, count_key)),
        )
    with contextlib.suppress(errors.ApiError):
        store.create(
            {
                "apiVersion": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "metadata": {
                    "name": NVIDIA_RUNTIME_CLASS,
                    "labels": {"app.kubernetes.io/managed-by": "gpu-operator"},
                },
                "handler": "nvidia",
            }
        )
    counted = {("", "Pod"), ("", "ResourceQuota"), *COUNTED}
    pod_type = store.registry.by_kind("v1", "Pod")
    for pod in store.select(pod_type, None):
        admission.track_pod("ADDED", pod)

    def written(event_type: str, rtype, obj: dict, old: dict | None) -> None:
        if rtype.group == "" and rtype.kind == "Pod":
            admission.track_pod(event_type, obj)
        if (rtype.group, rtype.kind) in counted:
            admission.on_change(event_type, obj)

    store.add_write_listener(written)
    ctx.spawn(admission.quota_status_loop(), "quota-status")
    return admission
