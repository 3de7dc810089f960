"""Kueue's admission arithmetic over plain data: quota, flavor assignment, preemption, queue order.

This module has no I/O. The controller (kueue.py) turns API objects into these structures, runs
`KueueEngine.schedule()` and writes the decisions back. Behaviour follows Kueue v0.19's classical
(non fair-sharing) scheduler:

- quota per (flavor, resource) with nominalQuota, borrowingLimit and lendingLimit; a ClusterQueue
  in a cohort may use its own unlent quota plus what the cohort has left, capped by borrowingLimit;
- flavors are tried in the ClusterQueue's order per resource group; the first flavor that fits wins
  (borrowing allowed), otherwise the first flavor where preemption could help;
- a flavor whose nodeLabels contradict the pod set's nodeSelector or required node affinity (cut
  down to that flavor's label keys, as flavorSelector does) is skipped;
- preemption as the classical preemptor: candidates of the same ClusterQueue (withinClusterQueue)
  and of cohort ClusterQueues above nominal (reclaimWithinCohort), the latter as hierarchical
  reclaim when the request fits the preemptor's nominal quota, else by priority under
  borrowWithinCohort's maxPriorityThreshold; the minimal set is found greedily in Kueue's
  candidate order, with and without borrowing, then victims not needed are put back;
- queue order is priority (high first) then queue-order timestamp (old first); every cycle takes one
  head per ClusterQueue, orders heads "not borrowing" first, then priority, then timestamp.
  BestEffortFIFO moves on past a head that does not fit; StrictFIFO stops at it.

Cohorts are one level deep (a Cohort object's own resourceGroups add to the pool; parentName is not
followed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kubesim.controllers.kueue.quantity import format_milli
from kubesim.controllers.scheduler import matches_node_affinity

FlavorResource = tuple[str, str]

NO_FIT, PREEMPT, FIT = 0, 1, 2

IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"
HUMAN_PREEMPTION_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}

# How a preemption candidate may be taken (Kueue's classical preemptionVariant).
WITHIN_CQ = "WithinCQ"
HIERARCHICAL_RECLAIM = "HierarchicalReclaim"  # the preemptor reclaims its own nominal quota
RECLAIM_WITHOUT_BORROWING = "ReclaimWithoutBorrowing"  # only if the preemptor ends up not borrowing
RECLAIM_WHILE_BORROWING = "ReclaimWhileBorrowing"  # borrowWithinCohort allows it


@dataclass
class ResourceQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def guaranteed(self) -> int:
        """The part of nominal quota that is never lent to the cohort."""
        if self.lending_limit is None:
            return 0
        return max(0, self.nominal - self.lending_limit)


@dataclass
class Flavor:
    name: str
    node_labels: dict = field(default_factory=dict)
    node_taints: list = field(default_factory=list)
    tolerations: list = field(default_factory=list)


@dataclass
class ResourceGroup:
    covered: list[str]
    flavors: list[str]


@dataclass
class ClusterQueue:
    name: str
    cohort: str | None = None
    groups: list[ResourceGroup] = field(default_factory=list)
    quotas: dict[FlavorResource, ResourceQuota] = field(default_factory=dict)
    strategy: str = "BestEffortFIFO"
    within_cluster_queue: str = "Never"
    reclaim_within_cohort: str = "Never"
    borrow_within_cohort: str = "Never"  # preemption.borrowWithinCohort.policy
    borrow_max_priority: int | None = None  # preemption.borrowWithinCohort.maxPriorityThreshold
    namespace_selector: dict | None = None
    stop_policy: str = "None"
    missing_flavors: list[str] = field(default_factory=list)
    terminating: bool = False
    usage: dict[FlavorResource, int] = field(default_factory=dict)

    def group_of(self, resource: str) -> ResourceGroup | None:
        for group in self.groups:
            if resource in group.covered:
                return group
        return None

    @property
    def active(self) -> bool:
        return not self.missing_flavors and self.stop_policy == "None" and not self.terminating

    def borrowing_in(self, frs) -> bool:
        return any(self.usage.get(fr, 0) > self.quota(fr).nominal for fr in frs)

    def quota(self, fr: FlavorResource) -> ResourceQuota:
        return self.quotas.get(fr) or ResourceQuota(0)


@dataclass
class PodSet:
    name: str
    count: int
    requests: dict[str, int]  # per pod, milli-units
    node_selector: dict = field(default_factory=dict)
    tolerations: list = field(default_factory=list)
    # spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms
    node_affinity_terms: list | None = None

    def total(self) -> dict[str, int]:
        return {r: v * self.count for r, v in self.requests.items() if v > 0}


@dataclass
class Workload:
    namespace: str
    name: str
    uid: str
    cluster_queue: str
    local_queue: str
    priority: int
    timestamp: float  # queue-order time (creation, or eviction for a PodsReady timeout)
    podsets: list[PodSet]
    job_uid: str = ""
    # Reservation (quota held): usage per flavor-resource and the flavors per pod set.
    usage: dict[FlavorResource, int] | None = None
    reserved_at: float = 0.0
    evicted: bool = False
    eligible_at: float = 0.0  # requeueState.requeueAt (backoff); 0 = now
    sequence: int = 0  # creation order, to break ties within one timestamp second

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def reserved(self) -> bool:
        return self.usage is not None


@dataclass
class PodSetAssignment:
    name: str
    count: int
    flavors: dict[str, str]
    resource_usage: dict[str, int]
    mode: int
    reasons: list[str]


@dataclass
class Assignment:
    podsets: list[PodSetAssignment]
    usage: dict[FlavorResource, int]
    borrows: bool

    @property
    def mode(self) -> int:
        return min((ps.mode for ps in self.podsets), default=NO_FIT)

    def message(self) -> str:
        parts = []
        for ps in self.podsets:
            if ps.mode == FIT:
                continue
            parts.append(
                f"couldn't assign flavors to pod set {ps.name}: {', '.join(sorted(ps.reasons))}"
            )
        return "; ".join(parts)


@dataclass
class Target:
    workload: Workload
    reason: str
    variant: str = WITHIN_CQ


@dataclass
class Decision:
    """What the scheduler decided for one workload in a cycle."""

    workload: Workload
    kind: str  # "admit" | "pending" | "preempting"
    message: str = ""
    reason: str = "Pending"
    assignment: Assignment | None = None
    targets: list[Target] = field(default_factory=list)


class KueueEngine:
    def __init__(self) -> None:
        self.cluster_queues: dict[str, ClusterQueue] = {}
        self.flavors: dict[str, Flavor] = {}
        self.cohort_quotas: dict[str, dict[FlavorResource, int]] = {}
        self.workloads: dict[tuple[str, str], Workload] = {}
        self._cohort_members: dict[str, list[str]] = {}
        # Version per cohort (or lone ClusterQueue) of its quota state, to skip re-evaluating a
        # workload that failed against exactly the same state (Kueue's inadmissible list).
        self._versions: dict[str, int] = {}
        self._failed_at: dict[tuple[str, str], tuple[int, int, Decision]] = {}
        self._config_version = 0
        # A cycle that decided nothing, with nothing changed since and no backoff expired,
        # would decide nothing again: schedule() then returns at once (a busy cluster runs a
        # cycle on every write, and each one walks and sorts every pending workload).
        self._changed = True
        self._next_eligible = math.inf

    # ---- configuration -------------------------------------------------------------------
    def set_config(
        self,
        cluster_queues: list[ClusterQueue],
        flavors: list[Flavor],
        cohort_quotas: dict[str, dict[FlavorResource, int]] | None = None,
    ) -> None:
        old_usage = {name: cq.usage for name, cq in self.cluster_queues.items()}
        self.cluster_queues = {cq.name: cq for cq in cluster_queues}
        for cq in self.cluster_queues.values():
            cq.usage = {}
        self.flavors = {f.name: f for f in flavors}
        self.cohort_quotas = cohort_quotas or {}
        self._cohort_members = {}
        for cq in self.cluster_queues.values():
            if cq.cohort:
                self._cohort_members.setdefault(cq.cohort, []).append(cq.name)
        # Recompute usage from the reserved workloads (the ClusterQueue may be new or renamed).
        for wl in self.workloads.values():
            if wl.usage is not None and wl.cluster_queue in self.cluster_queues:
                self._add_usage(self.cluster_queues[wl.cluster_queue], wl.usage)
        del old_usage
        self._config_version += 1
        self._failed_at.clear()
        self._changed = True

    def _scope(self, cq: ClusterQueue) -> str:
        return f"cohort/{cq.cohort}" if cq.cohort else f"cq/{cq.name}"

    def _bump(self, cq_name: str) -> None:
        cq = self.cluster_queues.get(cq_name)
        if cq is not None:
            scope = self._scope(cq)
            self._versions[scope] = self._versions.get(scope, 0) + 1

    def _version(self, cq: ClusterQueue) -> tuple[int, int]:
        return (self._config_version, self._versions.get(self._scope(cq), 0))

    # ---- workloads -----------------------------------------------------------------------
    def upsert(self, wl: Workload) -> None:
        """Add or replace a workload; its usage (if reserved) is charged to its ClusterQueue."""
        old = self.workloads.get(wl.key)
        if (
            old is not None
            and old.cluster_queue == wl.cluster_queue
            and old.usage == wl.usage
            and old.priority == wl.priority
            and old.eligible_at == wl.eligible_at
            and old.podsets == wl.podsets
        ):
            # Nothing that scheduling depends on changed: keep the quota state and its version.
            wl.reserved_at = wl.reserved_at or old.reserved_at
            if wl != old:
                self._changed = True
            self.workloads[wl.key] = wl
            return
        self.remove(wl.key)
        self.workloads[wl.key] = wl
        self._changed = True
        if wl.usage is not None and wl.cluster_queue in self.cluster_queues:
            self._add_usage(self.cluster_queues[wl.cluster_queue], wl.usage)
            self._bump(wl.cluster_queue)

    def remove(self, key: tuple[str, str]) -> Workload | None:
        wl = self.workloads.pop(key, None)
        self._failed_at.pop(key, None)
        if wl is not None:
            self._changed = True
        if wl is not None and wl.usage is not None and wl.cluster_queue in self.cluster_queues:
            self._add_usage(self.cluster_queues[wl.cluster_queue], wl.usage, sign=-1)
            self._bump(wl.cluster_queue)
        return wl

    def reserve(self, wl: Workload, assignment: Assignment, now: float) -> None:
        wl.usage = dict(assignment.usage)
        wl.reserved_at = now
        self._changed = True
        wl.evicted = False
        self._failed_at.pop(wl.key, None)
        self._add_usage(self.cluster_queues[wl.cluster_queue], wl.usage)
        self._bump(wl.cluster_queue)

    def release(self, key: tuple[str, str]) -> None:
        wl = self.workloads.get(key)
        if wl is None or wl.usage is None:
            return
        if wl.cluster_queue in self.cluster_queues:
            self._add_usage(self.cluster_queues[wl.cluster_queue], wl.usage, sign=-1)
            self._bump(wl.cluster_queue)
        wl.usage = None
        self._changed = True

    @staticmethod
    def _add_usage(cq: ClusterQueue, usage: dict[FlavorResource, int], sign: int = 1) -> None:
        for fr, amount in usage.items():
            cq.usage[fr] = cq.usage.get(fr, 0) + sign * amount

    # ---- quota arithmetic ----------------------------------------------------------------
    def _cohort_quota(self, cohort: str, fr: FlavorResource) -> int:
        total = self.cohort_quotas.get(cohort, {}).get(fr, 0)
        for name in self._cohort_members.get(cohort, ()):
            quota = self.cluster_queues[name].quotas.get(fr)
            if quota is not None:
                total += quota.nominal - quota.guaranteed
        return total

    def _cohort_usage(self, cohort: str, fr: FlavorResource) -> int:
        total = 0
        for name in self._cohort_members.get(cohort, ()):
            cq = self.cluster_queues[name]
            quota = cq.quotas.get(fr)
            guaranteed = quota.guaranteed if quota else 0
            total += max(0, cq.usage.get(fr, 0) - guaranteed)
        return total

    def available(self, cq: ClusterQueue, fr: FlavorResource) -> int:
        """Quota the ClusterQueue can still use for fr now (own unlent quota + cohort leftovers)."""
        quota = cq.quota(fr)
        usage = cq.usage.get(fr, 0)
        if not cq.cohort:
            return max(0, quota.nominal - usage)
        local = max(0, quota.guaranteed - usage)
        from_cohort = self._cohort_quota(cq.cohort, fr) - self._cohort_usage(cq.cohort, fr)
        if quota.borrowing_limit is not None:
            stored = quota.nominal - quota.guaranteed
            used_in_cohort = max(0, usage - quota.guaranteed)
            from_cohort = min(stored - used_in_cohort + quota.borrowing_limit, from_cohort)
        return max(0, local + from_cohort)

    def potential(self, cq: ClusterQueue, fr: FlavorResource) -> int:
        """The most the ClusterQueue could ever hold of fr (everything else idle)."""
        quota = cq.quota(fr)
        if not cq.cohort:
            return quota.nominal
        from_cohort = self._cohort_quota(cq.cohort, fr)
        if quota.borrowing_limit is not None:
            from_cohort = min(from_cohort, quota.nominal - quota.guaranteed + quota.borrowing_limit)
        return quota.guaranteed + from_cohort

    # ---- flavor assignment ---------------------------------------------------------------
    def assign(self, wl: Workload, cq: ClusterQueue) -> Assignment:
        usage: dict[FlavorResource, int] = {}
        podsets: list[PodSetAssignment] = []
        borrows = False
        for ps in wl.podsets:
            requests = ps.total()
            flavors: dict[str, str] = {}
            reasons: list[str] = []
            mode = FIT
            groups: list[tuple[ResourceGroup, list[str]]] = []
            for resource in requests:
                group = cq.group_of(resource)
                if group is None:
                    reasons = [f"resource {resource} unavailable in ClusterQueue"]
                    mode = NO_FIT
                    break
                for g, names in groups:
                    if g is group:
                        names.append(resource)
                        break
                else:
                    groups.append((group, [resource]))
            if mode == FIT:
                for group, names in groups:
                    chosen, chosen_mode, group_reasons, group_borrows = self._pick_flavor(
                        cq, ps, group, names, requests, usage
                    )
                    if chosen is None:
                        mode = NO_FIT
                        reasons.extend(group_reasons)
                        break
                    if chosen_mode == PREEMPT:
                        mode = min(mode, PREEMPT)
                        reasons.extend(group_reasons)
                    borrows = borrows or group_borrows
                    for resource in names:
                        flavors[resource] = chosen
                        fr = (chosen, resource)
                        usage[fr] = usage.get(fr, 0) + requests[resource]
            podsets.append(
                PodSetAssignment(
                    name=ps.name,
                    count=ps.count,
                    flavors=flavors,
                    resource_usage={r: requests[r] for r in flavors},
                    mode=mode,
                    reasons=reasons,
                )
            )
        return Assignment(podsets=podsets, usage=usage, borrows=borrows)

    def _pick_flavor(self, cq, ps, group, names, requests, assumed):
        reasons: list[str] = []
        best, best_mode, best_borrows = None, NO_FIT, False
        for flavor_name in group.flavors:
            flavor = self.flavors.get(flavor_name)
            if flavor is None:
                reasons.append(f"flavor {flavor_name} not found")
                continue
            mismatch = _flavor_mismatch(flavor, ps)
            if mismatch:
                reasons.append(mismatch)
                continue
            mode, borrows = FIT, False
            for resource in names:
                fr = (flavor_name, resource)
                before = assumed.get(fr, 0)
                value = before + requests[resource]
                max_capacity = self.potential(cq, fr)
                if value > max_capacity:
                    reasons.append(
                        f"insufficient quota for {resource} in flavor {flavor_name}, previously "
                        f"considered podsets requests ({format_milli(resource, before)}) + current "
                        f"podset request ({format_milli(resource, requests[resource])}) > maximum "
                        f"capacity ({format_milli(resource, max_capacity)})"
                    )
                    mode = NO_FIT
                    break
                available = self.available(cq, fr)
                if value <= available:
                    if cq.usage.get(fr, 0) + value > cq.quota(fr).nominal:
                        borrows = True
                    continue
                reasons.append(
                    f"insufficient unused quota for {resource} in flavor {flavor_name}, "
                    f"{format_milli(resource, value - available)} more needed"
                )
                if self._preemption_may_help(cq, fr, value):
                    mode = min(mode, PREEMPT)
                else:
                    mode = NO_FIT
                    break
            if mode == FIT:
                return flavor_name, FIT, [], borrows
            if mode == PREEMPT and best_mode < PREEMPT:
                best, best_mode, best_borrows = flavor_name, PREEMPT, borrows
        return best, best_mode, reasons, best_borrows

    @staticmethod
    def _preemption_may_help(cq: ClusterQueue, fr: FlavorResource, value: int) -> bool:
        """fitsResourceQuota's gate before simulating preemption: the request fits the nominal
        quota, or borrowWithinCohort lets the ClusterQueue preempt while borrowing."""
        if cq.quota(fr).nominal >= value:
            if cq.within_cluster_queue != "Never":
                return True
            return bool(cq.cohort) and cq.reclaim_within_cohort != "Never"
        return bool(cq.cohort) and cq.borrow_within_cohort != "Never"

    # ---- preemption ----------------------------------------------------------------------
    def find_targets(self, wl: Workload, cq: ClusterQueue, assignment: Assignment) -> list[Target]:
        """Kueue v0.19's classical preemption (one-level cohorts): candidates from the same
        ClusterQueue, from borrowing ClusterQueues of the cohort where the preemptor reclaims its
        own nominal quota, and from them by priority (borrowWithinCohort), tried with and without
        borrowing in Kueue's order; the minimal set is then trimmed by putting victims back."""
        usage = assignment.usage
        needs = {fr for fr, v in usage.items() if v > self.available(cq, fr)}
        if not needs:
            return []
        same, hierarchy, by_priority = self._preemption_candidates(wl, cq, usage, needs)
        if not (same or hierarchy or by_priority):
            return []
        ordered = []
        for evicted in (True, False):
            for group in (hierarchy, by_priority, same):
                ordered += [t for t in group if t.workload.evicted == evicted]
        forbidden = cq.borrow_within_cohort == "Never"
        under_nominal = all(cq.usage.get(fr, 0) < cq.quota(fr).nominal for fr in needs)
        if not (hierarchy or by_priority) or (forbidden and not under_nominal):
            attempts = [True]
        elif forbidden and not hierarchy:
            attempts = [False, True]
        else:
            attempts = [True, False]
        for allow_borrowing in attempts:
            targets = self._minimal_set(wl, cq, usage, needs, ordered, allow_borrowing)
            if targets:
                return targets
        return []

    def _preemption_candidates(self, wl, cq, usage, needs):
        """(same ClusterQueue, hierarchical reclaim, priority-based) candidates, each sorted by
        Kueue's CandidatesOrdering (lower priority first, then most recently admitted)."""
        same: list[Target] = []
        hierarchy: list[Target] = []
        by_priority: list[Target] = []
        # QuantitiesFitInQuota: the whole request fits the preemptor's own nominal quota.
        advantage = all(cq.usage.get(fr, 0) + v <= cq.quota(fr).nominal for fr, v in usage.items())
        for other in self.workloads.values():
            if other.usage is None or other.key == wl.key:
                continue
            if not any(fr in other.usage for fr in needs):
                continue
            if other.cluster_queue == cq.name:
                if cq.within_cluster_queue != "Never" and _satisfies_policy(
                    cq.within_cluster_queue, wl, other
                ):
                    same.append(Target(other, IN_CLUSTER_QUEUE, WITHIN_CQ))
                continue
            other_cq = self.cluster_queues.get(other.cluster_queue)
            if other_cq is None or not cq.cohort or other_cq.cohort != cq.cohort:
                continue
            if cq.reclaim_within_cohort == "Never" or not other_cq.borrowing_in(needs):
                continue
            if not _satisfies_policy(cq.reclaim_within_cohort, wl, other):
                continue
            if advantage:
                hierarchy.append(Target(other, IN_COHORT_RECLAMATION, HIERARCHICAL_RECLAIM))
            elif cq.borrow_within_cohort == "Never" or _above_borrowing_threshold(
                other.priority, wl.priority, cq.borrow_max_priority
            ):
                by_priority.append(Target(other, IN_COHORT_RECLAMATION, RECLAIM_WITHOUT_BORROWING))
            else:
                by_priority.append(
                    Target(other, IN_COHORT_RECLAIM_WHILE_BORROWING, RECLAIM_WHILE_BORROWING)
                )
        for group in (same, hierarchy, by_priority):
            group.sort(
                key=lambda t: (
                    not t.workload.evicted,
                    t.workload.cluster_queue == cq.name,
                    t.workload.priority,
                    -t.workload.reserved_at,
                    t.workload.uid,
                )
            )
        return same, hierarchy, by_priority

    def _candidate_valid(self, target: Target, cq: ClusterQueue, needs, allow_borrowing) -> bool:
        if target.workload.cluster_queue == cq.name:
            return True
        if allow_borrowing and target.variant == RECLAIM_WITHOUT_BORROWING:
            return False
        # Only while its ClusterQueue is still above nominal (earlier victims may end that).
        return self.cluster_queues[target.workload.cluster_queue].borrowing_in(needs)

    def _minimal_set(self, wl, cq, usage, needs, candidates, allow_borrowing):
        removed: list[Target] = []
        try:
            for target in candidates:
                if not self._candidate_valid(target, cq, needs, allow_borrowing):
                    continue
                victim = target.workload
                self._add_usage(self.cluster_queues[victim.cluster_queue], victim.usage, -1)
                removed.append(target)
                if self._fits(cq, usage, allow_borrowing):
                    # Put back, newest removal first, every victim that is not needed after all.
                    kept = [removed[-1]]
                    for earlier in reversed(removed[:-1]):
                        earlier_cq = self.cluster_queues[earlier.workload.cluster_queue]
                        self._add_usage(earlier_cq, earlier.workload.usage)
                        if self._fits(cq, usage, allow_borrowing):
                            continue
                        self._add_usage(earlier_cq, earlier.workload.usage, -1)
                        kept.append(earlier)
                    # Restore the snapshot: victims still removed are `kept`.
                    for target_kept in kept:
                        kept_cq = self.cluster_queues[target_kept.workload.cluster_queue]
                        self._add_usage(kept_cq, target_kept.workload.usage)
                    removed = []
                    return list(reversed(kept))
            return []
        finally:
            for target in removed:
                target_cq = self.cluster_queues[target.workload.cluster_queue]
                self._add_usage(target_cq, target.workload.usage)

    def _fits(self, cq: ClusterQueue, usage: dict[FlavorResource, int], allow_borrowing: bool):
        for fr, value in usage.items():
            if not allow_borrowing and cq.usage.get(fr, 0) + value > cq.quota(fr).nominal:
                return False
            if value > self.available(cq, fr):
                return False
        return True

    # ---- queues --------------------------------------------------------------------------
    def pending_in(self, cq_name: str) -> list[Workload]:
        """Pending workloads of a ClusterQueue in queue order (what the visibility API lists)."""
        pending = [
            wl for wl in self.workloads.values() if wl.cluster_queue == cq_name and wl.usage is None
        ]
        pending.sort(key=queue_order)
        return pending

    def schedule(self, now: float) -> list[Decision]:
        """One scheduling cycle; the engine applies reservations, the caller persists them."""
        if not self._changed and now < self._next_eligible:
            return []
        decisions = self._cycle(now)
        # Anything decided (even "pending" again) may be followed up by the caller: only an
        # empty cycle is known to repeat itself.
        self._changed = bool(decisions)
        return decisions

    def _assign_memo(self, wl: Workload, cq: ClusterQueue, memo: dict) -> Assignment:
        """assign(), reusing a NoFit answer for pod sets identical to one already found not to
        fit in this ClusterQueue at this quota state (thousands of identical queued jobs)."""
        counts = tuple(ps.count for ps in wl.podsets)
        signature = wl.__dict__.get("_signature")
        if signature is None or signature[0] != counts:
            signature = (counts, repr(wl.podsets))
            wl.__dict__["_signature"] = signature
        key = (cq.name, self._version(cq), signature[1])
        found = memo.get(key)
        if found is not None:
            return found
        assignment = self.assign(wl, cq)
        if assignment.mode == NO_FIT:
            memo[key] = assignment
        return assignment

    def _cycle(self, now: float) -> list[Decision]:
        queues: dict[str, list[Workload]] = {}
        next_eligible = math.inf
        for wl in self.workloads.values():
            if wl.usage is None and wl.cluster_queue in self.cluster_queues:
                if wl.eligible_at <= now:
                    queues.setdefault(wl.cluster_queue, []).append(wl)
                elif wl.eligible_at < next_eligible:
                    next_eligible = wl.eligible_at
        self._next_eligible = next_eligible
        memo: dict = {}
        for name, items in queues.items():
            items.sort(key=queue_order)
            queues[name] = items[::-1]  # pop() from the end = head
        decisions: list[Decision] = []
        blocked: set[str] = set()
        while True:
            heads: list[tuple[ClusterQueue, Workload, Assignment | None, Decision | None]] = []
            for name, items in queues.items():
                if name in blocked:
                    continue
                cq = self.cluster_queues[name]
                while items:
                    wl = items.pop()
                    if not cq.active:
                        decisions.append(
                            Decision(wl, "pending", f"ClusterQueue {name} is inactive")
                        )
                        continue
                    cached = self._failed_at.get(wl.key)
                    if cached and cached[:2] == self._version(cq):
                        # Same quota state as when it last failed: same answer, no new work.
                        if cq.strategy == "StrictFIFO":
                            blocked.add(name)
                            break
                        continue
                    heads.append((cq, wl, None, None))
                    break
            if not heads:
                break
            evaluated = []
            for cq, wl, _, _ in heads:
                assignment = self._assign_memo(wl, cq, memo)
                evaluated.append((cq, wl, assignment))
            evaluated.sort(
                key=lambda e: (e[2].borrows, -e[1].priority, e[1].timestamp, e[1].sequence)
            )
            for cq, wl, _ in evaluated:
                # quota may have moved earlier in this round
                assignment = self._assign_memo(wl, cq, memo)
                if assignment.mode == FIT:
                    self.reserve(wl, assignment, now)
                    decisions.append(Decision(wl, "admit", assignment=assignment))
                    continue
                message = assignment.message()
                decision = Decision(wl, "pending", message, assignment=assignment)
                if assignment.mode == PREEMPT:
                    targets = self.find_targets(wl, cq, assignment)
                    if targets:
                        decision.kind = "preempting"
                        decision.targets = targets
                        decision.message = (
                            f"{message}. Pending the preemption of {len(targets)} workload(s)"
                        )
                        for target in targets:
                            target.workload.evicted = True
                        blocked.add(cq.name)  # wait for the victims before admitting more here
                if decision.kind == "pending":
                    self._failed_at[wl.key] = (*self._version(cq), decision)
                decisions.append(decision)
                if cq.strategy == "StrictFIFO":
                    blocked.add(cq.name)
        return decisions


def _satisfies_policy(policy: str, preemptor: Workload, candidate: Workload) -> bool:
    """Kueue's SatisfiesPreemptionPolicy (withinClusterQueue / reclaimWithinCohort)."""
    if policy == "Any":
        return True
    lower = candidate.priority < preemptor.priority
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        newer_equal = candidate.priority == preemptor.priority and (
            candidate.timestamp,
            candidate.sequence,
        ) > (preemptor.timestamp, preemptor.sequence)
        return lower or newer_equal
    return False


def _above_borrowing_threshold(candidate: int, incoming: int, threshold: int | None) -> bool:
    """A candidate a borrowing preemptor may not take: not of lower priority than the
    preemptor, or above borrowWithinCohort.maxPriorityThreshold."""
    if candidate >= incoming:
        return True
    return threshold is not None and candidate > threshold


def queue_order(wl: Workload) -> tuple:
    return (-wl.priority, wl.timestamp, wl.sequence, wl.name)


def preemption_message(preemptor: Workload, reason: str, preemptor_path: str, victim_path: str):
    human = HUMAN_PREEMPTION_REASONS.get(reason, "UNKNOWN")
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, "
        f"JobUID: {preemptor.job_uid or 'UNKNOWN'}) due to {human}; "
        f"preemptor path: {preemptor_path}; preemptee path: {victim_path}"
    )


def cq_path(cq: ClusterQueue | None, name: str) -> str:
    if cq is not None and cq.cohort:
        return f"/{cq.cohort}/{name}"
    return f"/{name}"


def _flavor_mismatch(flavor: Flavor, ps: PodSet) -> str | None:
    tolerations = list(ps.tolerations) + list(flavor.tolerations)
    for taint in flavor.node_taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            value = taint.get("value")
            shown = (
                f"{taint.get('key')}={value}:{taint.get('effect')}"
                if value
                else (f"{taint.get('key')}:{taint.get('effect')}")
            )
            return f"untolerated taint {shown} in flavor {flavor.name}"
    if not flavor_matches_node_affinity(flavor, ps):
        return f"flavor {flavor.name} doesn't match node affinity"
    return None


def flavor_matches_node_affinity(flavor: Flavor, ps: PodSet) -> bool:
    """Kueue v0.19's flavorSelector: the pod set's nodeSelector and required node affinity, cut
    down to the keys this flavor's nodeLabels use, must match a node labelled like the flavor.

    An affinity term left with no expressions matches every node, so the whole affinity is then
    dropped (terms are ORed); matchFields are ignored.
    """
    keys = set(flavor.node_labels)
    spec: dict = {"nodeSelector": {k: v for k, v in ps.node_selector.items() if k in keys}}
    terms: list[dict] = []
    for term in ps.node_affinity_terms or []:
        expressions = [e for e in term.get("matchExpressions") or [] if e.get("key") in keys]
        if not expressions:
            terms = []
            break
        terms.append({"matchExpressions": expressions})
    if terms:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    node = {"metadata": {"name": flavor.name, "labels": flavor.node_labels}}
    return matches_node_affinity({"spec": spec}, node)


def _tolerates(toleration: dict, taint: dict) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def backoff_seconds(count: int, base: int = 60, maximum: int = 3600) -> float:
    """Kueue's requeue backoff after a PodsReady timeout: base * 2^(n-1), capped."""
    return float(min(maximum, base * math.pow(2, max(0, count - 1))))
