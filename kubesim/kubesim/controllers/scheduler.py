"""The default scheduler (kube-scheduler's filter plugins and its FailedScheduling messages), and
the placement helpers the Volcano controller uses to bind a gang in one step.

Filters, in kube-scheduler's order: NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector
and required node affinity), NodeResourcesFit. Scoring packs GPUs: among the nodes that fit, a pod
that asks for an extended resource goes to the node with the least of it left (MostAllocated),
which keeps whole nodes free for gangs; other pods go to the least-loaded node.

Resource usage per node comes from a tracker fed by the pod watch and by bind() itself, so a gang
placed in one step sees its own earlier members.
"""

from __future__ import annotations

import asyncio
import traceback
import weakref
from collections.abc import Iterable
from decimal import Decimal

from kubesim.api.errors import ApiError
from kubesim.api.quantity import Quantity
from kubesim.clock import rfc3339
from kubesim.controllers import dra, events, storage
from kubesim.controllers.context import follow

DEFAULT_SCHEDULER = "default-scheduler"
FIELD_MANAGER = "kube-scheduler"

# Filter failures preemption cannot resolve (kube-scheduler: UnschedulableAndUnresolvable).
UNRESOLVABLE_PREFIXES = ("node(s) had untolerated taint", "node(s) didn't match", "node(s) were")


def parse_quantity(value) -> Decimal:
    """A Kubernetes quantity ("500m", "64Gi", "8", 2) as a Decimal in base units."""
    exact = Quantity.parse(value.strip() if isinstance(value, str) else value).value
    return Decimal(exact.numerator) / Decimal(exact.denominator)


def quantity_units(resource: str, value) -> int:
    """Scheduler units: millicores for cpu, bytes for memory and storage, counts otherwise."""
    amount = parse_quantity(value)
    if resource == "cpu":
        return int((amount * 1000).to_integral_value(rounding="ROUND_CEILING"))
    return int(amount.to_integral_value(rounding="ROUND_CEILING"))


def _container_requests(container: dict) -> dict[str, int]:
    resources = container.get("resources") or {}
    # Requests default to limits when only limits are written (apiserver defaulting).
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: quantity_units(name, value) for name, value in merged.items()}


def pod_requests(pod: dict) -> dict[str, int]:
    """Effective request: max(largest init container, sum of containers) + overhead, + 1 pod."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = max(total.get(name, 0), amount)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + quantity_units(name, value)
    total["pods"] = 1
    return total


_allocatable_cache: dict[tuple[str, str], dict[str, int]] = {}


def node_allocatable(node: dict) -> dict[str, int]:
    """The node's allocatable in scheduler units (cached per node resourceVersion)."""
    meta = node.get("metadata") or {}
    key = (meta.get("name", ""), meta.get("resourceVersion", ""))
    cached = _allocatable_cache.get(key) if key[1] else None
    if cached is None:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        cached = {name: quantity_units(name, value) for name, value in alloc.items()}
        if key[1]:
            if len(_allocatable_cache) > 10000:
                _allocatable_cache.clear()
            _allocatable_cache[key] = cached
    return dict(cached)


def is_terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


# ----------------------------------------------------------------------------------------------
# Filters


def toleration_matches(toleration: dict, taint: dict) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key") or ""
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(pod: dict, node: dict) -> dict | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_matches(t, taint) for t in tolerations):
            return taint
    return None


def _match_expression(expr: dict, labels: dict) -> bool:
    key = expr.get("key")
    operator = expr.get("operator")
    values = expr.get("values") or []
    present = key in labels
    value = labels.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        try:
            left, right = int(value), int(values[0])
        except (TypeError, ValueError, IndexError):
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _match_term(term: dict, node: dict) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    expressions = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not expressions and not field_exprs:
        return False  # an empty term matches no objects
    return all(_match_expression(e, labels) for e in expressions) and all(
        _match_expression(e, fields) for e in field_exprs
    )


def matches_node_affinity(pod: dict, node: dict) -> bool:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        return True
    return any(_match_term(term, node) for term in terms)


def insufficient(requests: dict[str, int], node: dict, used: dict[str, int]) -> list[str]:
    alloc = node_allocatable(node)
    reasons = []
    for name in [
        "pods",
        "cpu",
        "memory",
        *sorted(k for k in requests if k not in ("pods", "cpu", "memory")),
    ]:
        want = requests.get(name, 0)
        if want <= 0:
            continue
        if used.get(name, 0) + want > alloc.get(name, 0):
            reasons.append("Too many pods" if name == "pods" else f"Insufficient {name}")
    return reasons


def filter_node(
    pod: dict, node: dict, used: dict[str, int], requests: dict[str, int] | None = None
) -> list[str]:
    """Every reason this node rejects the pod, as kube-scheduler words them (empty = fits)."""
    if (node.get("spec") or {}).get("unschedulable"):
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        unsched = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        if not any(toleration_matches(t, unsched) for t in tolerations):
            return ["node(s) were unschedulable"]
    taint = untolerated_taint(pod, node)
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"]
    if not matches_node_affinity(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    return insufficient(requests if requests is not None else pod_requests(pod), node, used)


def fit_pod(pod: dict, node: dict, used: dict[str, int]) -> str | None:
    """None when the pod fits on the node given what is already used there, else the reason."""
    reasons = filter_node(pod, node, used)
    return ", ".join(reasons) if reasons else None


def _score(requests: dict[str, int], node: dict, used: dict[str, int]) -> tuple:
    alloc = node_allocatable(node)
    extended = [k for k in requests if "/" in k and requests[k] > 0]
    if extended:
        # MostAllocated on the extended resources: fewest left after placing wins.
        left = sum(alloc.get(k, 0) - used.get(k, 0) - requests[k] for k in extended)
        return (0, left, node["metadata"]["name"])
    cpu_alloc = max(alloc.get("cpu", 1), 1)
    cpu_used = (used.get("cpu", 0) + requests.get("cpu", 0)) / cpu_alloc
    # Plain pods prefer nodes without GPUs, then the least loaded.
    has_gpu = any(k.startswith("nvidia.com/") and v > 0 for k, v in alloc.items())
    return (1 if has_gpu else 0, cpu_used, node["metadata"]["name"])


def failure_message(
    num_nodes: int, per_node: dict[str, list[str]], *, preemption_policy: str | None = None
) -> str:
    """kube-scheduler's FitError text, with the preemption post-filter's summary appended."""
    if num_nodes == 0:
        return "no nodes available to schedule pods"
    if preemption_policy == "Never":
        filters = ", ".join(
            sorted(
                f"{count} {reason}"
                for reason, count in _histogram(r for reasons in per_node.values() for r in reasons)
            )
        )
        return (
            f"0/{num_nodes} nodes are available: {filters}. "
            "preemption: not eligible due to preemptionPolicy=Never."
        )
    histogram: dict[str, int] = {}
    preemption: dict[str, int] = {}
    for reasons in per_node.values():
        for reason in reasons:
            histogram[reason] = histogram.get(reason, 0) + 1
        unresolvable = any(r.startswith(UNRESOLVABLE_PREFIXES) for r in reasons)
        verdict = (
            "Preemption is not helpful for scheduling"
            if unresolvable
            else "No preemption victims found for incoming pod"
        )
        preemption[verdict] = preemption.get(verdict, 0) + 1
    filters = ", ".join(sorted(f"{count} {reason}" for reason, count in histogram.items()))
    post = ", ".join(sorted(f"{count} {reason}" for reason, count in preemption.items()))
    return (
        f"0/{num_nodes} nodes are available: {filters}. "
        f"preemption: 0/{num_nodes} nodes are available: {post}."
    )


def _histogram(reasons) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    return list(counts.items())


# ----------------------------------------------------------------------------------------------
# Usage tracking


class UsageTracker:
    """Requested resources of the non-terminal pods bound to each node."""

    def __init__(self) -> None:
        self.fed = False  # True once a watch keeps it current
        self.pods: dict[tuple[str, str], tuple[str, dict[str, int]]] = {}
        self.usage: dict[str, dict[str, int]] = {}

    def _add(self, node: str, requests: dict[str, int], sign: int) -> None:
        used = self.usage.setdefault(node, {})
        for name, amount in requests.items():
            used[name] = used.get(name, 0) + sign * amount

    def observe(self, pod: dict, deleted: bool = False) -> None:
        meta = pod["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        node = (pod.get("spec") or {}).get("nodeName")
        holds = bool(node) and not deleted and not is_terminal(pod)
        previous = self.pods.pop(key, None)
        if previous is not None:
            self._add(previous[0], previous[1], -1)
        if holds:
            requests = previous[1] if previous and previous[0] == node else pod_requests(pod)
            self.pods[key] = (node, requests)
            self._add(node, requests, +1)

    def node_usage(self, node_name: str) -> dict[str, int]:
        return dict(self.usage.get(node_name, {}))


_trackers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tracker(store) -> UsageTracker:
    found = _trackers.get(store)
    if found is None:
        found = UsageTracker()
        _trackers[store] = found
    return found


def node_usage(store, node_name: str) -> dict[str, int]:
    """Requested resources of the pods bound to the node that still hold them."""
    track = tracker(store)
    if track.fed:
        return track.node_usage(node_name)
    used: dict[str, int] = {}
    for pod in store.list("v1", "Pod", field_selector=f"spec.nodeName={node_name}"):
        if is_terminal(pod) or pod["spec"].get("nodeName") != node_name:
            continue
        for name, amount in pod_requests(pod).items():
            used[name] = used.get(name, 0) + amount
    return used


def _ready_nodes(store) -> list[dict]:
    """The stored Nodes (read-only: the placement only reads them), by name. Not copies: a
    scheduling pass runs on every pod event, and a GPU node is a large object."""
    rtype = store.registry.by_kind("v1", "Node")
    return sorted(store.select(rtype, None), key=lambda n: n["metadata"]["name"])


def place(
    pods: Iterable[dict], nodes: list[dict], usage: dict[str, dict[str, int]]
) -> tuple[dict[str, str], dict[str, list[str]] | None]:
    """Place pods one after the other on copies of the usage. Returns (pod name -> node, None) when
    all fit, else (partial placement, per-node reasons for the first pod that did not fit)."""
    usage = {name: dict(used) for name, used in usage.items()}
    placement: dict[str, str] = {}
    for pod in pods:
        requests = pod_requests(pod)
        best = None
        per_node: dict[str, list[str]] = {}
        for node in nodes:
            name = node["metadata"]["name"]
            used = usage.setdefault(name, {})
            reasons = filter_node(pod, node, used, requests)
            if reasons:
                per_node[name] = reasons
                continue
            score = _score(requests, node, used)
            if best is None or score < best[0]:
                best = (score, name)
        if best is None:
            return placement, per_node
        node_name = best[1]
        placement[pod["metadata"]["name"]] = node_name
        for res, amount in requests.items():
            usage[node_name][res] = usage[node_name].get(res, 0) + amount
    return placement, None


def schedule_gang(store, pods: list[dict]) -> dict[str, str] | None:
    """Where every pod of the gang would go (pod name -> node), or None when not all fit at once."""
    nodes = _ready_nodes(store)
    usage = {n["metadata"]["name"]: node_usage(store, n["metadata"]["name"]) for n in nodes}
    placement, failure = place(pods, nodes, usage)
    return None if failure is not None else placement


def bind(store, pod: dict, node_name: str) -> None:
    """Bind as the pods/binding subresource does: spec.nodeName, then PodScheduled=True."""
    meta = pod["metadata"]
    namespace, name = meta.get("namespace"), meta["name"]
    bound = store.patch("v1", "Pod", namespace, name, {"spec": {"nodeName": node_name}})
    tracker(store).observe(bound)
    now = rfc3339(store.clock.now())
    conditions = [
        c
        for c in (bound.get("status") or {}).get("conditions") or []
        if c.get("type") != "PodScheduled"
    ]
    conditions.insert(
        0,
        {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        },
    )
    status: dict = {"conditions": conditions}
    if not (bound.get("status") or {}).get("phase"):
        status["phase"] = "Pending"
    store.patch(
        "v1",
        "Pod",
        namespace,
        name,
        {"status": status},
        subresource="status",
    )
    scheduler_name = (pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER
    events.record(
        store,
        bound,
        "Scheduled",
        f"Successfully assigned {namespace}/{name} to {node_name}",
        component=scheduler_name,
    )


def mark_unschedulable(
    store, pod: dict, message: str, *, component: str = DEFAULT_SCHEDULER
) -> None:
    """PodScheduled=False/Unschedulable with the message, and a FailedScheduling event when the
    message is new for this pod."""
    meta = pod["metadata"]
    conditions = (pod.get("status") or {}).get("conditions") or []
    current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    if current and current.get("status") == "False" and current.get("message") == message:
        return
    now = rfc3339(store.clock.now())
    others = [c for c in conditions if c.get("type") != "PodScheduled"]
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    status: dict = {"conditions": [condition, *others]}
    if not (pod.get("status") or {}).get("phase"):
        status["phase"] = "Pending"
    try:
        updated = store.patch(
            "v1",
            "Pod",
            meta.get("namespace"),
            meta["name"],
            {"status": status},
            subresource="status",
        )
    except ApiError as exc:
        if exc.code == 404:
            return
        raise
    events.record(store, updated, "FailedScheduling", message, type="Warning", component=component)


# ----------------------------------------------------------------------------------------------
# The default scheduler loop


def _wants_default_scheduler(pod: dict) -> bool:
    name = (pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER
    return name == DEFAULT_SCHEDULER


def _is_pending_unbound(pod: dict) -> bool:
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not is_terminal(pod)
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and not ((pod.get("spec") or {}).get("schedulingGates"))
    )


class DefaultScheduler:
    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.tracker = tracker(ctx.store)
        self.queue: dict[tuple[str, str], dict] = {}
        self.wake = asyncio.Event()

    def _key(self, pod: dict) -> tuple[str, str]:
        return (pod["metadata"].get("namespace") or "", pod["metadata"]["name"])

    def on_pod(self, event_type: str, pod: dict) -> None:
        previous = self.tracker.pods.get(self._key(pod))
        self.tracker.observe(pod, deleted=event_type == "DELETED")
        freed = previous is not None and self._key(pod) not in self.tracker.pods
        key = self._key(pod)
        if event_type != "DELETED" and _wants_default_scheduler(pod) and _is_pending_unbound(pod):
            self.queue[key] = pod
            self.wake.set()
        else:
            self.queue.pop(key, None)
        if freed and self.queue:
            self.wake.set()

    def _order(self) -> list[dict]:
        return sorted(
            self.queue.values(),
            key=lambda p: (
                -int((p.get("spec") or {}).get("priority") or 0),
                p["metadata"].get("creationTimestamp") or "",
                p["metadata"]["name"],
            ),
        )

    def schedule_once(self) -> None:
        nodes = _ready_nodes(self.store)
        usage = {
            n["metadata"]["name"]: self.tracker.node_usage(n["metadata"]["name"]) for n in nodes
        }
        for pod in self._order():
            key = self._key(pod)
            current = self.store.try_get("v1", "Pod", key[0], key[1])
            if (
                current is None
                or not _is_pending_unbound(current)
                or not _wants_default_scheduler(current)
            ):
                self.queue.pop(key, None)
                continue
            problem = storage.claim_problem(self.store, current)
            if problem is not None:
                count = len(nodes)
                mark_unschedulable(
                    self.store,
                    current,
                    f"0/{count} nodes are available: {problem}. preemption: 0/{count} nodes are "
                    f"available: {count} Preemption is not helpful for scheduling.",
                )
                continue
            claims: list[dict] = []
            dra_plans: dict[str, list] = {}
            candidates = nodes
            dra_failures: dict[str, list[str]] = {}
            if dra.has_claims(current):
                # DRA: only nodes where every claim gets devices its CEL selectors accept
                claims, problem = dra.pod_claims(self.store, current)
                if problem is not None:
                    count = len(nodes)
                    mark_unschedulable(
                        self.store, current, f"0/{count} nodes are available: {problem}."
                    )
                    continue
                candidates = []
                for node in nodes:
                    name = node["metadata"]["name"]
                    plan = dra.plan_for_node(self.store, claims, name)
                    if plan is None:
                        dra_failures[name] = [dra.CANNOT_ALLOCATE]
                    else:
                        dra_plans[name] = plan
                        candidates.append(node)
            placement, failure = place([current], candidates, usage)
            if failure is not None and dra_failures:
                failure = {**failure, **dra_failures}
            if failure is None:
                node_name = placement[key[1]]
                try:
                    if claims:
                        dra.allocate(self.store, dra_plans[node_name], current, node_name)
                        dra.reserve(self.store, claims, current)
                    bind(self.store, current, node_name)
                except ApiError as exc:
                    if exc.code in (404, 409):
                        continue
                    raise
                self.queue.pop(key, None)
                usage[node_name] = self.tracker.node_usage(node_name)
            else:
                policy = (current.get("spec") or {}).get("preemptionPolicy")
                message = failure_message(len(nodes), failure, preemption_policy=policy)
                mark_unschedulable(self.store, current, message)

    async def run(self) -> None:
        self.tracker.fed = True
        self.ctx.spawn(follow(self.store, "v1", "Node", self.on_node), "scheduler-nodes")
        self.ctx.spawn(self._loop(), "scheduler-loop")
        await follow(self.store, "v1", "Pod", self.on_pod)

    def on_node(self, _event_type: str, _node: dict) -> None:
        if self.queue:
            self.wake.set()

    async def _loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            # Let a burst of pod events land before one pass over the queue.
            await asyncio.sleep(0.01)
            try:
                self.schedule_once()
            except Exception:  # one bad pod must not stop scheduling
                traceback.print_exc()
                self.wake.set()
                await asyncio.sleep(1.0)


SYSTEM_PRIORITY_CLASSES = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}


def priority_admission(store):
    """The Priority admission plugin: a new pod's spec.priority (and preemptionPolicy) from its
    priorityClassName, the global default class, or 0; an unknown class is refused (403)."""

    def hook(operation: str, pod: dict, old: dict | None) -> None:
        if operation != "CREATE":
            return
        spec = pod.setdefault("spec", {})
        name = spec.get("priorityClassName")
        policy = "PreemptLowerPriority"
        if name in SYSTEM_PRIORITY_CLASSES:
            value = SYSTEM_PRIORITY_CLASSES[name]
        elif name:
            found = store.try_get("scheduling.k8s.io/v1", "PriorityClass", None, name)
            if found is None:
                pod_name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
                raise ApiError(
                    403,
                    "Forbidden",
                    f'pods "{pod_name}" is forbidden: no PriorityClass with name {name} was found',
                    details={"name": pod_name, "kind": "pods"},
                )
            value = int(found.get("value") or 0)
            policy = found.get("preemptionPolicy") or policy
        else:
            defaults = [
                c
                for c in store.list("scheduling.k8s.io/v1", "PriorityClass")
                if c.get("globalDefault")
            ]
            value = int(defaults[0].get("value") or 0) if defaults else 0
            if defaults:
                spec["priorityClassName"] = defaults[0]["metadata"]["name"]
                policy = defaults[0].get("preemptionPolicy") or policy
        spec["priority"] = value
        spec.setdefault("preemptionPolicy", policy)

    return hook


def start(ctx) -> None:
    ctx.store.add_admission_hook("v1", "Pod", priority_admission(ctx.store))
    ctx.spawn(DefaultScheduler(ctx).run(), "scheduler")
