"""PodDisruptionBudgets, as the disruption controller and the eviction API handle them:
`status` (expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed, conditions) kept
current, and `eviction_blocked(pod)` refusing an eviction that would break a budget with
upstream's 429 "Cannot evict pod as it would violate the pod's disruption budget."."""

from __future__ import annotations

import asyncio
import contextlib
import math

from kubesim.api import errors
from kubesim.api.selectors import labels_match, to_requirements
from kubesim.controllers.scheduler import is_terminal


def _ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _scaled(value, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        fraction = int(value[:-1]) * total / 100
        return math.ceil(fraction) if round_up else math.floor(fraction)
    return int(value)


def budget_status(store, pdb: dict) -> dict:
    spec = pdb.get("spec") or {}
    namespace = pdb["metadata"].get("namespace")
    selector = spec.get("selector")
    reqs = to_requirements(selector) if selector else None
    pods = [
        p
        for p in store.list("v1", "Pod", namespace)
        if reqs is not None
        and labels_match(reqs, p["metadata"].get("labels"))
        and not is_terminal(p)
        and not p["metadata"].get("deletionTimestamp")
    ]
    expected = len(pods)
    healthy = sum(1 for p in pods if _ready(p))
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, round_up=True)
    elif spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, round_up=True))
    else:
        desired = expected
    allowed = max(0, healthy - desired)
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "expectedPods": expected,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "disruptionsAllowed": allowed,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "",
                "observedGeneration": pdb["metadata"].get("generation", 1),
                "lastTransitionTime": store.now(),
            }
        ],
    }


def eviction_blocked(store, pod: dict) -> errors.ApiError | None:
    """The 429 an eviction of this pod gets, or None when every budget allows it."""
    if not _ready(pod) or is_terminal(pod):
        return None  # unhealthy or finished pods may always be evicted (IfHealthyBudget)
    namespace = pod["metadata"].get("namespace")
    for pdb in store.list("policy/v1", "PodDisruptionBudget", namespace):
        selector = (pdb.get("spec") or {}).get("selector")
        if not selector or not labels_match(
            to_requirements(selector), pod["metadata"].get("labels")
        ):
            continue
        status = budget_status(store, pdb)
        if status["disruptionsAllowed"] <= 0:
            name = pdb["metadata"]["name"]
            return errors.ApiError(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                details={
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {name} needs "
                            f"{status['desiredHealthy']} healthy pods and has "
                            f"{status['currentHealthy']} currently",
                        }
                    ]
                },
            )
    return None


_COUNTS = ("expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed")


class DisruptionController:
    def __init__(self, ctx):
        self.store = ctx.store
        self.wake = asyncio.Event()

    def written(self, event_type: str, rtype, obj: dict, old: dict | None) -> None:
        if (rtype.group, rtype.kind) in (("", "Pod"), ("policy", "PodDisruptionBudget")):
            if rtype.kind == "Pod" and not self.store.list(
                "policy/v1", "PodDisruptionBudget", obj["metadata"].get("namespace")
            ):
                return
            self.wake.set()

    async def loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(0.1)
            for pdb in self.store.list("policy/v1", "PodDisruptionBudget", None):
                status = budget_status(self.store, pdb)
                current = pdb.get("status") or {}
                same = all(
                    current.get(k) == status[k]
                    for k in (
                        "expectedPods",
                        "currentHealthy",
                        "desiredHealthy",
                        "disruptionsAllowed",
                    )
                )
                if same and current.get("observedGeneration") == status["observedGeneration"]:
                    continue
                with contextlib.suppress(errors.ApiError):
                    self.store.patch(
                        "policy/v1",
                        "PodDisruptionBudget",
                        pdb["metadata"]["namespace"],
                        pdb["metadata"]["name"],
                        {"status": status},
                        subresource="status",
                    )
            await asyncio.sleep(0)


def install(ctx) -> DisruptionController:
    controller = DisruptionController(ctx)
    ctx.store.add_write_listener(controller.written)
    ctx.spawn(controller.loop(), "disruption")
    return controller
