"""KAI's queue arithmetic (the proportion plugin), pure: deserved quota, limits, over-quota
weights, the hierarchical fair share, the capacity checks (OverLimit, NonPreemptibleOverQuota),
the queue order of the allocate action and the reclaim strategies.

Amounts are integers in the scheduler's units: cpu in millicores, memory in bytes, gpu in
thousandths of a device (a 0.5 fraction is 500). An unlimited quota or limit (-1 in the Queue)
is None. A Queue's spec writes cpu in millicores, memory in MB (10^6 bytes) and gpu in devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

RESOURCES = ("cpu", "memory", "gpu")
# The whole unit the over-quota division hands out per round ("round numbers" upstream).
_UNIT = {"cpu": 1, "memory": 1, "gpu": 1000}
# Queue spec value -> scheduler units.
_SPEC_SCALE = {"cpu": 1, "memory": 1_000_000, "gpu": 1000}
DEFAULT_QUEUE_PRIORITY = 100


def zero() -> dict[str, int]:
    return {r: 0 for r in RESOURCES}


def add(total: dict[str, int], more: dict[str, int], sign: int = 1) -> None:
    for r in RESOURCES:
        total[r] = total.get(r, 0) + sign * more.get(r, 0)


def spec_amount(value, resource: str) -> int | None:
    """A Queue spec number in scheduler units; None for -1 (unlimited). Unset counts as 0."""
    if value is None:
        return 0
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    if number == -1:
        return None
    return round(number * _SPEC_SCALE[resource])


@dataclass
class QueueShare:
    name: str
    parent: str = ""
    display_name: str = ""
    priority: int = DEFAULT_QUEUE_PRIORITY
    created: str = ""
    deserved: dict[str, int | None] = field(default_factory=zero)
    limit: dict[str, int | None] = field(default_factory=zero)
    weight: dict[str, float] = field(default_factory=lambda: {r: 0.0 for r in RESOURCES})
    allocated: dict[str, int] = field(default_factory=zero)
    allocated_np: dict[str, int] = field(default_factory=zero)  # non-preemptible
    request: dict[str, int] = field(default_factory=zero)  # allocated + pending
    fair: dict[str, int] = field(default_factory=zero)
    children: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """How KAI names the queue in messages (displayName when set)."""
        return self.display_name or self.name

    @classmethod
    def from_queue(cls, queue: dict) -> QueueShare:
        meta = queue.get("metadata") or {}
        spec = queue.get("spec") or {}
        resources = spec.get("resources") or {}
        share = cls(
            name=meta.get("name", ""),
            parent=spec.get("parentQueue") or "",
            display_name=spec.get("displayName") or "",
            priority=int(spec["priority"]) if spec.get("priority") is not None else 100,
            created=meta.get("creationTimestamp") or "",
        )
        for r in RESOURCES:
            entry = resources.get(r) or {}
            share.deserved[r] = spec_amount(entry.get("quota"), r)
            share.limit[r] = spec_amount(entry.get("limit"), r)
            try:
                share.weight[r] = float(entry.get("overQuotaWeight") or 0)
            except (TypeError, ValueError):
                share.weight[r] = 0.0
        return share

    def requestable(self, r: str) -> int:
        limit = self.limit[r]
        return self.request[r] if limit is None else min(limit, self.request[r])

    def allocatable(self, r: str) -> float:
        """What the queue may hold before it counts as over its share (max(deserved, fair share),
        capped by the limit)."""
        deserved, limit = self.deserved[r], self.limit[r]
        if deserved is None:
            return math.inf if limit is None else limit
        amount = max(deserved, self.fair[r])
        return amount if limit is None else min(limit, amount)

    def deserved_or_inf(self, r: str) -> float:
        deserved = self.deserved[r]
        return math.inf if deserved is None else deserved

    def over_fair_share(self) -> bool:
        return any(self.fair[r] < self.allocated[r] for r in RESOURCES)

    def within_deserved(self, extra: dict[str, int]) -> bool:
        return all(
            self.allocated[r] + extra.get(r, 0) <= self.deserved_or_inf(r) for r in RESOURCES
        )

    def saturation(self, extra: dict[str, int]) -> float:
        """The dominant share of (allocated + extra) over the fair share."""
        worst = 0.0
        for r in RESOURCES:
            used = self.allocated[r] + extra.get(r, 0)
            if used <= 0:
                continue
            fair = self.fair[r]
            worst = max(worst, math.inf if fair <= 0 else used / fair)
        return worst


# ----------------------------------------------------------------------------------------------
# Fair share


def chain(queues: dict[str, QueueShare], name: str) -> list[QueueShare]:
    """The queue and its ancestors, leaf first."""
    out: list[QueueShare] = []
    seen: set[str] = set()
    current = queues.get(name)
    while current is not None and current.name not in seen:
        out.append(current)
        seen.add(current.name)
        current = queues.get(current.parent) if current.parent else None
    return out


def link_children(queues: dict[str, QueueShare]) -> None:
    for queue in queues.values():
        queue.children = []
    for queue in sorted(queues.values(), key=lambda q: q.name):
        if queue.parent and queue.parent in queues and queue.parent != queue.name:
            queues[queue.parent].children.append(queue.name)


def set_fair_shares(queues: dict[str, QueueShare], total: dict[str, int]) -> None:
    """Top-down: each level divides what its parent got (the cluster for the top queues): every
    queue first gets min(deserved, requested), then the rest goes by priority and weight."""
    for queue in queues.values():
        queue.fair = zero()
    tops = [q for q in queues.values() if not q.parent or q.parent not in queues]
    _divide_level(queues, tops, dict(total), set())


def _divide_level(queues, level: list[QueueShare], amounts: dict[str, int], seen: set) -> None:
    level = [q for q in level if q.name not in seen]
    if not level:
        return
    seen.update(q.name for q in level)
    for r in RESOURCES:
        _divide(max(0, amounts.get(r, 0)), level, r)
    for queue in sorted(level, key=lambda q: q.name):
        children = [queues[c] for c in queue.children if c in queues]
        if children:
            _divide_level(queues, children, queue.fair, seen)


def _satisfied(q: QueueShare, r: str) -> bool:
    if q.request[r] <= q.fair[r]:
        return True
    limit = q.limit[r]
    return limit is not None and limit <= q.fair[r]


def _remaining_requested(q: QueueShare, r: str) -> int:
    return max(0, q.requestable(r) - q.fair[r])


def _divide(total: int, level: list[QueueShare], r: str) -> None:
    remaining = total
    for q in sorted(level, key=lambda q: q.name):
        deserved = q.deserved[r]
        amount = min(total if deserved is None else deserved, q.requestable(r))
        amount = max(0, amount)
        q.fair[r] += amount
        remaining -= amount
    if remaining <= 0:
        return
    priorities = sorted({q.priority for q in level}, reverse=True)
    leftovers: dict[int, dict[str, tuple[QueueShare, float]]] = {}
    for priority in priorities:
        bucket = [q for q in level if q.priority == priority]
        leftovers[priority] = {}
        remaining = _up_to_fair_share(remaining, bucket, r, leftovers[priority])
    for priority in priorities:
        if remaining <= 0:
            break
        remaining = _give_leftovers(remaining, leftovers[priority], r)


def _up_to_fair_share(total: int, bucket: list[QueueShare], r: str, leftover: dict) -> int:
    unit = _UNIT[r]
    while total > 0:
        hungry = [q for q in bucket if _remaining_requested(q, r) > 0]
        weights = sum(q.weight[r] for q in hungry)
        if weights <= 0:
            break
        to_give = total
        another_round = False
        for q in sorted(hungry, key=lambda q: q.name):
            if total <= 0:
                break
            if _satisfied(q, r) or q.weight[r] <= 0:
                continue
            requested = _remaining_requested(q, r)
            share = to_give * q.weight[r] / weights
            if requested <= share:
                give = requested
                leftover.pop(q.name, None)
            else:
                give = int(share // unit) * unit
                if share - give > 0:
                    leftover[q.name] = (q, share - give)
            give = min(give, total)
            if give <= 0:
                continue
            q.fair[r] += give
            total -= give
            another_round = another_round or requested < share
        if not another_round:
            break
    return total


def _give_leftovers(total: int, leftover: dict, r: str) -> int:
    """What rounding down left: one unit at a time to the queues that lost the most to it."""
    order = sorted(leftover.values(), key=lambda item: (-item[1], item[0].created, item[0].name))
    for queue, _amount in order:
        if total <= 0:
            break
        give = min(_UNIT[r], total)
        queue.fair[r] += give
        total -= give
    return total


# ----------------------------------------------------------------------------------------------
# Capacity checks and messages


def humanize(value: float | None, divisor: float) -> str:
    """KAI's HumanizeResource: up to 3 decimals, trailing zeros dropped."""
    if value is None:
        return "Unlimited"
    text = f"{value / divisor:.3f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


_DIVISOR = {"cpu": 1000, "memory": 1_000_000_000, "gpu": 1000}


def over_limit(queues: dict[str, QueueShare], leaf: str, requested: dict[str, int]):
    """(queue, resource) whose limit the request would pass, walking up from the leaf."""
    for queue in chain(queues, leaf):
        for r in RESOURCES:
            limit = queue.limit[r]
            if limit is None or requested.get(r, 0) <= 0:
                continue
            if queue.allocated[r] + requested[r] > limit:
                return queue, r
    return None


def over_limit_message(queue: QueueShare, r: str, requested: dict[str, int]) -> str:
    d = _DIVISOR[r]
    limit, used, asked = queue.limit[r], queue.allocated[r], requested.get(r, 0)
    if r == "gpu":
        kind = "GPUs"
        details = (
            f"Limit is {humanize(limit, d)} GPUs, currently {humanize(used, d)} GPUs allocated "
            f"and workload requested {humanize(asked, d)} GPUs"
        )
    elif r == "cpu":
        kind = "CPU cores"
        details = (
            f"Limit is {humanize(limit, d)} cores, currently {humanize(used, d)} cores allocated "
            f"and workload requested {humanize(asked, d)} cores"
        )
    else:
        kind = "memory"
        details = (
            f"Limit is {humanize(limit, d)} GB, currently {humanize(used, d)} GB allocated "
            f"and workload requested {humanize(asked, d)} GB"
        )
    return f"{queue.label} quota has reached the allowable limit of {kind}. {details}"


def non_preemptible_over_quota(queues: dict[str, QueueShare], leaf: str, requested: dict[str, int]):
    for queue in chain(queues, leaf):
        for r in RESOURCES:
            deserved = queue.deserved[r]
            if deserved is None or requested.get(r, 0) <= 0:
                continue
            if queue.allocated_np[r] + requested[r] > deserved:
                return queue, r
    return None


def non_preemptible_message(queue: QueueShare, r: str, requested: dict[str, int]) -> str:
    d = _DIVISOR[r]
    deserved, used, asked = queue.deserved[r], queue.allocated_np[r], requested.get(r, 0)
    if r == "gpu":
        details = (
            f"Workload requested {humanize(asked, d)} GPUs, but {queue.label} quota is "
            f"{humanize(deserved, d)} GPUs, while {humanize(used, d)} GPUs are already allocated "
            "for non-preemptible pods."
        )
    elif r == "cpu":
        details = (
            f"Workload requested {humanize(asked, d)} CPU cores, but {queue.label} quota is "
            f"{humanize(deserved, d)} cores, while {humanize(used, d)} cores are already "
            "allocated for non-preemptible pods."
        )
    else:
        details = (
            f"Workload requested {humanize(asked, d)} GB memory, but {queue.label} quota is "
            f"{humanize(deserved, d)} GB, while {humanize(used, d)} GB are already allocated for "
            "non-preemptible pods."
        )
    return (
        f"Non-preemptible workload is over quota. {details} "
        "Use a preemptible workload to go over quota."
    )


def queue_order_key(queue: QueueShare, job_request: dict[str, int]) -> tuple:
    """The allocate action's queue order: queues under their fair share first, then those that
    stay within their deserved quota with this job, higher queue priority, no allocation without
    a share, the smaller dominant share, the older queue."""
    zero_share_violation = any(
        queue.allocatable(r) == 0 and queue.allocated[r] + job_request.get(r, 0) > 0
        for r in RESOURCES
    )
    return (
        queue.over_fair_share(),
        not queue.within_deserved(job_request),
        -queue.priority,
        zero_share_violation,
        queue.saturation(job_request),
        queue.created,
        queue.name,
    )


def can_reclaim(queue: QueueShare, requested: dict[str, int], preemptible: bool) -> bool:
    """A job may take resources back from other queues only while its queue stays within its
    fair share with it (and within its deserved quota for non-preemptible work)."""
    if any(queue.allocated[r] + requested.get(r, 0) > queue.fair[r] for r in RESOURCES):
        return False
    if preemptible:
        return True
    return all(
        queue.allocated_np[r] + requested.get(r, 0) <= queue.deserved_or_inf(r) for r in RESOURCES
    )


def leveled(queues: dict[str, QueueShare], reclaimer: str, reclaimee: str):
    """The two queues' ancestors that are siblings (where the hierarchies part)."""
    left = list(reversed(chain(queues, reclaimer)))
    right = list(reversed(chain(queues, reclaimee)))
    pair = (None, None)
    for a, b in zip(left, right, strict=False):
        pair = (a, b)
        if a.name != b.name:
            break
    return pair


def may_take_from(
    reclaimer: QueueShare,
    reclaimer_request: dict[str, int],
    reclaimee: QueueShare,
    remaining: dict[str, int],
    victim: dict[str, int],
) -> bool:
    """Whether one more victim job may be taken from the reclaimee's queue, which still holds
    `remaining`: either it is over its fair share (MaintainFairShare) or the reclaimer is within
    its deserved quota and the reclaimee over its own (GuaranteeDeservedQuota). Never below the
    reclaimee's deserved quota (in-quota resources are not reclaimed)."""
    involved = [r for r in RESOURCES if victim.get(r, 0) > 0]
    over_share = any(remaining[r] > reclaimee.allocatable(r) for r in involved)
    guarantee = all(
        reclaimer.allocated[r] + reclaimer_request.get(r, 0) <= reclaimer.deserved_or_inf(r)
        for r in RESOURCES
    ) and any(remaining[r] > reclaimee.deserved_or_inf(r) for r in involved)
    if not (over_share or guarantee):
        return False
    for r in involved:
        deserved = reclaimee.deserved[r]
        if deserved is not None and remaining[r] > deserved > remaining[r] - victim[r]:
            return False
    return True
