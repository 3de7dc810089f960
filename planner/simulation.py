"""A forward simulation of the GPU queue: when will each job start?

Pure: plain values in (a ``Snapshot``), plain values out; no database, no cluster. The selectors
build the snapshot from the portal's own tables, the forecast, the pending advice and the quota
what-if all run this one simulation.

It imitates the admission order of Kueue's classical scheduler as the portal configures it
(``quotas.manifests.cluster_queue``: one ClusterQueue per project, cohort = department,
BestEffortFIFO, the preemption policy of ``quotas.manifests.preemption_policy``):

- queue order is priority (high first), then submission time (old first);
- a job is admitted when it fits its project's usable amount (``quotas.arithmetic``: nominal plus
  what it may borrow), what its cohort (the department's projects in that pool and resource) has
  left of its nominal sum, and the pool's capacity; a job that does not fit does not hold back
  the ones behind it (BestEffortFIFO);
- a gang (several pods) is all-or-nothing: its whole amount must fit at once;
- a MIG job asks for instances of its profile, a resource of its own;
- eligible pools are tried in order, the first that fits wins;
- preemption: a job may evict lower-priority jobs of its own project; it reclaims its nominal
  quota from other projects' lower-priority jobs running on borrowed quota; and a borrowing job
  may evict other projects' lower-priority borrowers at or below the policy's threshold.
  Victims are taken lowest priority first, most recently admitted first, and go back to the
  queue (they start over: their expected duration counts again);
- nodes (a pool that lists them): Kueue admits on quota alone; the admitted job starts once the
  default scheduler finds a node for each pod (MostAllocated: the fullest that fits), in the
  scheduler's order (priority, then admission); until then it holds its quota.

What it does not know: image pulls and start-up time, and jobs that will be submitted later
(the forecast's late end expects higher-priority ones at the last window's rate:
expected_arrivals). ``docs/user-guide/forecast.md`` lists what limits it.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from quotas import arithmetic
from quotas.arithmetic import DepartmentCap, QuotaEntry

FULL_GPU = arithmetic.FULL_GPU
HIGH, LOW = "high", "low"  # which duration estimate a run uses


@dataclass(frozen=True)
class Pool:
    """A pool's physical capacity per resource: whole GPUs, or instances of a MIG profile.

    ``nodes`` (name, GPUs) turns on node placement for whole GPUs: Kueue then admits on quota
    alone, as it does, and a job starts when the scheduler finds room for each of its pods on a
    node (the one with the fewest GPUs left after placing: kube-scheduler's MostAllocated), so an
    8-GPU pod waits for a whole node. Without it the pool's GPUs are one heap.
    """

    slug: str
    capacity: Mapping[str, int]
    nodes: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Preemption:
    """The preemption policy (quotas.manifests.preemption_policy as plain values)."""

    enabled: bool = True
    # A borrowing job may evict other projects' borrowers up to this priority; None: no limit.
    borrow_threshold: int | None = None


@dataclass(frozen=True)
class SimJob:
    """A job as the simulation sees it.

    ``amount`` is the whole request in units of ``resource`` (GPUs × pods, or MIG instances).
    ``duration_high`` is the conservative expected run time in seconds (history quantile or the
    maximum runtime), ``duration_low`` the optimistic one. A running job has ``started_at`` and
    ``running_pool``; its expected end is start + duration. ``eligible_at`` is the earliest time it
    may start (a start window); it is queued from ``submitted_at`` on.
    """

    key: str
    project: str
    department: str
    pools: tuple[str, ...]
    resource: str
    amount: int
    priority: int
    submitted_at: float
    duration_high: float
    duration_low: float | None = None
    started_at: float | None = None
    running_pool: str | None = None
    eligible_at: float = 0.0
    pods: int = 1  # the amount is split evenly among them (node placement)
    # A started job in a pool with nodes: where its pods run (None: not known, placed by the
    # scheduler's rule); placed=False: admitted, its pods wait for room on a node.
    nodes: tuple[str, ...] | None = None
    placed: bool = True

    @property
    def pod_amount(self) -> int:
        return self.amount // max(1, self.pods)

    def duration(self, scenario: str) -> float:
        if scenario == LOW and self.duration_low is not None:
            return self.duration_low
        return self.duration_high


@dataclass(frozen=True)
class Snapshot:
    now: float
    pools: tuple[Pool, ...]
    quotas: tuple[QuotaEntry, ...]
    caps: tuple[DepartmentCap, ...] = ()
    jobs: tuple[SimJob, ...] = ()  # running and queued (and, for a replay, not yet submitted)
    preemption: Preemption = field(default_factory=Preemption)
    # The jobs submitted in the last ``arrival_window`` seconds (any state): the forecast's
    # conservative end expects as many of higher priority in each window to come (see
    # expected_arrivals).
    recent: tuple[SimJob, ...] = ()
    arrival_window: float = 0.0


@dataclass(slots=True)
class JobOutcome:
    start: float | None = None  # None: not within the horizon
    end: float | None = None
    pool: str | None = None
    preemptions: int = 0  # how often it was evicted
    borrowed: int = 0  # units above its project's guarantee at its (last) admission


@dataclass
class SimulationResult:
    outcomes: dict[str, JobOutcome]
    horizon: float

    def start(self, key: str) -> float | None:
        outcome = self.outcomes.get(key)
        return outcome.start if outcome else None


UNBOUNDED = 1 << 60  # no limit at admission (a pool with nodes: the placement decides)


def _pool(snapshot: Snapshot, slug: str) -> Pool:
    return next(pool for pool in snapshot.pools if pool.slug == slug)


# --- the quota state ----------------------------------------------------------------------------
class _Ledger:
    """Use per project, cohort and pool against the quota arithmetic's numbers."""

    def __init__(self, snapshot: Snapshot) -> None:
        usable = arithmetic.usable_amounts(snapshot.quotas, snapshot.caps)
        self.guaranteed = {key: amount.guaranteed for key, amount in usable.items()}
        self.maximum = {key: amount.maximum for key, amount in usable.items()}
        self.cohort_nominal = arithmetic.cohort_nominals(snapshot.quotas)
        self.capacity = {
            (pool.slug, resource): amount
            for pool in snapshot.pools
            for resource, amount in pool.capacity.items()
        }
        # Whole GPUs of a pool with nodes: the largest node (a pod must fit on one); Kueue does
        # not count the pool's GPUs, the placement does (admission_capacity: unbounded there).
        self.largest_node = {
            (pool.slug, FULL_GPU): max(gpus for _, gpus in pool.nodes)
            for pool in snapshot.pools
            if pool.nodes
        }
        for key in self.largest_node:
            self.capacity[key] = sum(gpus for _, gpus in _pool(snapshot, key[0]).nodes)
        self.admission_capacity = dict(self.capacity)
        self.admission_capacity.update(dict.fromkeys(self.largest_node, UNBOUNDED))
        self.project_use: dict[tuple[str, str, str], int] = {}
        self.cohort_use: dict[tuple[str, str, str], int] = {}
        self.pool_use: dict[tuple[str, str], int] = {}

    def add(self, job: SimJob, pool: str, sign: int = 1) -> None:
        amount = sign * job.amount
        key = (job.project, pool, job.resource)
        cohort = (job.department, pool, job.resource)
        self.project_use[key] = self.project_use.get(key, 0) + amount
        self.cohort_use[cohort] = self.cohort_use.get(cohort, 0) + amount
        self.pool_use[(pool, job.resource)] = self.pool_use.get((pool, job.resource), 0) + amount

    def quota_fits(self, job: SimJob, pool: str, *, borrowing: bool = True) -> bool:
        key = (job.project, pool, job.resource)
        used = self.project_use.get(key, 0) + job.amount
        limit = self.maximum.get(key, 0) if borrowing else self.guaranteed.get(key, 0)
        if used > limit:
            return False
        cohort = (job.department, pool, job.resource)
        return self.cohort_use.get(cohort, 0) + job.amount <= self.cohort_nominal.get(cohort, 0)

    def capacity_fits(self, job: SimJob, pool: str) -> bool:
        key = (pool, job.resource)
        return self.pool_use.get(key, 0) + job.amount <= self.admission_capacity.get(key, 0)

    def fits(self, job: SimJob, pool: str) -> bool:
        return self.quota_fits(job, pool) and self.capacity_fits(job, pool)

    def borrowing(self, project: str, department: str, pool: str, resource: str) -> int:
        """Units the project uses above its guarantee."""
        key = (project, pool, resource)
        return max(0, self.project_use.get(key, 0) - self.guaranteed.get(key, 0))

    def ever_fits(self, job: SimJob, pool: str) -> bool:
        """Whether the job could start in this pool with everything else idle."""
        key = (job.project, pool, job.resource)
        largest = self.largest_node.get((pool, job.resource))
        if largest is not None and job.pod_amount > largest:
            return False  # no node is large enough for one of its pods
        return job.amount <= min(
            self.maximum.get(key, 0),
            self.cohort_nominal.get((job.department, pool, job.resource), 0),
            self.capacity.get((pool, job.resource), 0),
        )


# --- the event loop -----------------------------------------------------------------------------
def _queue_order(job: SimJob) -> tuple:
    return (-job.priority, job.submitted_at, job.key)


def _shape(job: SimJob) -> tuple:
    """Jobs of one shape fit or fail alike at one quota state (one answer per shape per pass)."""
    return (job.project, job.department, job.pools, job.resource, job.amount, job.priority)


class _Check:
    """One pool of a shape, with its constraint keys and the use each may be at for it to fit.

    Limits do not change during a run, so "use + amount <= limit" becomes "use <= allowed",
    worked out once per shape instead of at every try.
    """

    __slots__ = (
        "allowed_cohort",
        "allowed_guarantee",
        "allowed_pool",
        "allowed_project",
        "cohort_key",
        "pool",
        "pool_key",
        "project_key",
        "start_key",
    )

    def __init__(self, job: SimJob, pool: str, ledger: _Ledger) -> None:
        self.pool = pool
        self.project_key = (job.project, pool, job.resource)
        self.cohort_key = (job.department, pool, job.resource)
        self.pool_key = (pool, job.resource)
        self.allowed_project = ledger.maximum.get(self.project_key, 0) - job.amount
        self.allowed_cohort = ledger.cohort_nominal.get(self.cohort_key, 0) - job.amount
        self.allowed_pool = ledger.admission_capacity.get(self.pool_key, 0) - job.amount
        self.allowed_guarantee = ledger.guaranteed.get(self.project_key, 0) - job.amount
        self.start_key = (pool, job.resource, job.department)


def _push(waits: dict[tuple, list], key: tuple, entry: tuple) -> None:
    waiting = waits.get(key)
    if waiting is None:
        waiting = waits[key] = []
    heapq.heappush(waiting, entry)


class _Nodes:
    """Free whole GPUs per node of one pool, and the default scheduler's choice of node.

    Nodes are indexed by their free GPUs (a heap of node numbers per count, stale entries
    dropped when met), so a choice looks at a handful of counts, not at every node.
    """

    __slots__ = ("by_free", "count", "free", "index", "size")

    def __init__(self, nodes: tuple[tuple[str, int], ...]) -> None:
        ordered = sorted(nodes)  # equal scores go to the first name, as kube-scheduler's do here
        self.free = [gpus for _, gpus in ordered]
        self.index = {name: i for i, (name, _) in enumerate(ordered)}
        self.size = max(self.free, default=0)
        self.by_free: dict[int, list[int]] = {}
        self.count: dict[int, int] = {}  # free GPUs → how many nodes have that many
        for i, free in enumerate(self.free):
            self.by_free.setdefault(free, []).append(i)
            self.count[free] = self.count.get(free, 0) + 1

    def _first_with(self, free: int) -> int:
        """The first node with exactly ``free`` GPUs free, or -1."""
        if not self.count.get(free):
            return -1
        heap = self.by_free.get(free)
        while heap and self.free[heap[0]] != free:
            heapq.heappop(heap)
        return heap[0] if heap else -1

    def _set(self, i: int, free: int) -> None:
        count = self.count
        count[self.free[i]] -= 1
        count[free] = count.get(free, 0) + 1
        self.free[i] = free
        heapq.heappush(self.by_free.setdefault(free, []), i)

    def _best(self, need: int) -> int:
        """The node with the fewest GPUs left after placing ``need`` (MostAllocated), or -1."""
        for free in range(need, self.size + 1):
            i = self._first_with(free)
            if i >= 0:
                return i
        return -1

    def most_free(self) -> int:
        count = self.count
        for free in range(self.size, 0, -1):
            if count.get(free):
                return free
        return 0

    def place(self, need: int, pods: int) -> list[int] | None:
        """A node per pod, or None (and nothing taken) when not every pod fits."""
        taken = []
        for _ in range(pods):
            best = self._best(need)
            if best < 0:
                self.release(taken, need)
                return None
            self._set(best, self.free[best] - need)
            taken.append(best)
        return taken

    def hold(self, job: SimJob) -> list[int]:
        """Where a running job's pods are: the nodes it names, else the scheduler's choice; a
        pod that fits nowhere (a snapshot older than its nodes) is counted on the freest node."""
        need, taken = job.pod_amount, []
        names = job.nodes or ()
        for pod in range(max(1, job.pods)):
            index = self.index.get(names[pod]) if pod < len(names) else None
            if index is None:
                index = self._best(need)
            if index < 0:
                index = max(range(len(self.free)), key=self.free.__getitem__)
            self._set(index, self.free[index] - need)
            taken.append(index)
        return taken

    def release(self, taken: list[int], need: int) -> None:
        for i in taken:
            self._set(i, self.free[i] + need)


class _Run:
    def __init__(
        self, snapshot: Snapshot, scenario: str, horizon: float, *, reference: bool = False
    ) -> None:
        self.snapshot = snapshot
        self.scenario = scenario
        self.horizon = horizon
        # The reference run tries every waiting shape at every pass, without the sleeping below:
        # slow and plainly right, the yardstick of the equivalence tests.
        self.reference = reference
        self.ledger = _Ledger(snapshot)
        self.outcomes: dict[str, JobOutcome] = {job.key: JobOutcome() for job in snapshot.jobs}
        self.running: dict[str, tuple[SimJob, str, float]] = {}  # key → (job, pool, end)
        # The running jobs per (pool, resource, department): where victims are looked for.
        self.running_in: dict[tuple[str, str, str], dict[str, SimJob]] = {}
        # Those running jobs by priority, newest admission first (victims are taken in that
        # order), as (priority, -admission, key, job); sorted once when first searched, then
        # kept in order as jobs start and stop there.
        self.victim_order: dict[tuple[str, str, str], list[tuple]] = {}
        self.ends: list[tuple[float, int, str]] = []  # heap of (end, generation, key)
        self.generation: dict[str, int] = {}
        self.buckets: dict[tuple, list[tuple]] = {}  # shape → heap of (order, job)
        self.checks: dict[tuple, tuple[_Check, ...]] = {}  # shape → its pools' checks
        self.arrivals: list[tuple[float, tuple, SimJob]] = []
        self.lower: dict[tuple, dict[int, int]] = {}
        priorities = sorted({job.priority for job in snapshot.jobs})
        self.priorities_above = {p: [q for q in priorities if q > p] for p in priorities}
        self.awake: set[tuple] = set()  # shapes with queued jobs worth trying
        self.sleeping: dict[tuple, int] = {}  # shape → token of its current sleep
        # Sleeping shapes per constraint (project, cohort, pool) and key, grouped by the use
        # the constraint must be at for them to fit and by project: {key: {(allowed use,
        # project): heap of (queue order, token, shape)}}. A release wakes no one at once: it
        # puts forward each satisfied group in its project's queue, whose first shape is woken
        # when the project's turn reaches its place in the queue (see _project_head).
        ledger = self.ledger
        self.uses = (ledger.project_use, ledger.cohort_use, ledger.pool_use)
        self.groups: tuple[dict[tuple, dict[tuple, list]], ...] = ({}, {}, {})
        self.forward: dict[str, list[tuple[tuple, tuple]]] = {}  # project → heap (order, group)
        self.forwarded: dict[tuple, tuple] = {}  # group → the earliest place it is put forward
        # Preemption: the use by jobs of a shape's priority or higher, per (kind, pool, resource,
        # project or department, priority); shapes waiting for a lower-priority start (shape →
        # token); shapes waiting for any change in a pool.
        self.wait_high: dict[tuple, list[tuple[int, int, tuple]]] = {}
        # The keys of wait_high by what a stop must look at: its project's (kind 0), its
        # department's (1), its pool's (2), under the stopped job's keys (see _keys).
        self.high_keys: tuple[dict[tuple, set[tuple]], ...] = ({}, {}, {})
        self.wait_start: dict[tuple, dict[tuple, int]] = {}
        self.wait_any: dict[tuple[str, str], list[tuple[int, tuple]]] = {}
        self.token = 0
        # While admitting: each project's awake shapes, a heap of (queue order, shape).
        self.heads: dict[str, list[tuple[tuple, tuple]]] | None = None
        # Whether each job can ever start (its quota, cohort and pool are large enough), worked
        # out once per kind of request.
        fits_ever: dict[tuple, bool] = {}
        self.possible: dict[str, bool] = {}
        for job in snapshot.jobs:
            kind = (job.project, job.department, job.pools, job.resource, job.amount, job.pods)
            possible = fits_ever.get(kind)
            if possible is None:
                possible = fits_ever[kind] = any(
                    self.ledger.ever_fits(job, pool) for pool in job.pools
                )
            self.possible[job.key] = possible
        self.job_keys: dict[str, tuple] = {}  # job key → its pool and keys there (see _move)
        # Every start and stop moves the version: an eviction plan found at one version (a
        # round's look at a head) is still right at its turn if nothing moved since.
        self.version = 0
        self.plans: dict[tuple, tuple] = {}  # shape → (version, check, victims)
        # (pool, resource) keys not limited at admission (whole GPUs of a pool with nodes)
        self.unbounded = set(self.ledger.largest_node)
        # Node placement (pools with nodes, whole GPUs): an admitted job holds its quota from
        # admission, starts when its pods are placed.
        self.nodes = {pool.slug: _Nodes(pool.nodes) for pool in snapshot.pools if pool.nodes}
        self.unplaced: dict[str, dict[str, SimJob]] = {}  # pool → admitted, waiting for nodes
        self.placement: dict[str, list[int]] = {}  # job key → a node per pod
        self.admitted_at: dict[str, float] = {}
        self.now = snapshot.now

    def _keys(self, job: SimJob, pool: str) -> tuple:
        """The job's keys in a pool (built once per job and pool): project, cohort and pool use,
        the lower-priority sums of its project and department, and its running_in key."""
        keys = self.job_keys.get(job.key)
        if keys is None or keys[0] != pool:
            resource = job.resource
            keys = self.job_keys[job.key] = (
                pool,
                (job.project, pool, resource),
                (job.department, pool, resource),
                (pool, resource),
                (pool, resource, "project", job.project),
                (pool, resource, "department", job.department),
                (pool, resource, job.department),
            )
        return keys

    def _move(self, job: SimJob, pool: str, sign: int) -> tuple:
        """A job starts (sign 1) or stops (-1) in a pool: the use and the lower-priority sums;
        its keys."""
        self.version += 1
        keys = self.job_keys.get(job.key)
        if keys is None or keys[0] != pool:
            keys = self._keys(job, pool)
        _, project_key, cohort_key, pool_key, project_lower, department_lower, _ = keys
        amount = sign * job.amount
        ledger = self.ledger
        ledger.project_use[project_key] = ledger.project_use.get(project_key, 0) + amount
        ledger.cohort_use[cohort_key] = ledger.cohort_use.get(cohort_key, 0) + amount
        ledger.pool_use[pool_key] = ledger.pool_use.get(pool_key, 0) + amount
        # Running amounts below each priority that occurs, to tell at once when no preemption
        # can make room: key → {priority: units of lower priority}.
        above = self.priorities_above[job.priority]
        if above:
            for key in (project_lower, department_lower):
                lower = self.lower.get(key)
                if lower is None:
                    lower = self.lower[key] = dict.fromkeys(self.priorities_above, 0)
                for priority in above:
                    lower[priority] += amount
        return keys

    def _lower_than(self, key: tuple, priority: int) -> int:
        lower = self.lower.get(key)
        return lower[priority] if lower else 0

    def _preemption_could_help(self, job: SimJob, check: _Check) -> bool:
        """An upper bound: whether evicting every lower-priority job of the project and of the
        department in the pool would make room (False skips the search for victims)."""
        pool, resource = check.pool, job.resource
        department = self._lower_than((pool, resource, "department", job.department), job.priority)
        if department <= 0:
            return False
        own = self._lower_than((pool, resource, "project", job.project), job.priority)
        ledger = self.ledger
        return (
            ledger.project_use.get(check.project_key, 0) - check.allowed_project <= own
            and ledger.cohort_use.get(check.cohort_key, 0) - check.allowed_cohort <= department
            and ledger.pool_use.get(check.pool_key, 0) - check.allowed_pool <= department
        )

    # jobs in and out
    def _placed_by_nodes(self, job: SimJob, pool: str) -> bool:
        return job.resource == FULL_GPU and pool in self.nodes

    def _run_from(self, job: SimJob, pool: str, at: float, duration: float) -> None:
        """The job's pods run from ``at``: its end is due."""
        end = at + max(0.0, duration)
        self.running[job.key] = (job, pool, end)
        generation = self.generation.get(job.key, 0) + 1
        self.generation[job.key] = generation
        heapq.heappush(self.ends, (end, generation, job.key))
        outcome = self.outcomes[job.key]
        outcome.start, outcome.end, outcome.pool = at, end, pool

    def _place_waiting(self, pool: str, now: float) -> None:
        """Admitted jobs whose pods now fit on the pool's nodes start, in the scheduler's order
        (priority, then the pods' creation: admission); one that does not fit holds no one back."""
        waiting = self.unplaced.get(pool)
        if not waiting:
            return
        nodes = self.nodes[pool]
        if nodes.most_free() <= 0:
            return
        admitted_at = self.admitted_at
        ordered = (
            list(waiting.values())
            if len(waiting) == 1
            else sorted(waiting.values(), key=lambda j: (-j.priority, admitted_at[j.key], j.key))
        )
        for job in ordered:
            if nodes.most_free() <= 0:
                break
            taken = nodes.place(job.pod_amount, job.pods) if job.amount else []
            if taken is None:
                continue
            del waiting[job.key]
            self.placement[job.key] = taken
            self._run_from(job, pool, now, job.duration(self.scenario))

    def _start(self, job: SimJob, pool: str, at: float, duration: float) -> None:
        """Admission: the job takes its quota; it runs from now, or once its pods are placed."""
        keys = self._move(job, pool, 1)
        self.admitted_at[job.key] = at
        by_nodes = self._placed_by_nodes(job, pool)
        if by_nodes:
            self.running[job.key] = (job, pool, math.inf)  # until placed: no end due
            self.outcomes[job.key].pool = pool
            self.unplaced.setdefault(pool, {})[job.key] = job
        else:
            self._run_from(job, pool, at, duration)
        running_in = self.running_in.get(keys[6])
        if running_in is None:
            running_in = self.running_in[keys[6]] = {}
        running_in[job.key] = job
        ordered = self.victim_order.get(keys[6])
        if ordered is not None:
            bisect.insort(ordered, (job.priority, -at, job.key, job))
        outcome = self.outcomes[job.key]
        ledger = self.ledger
        borrowed = ledger.project_use[keys[1]] - ledger.guaranteed.get(keys[1], 0)
        outcome.borrowed = min(max(0, borrowed), job.amount)
        # A lower-priority job is a new possible victim for the shapes that wait on preemption.
        waiting = self.wait_start.get(keys[6])
        if waiting:
            for shape, token in list(waiting.items()):
                if shape[5] > job.priority:
                    del waiting[shape]
                    self._wake(shape, token)
        if self.wait_any:
            # A start makes a failed search succeed only with a new victim of lower priority in
            # the searcher's department, or by making its project borrow (its jobs become
            # reclaimable); more use elsewhere only makes room scarcer.
            self._wake_any(pool, job.resource, started=job, borrowing=borrowed > 0)
        if by_nodes:
            self._place_waiting(pool, at)

    def _stop(self, key: str) -> SimJob:
        job, pool, _ = self.running.pop(key)
        keys = self._move(job, pool, -1)
        del self.running_in[keys[6]][key]
        ordered = self.victim_order.get(keys[6])
        if ordered is not None:
            entry = (job.priority, -self.admitted_at[key], key)
            del ordered[bisect.bisect_left(ordered, entry)]
        taken = self.placement.pop(key, None)
        if taken is not None:
            self.nodes[pool].release(taken, job.pod_amount)
        elif pool in self.unplaced:
            self.unplaced[pool].pop(key, None)
        # Put forward the groups of sleeping shapes whose constraint this release satisfies.
        resource = job.resource
        for kind, constraint in ((0, keys[1]), (1, keys[2]), (2, keys[3])):
            groups = self.groups[kind].get(constraint)
            if not groups:
                continue
            level = self.uses[kind].get(constraint, 0)
            for (allowed, project), waiting in groups.items():
                if allowed >= level and waiting:
                    self._put_forward(waiting[0][0], (kind, constraint, allowed, project))
        if self.wait_any:
            # Room freed in the pool, or only in the department's cohort where the pool's own
            # GPUs are not counted at admission (a pool of nodes).
            self._wake_any(
                pool, resource, department=job.department if keys[3] in self.unbounded else None
            )
        # The use by jobs of priority p or higher falls with the end of a job of priority p or
        # higher: in its project, in its department, and (for the pool's share of a department)
        # unless it is that department's own lower-priority job.
        priority = job.priority
        for by, index in enumerate(keys[1:4]):
            high_keys = self.high_keys[by].get(index)
            if not high_keys:
                continue
            for high_key in high_keys:
                if high_key[4] > priority and (by < 2 or high_key[3] == job.department):
                    continue
                waiting = self.wait_high.get(high_key)
                if not waiting:
                    continue
                level = self._high_level(high_key)
                while waiting and -waiting[0][0] >= level:
                    _, token, shape = heapq.heappop(waiting)
                    self._wake(shape, token)
        if taken:
            self._place_waiting(pool, self.now)
        return job

    def _enqueue(self, job: SimJob) -> None:
        if not self.possible[job.key]:
            return  # can never start: its quota or the pool is too small
        shape = _shape(job)
        bucket = self.buckets.get(shape)
        if bucket is None:
            bucket = self.buckets[shape] = []
            self.checks[shape] = tuple(_Check(job, pool, self.ledger) for pool in job.pools)
        order = _queue_order(job)
        heapq.heappush(bucket, (order, job))
        if bucket[0][0] != order:
            return  # behind the shape's first job: it fits or fails with it
        token = self.sleeping.get(shape)
        if token is not None:
            # Its sleep is filed at its first job's place in the queue, now an earlier one.
            self._wake(shape, token)
            return
        self.awake.add(shape)
        if self.heads is not None:
            # A preempted job goes back in line at once, in its place in its project's queue.
            heapq.heappush(self.heads.setdefault(shape[0], []), (order, shape))

    # A shape that failed sleeps until what stopped it can have changed. Use only falls when a
    # job stops, so a shape over its limit on one constraint cannot fit before a stop brings
    # that constraint's use down to what the shape allows. Preemption can make room only when
    # the use by jobs of the shape's priority or higher (what no eviction frees) is within the
    # shape's limits, and the department has something of lower priority to evict: the first
    # falls only when such a job stops, the second starts with a lower-priority start. When
    # both hold and the search still failed (the victims' projects do not borrow, the
    # threshold protects them), any start or stop in the pool may change it. Waking too often
    # is harmless; the equivalence tests check these rules against the reference run.
    def _sleep(self, shape: tuple) -> None:
        ledger = self.ledger
        self.token += 1
        token = self.token
        self.sleeping[shape] = token
        self.awake.discard(shape)
        order = self.buckets[shape][0][0]
        project_use, cohort_use, pool_use = (
            ledger.project_use,
            ledger.cohort_use,
            ledger.pool_use,
        )
        preemption = self.snapshot.preemption.enabled
        priority = shape[5]
        for check in self.checks[shape]:
            project_short = project_use.get(check.project_key, 0) - check.allowed_project
            cohort_short = cohort_use.get(check.cohort_key, 0) - check.allowed_cohort
            pool_short = pool_use.get(check.pool_key, 0) - check.allowed_pool
            if pool_short >= cohort_short and pool_short >= project_short:
                kind, key, allowed = 2, check.pool_key, check.allowed_pool
            elif cohort_short >= project_short:
                kind, key, allowed = 1, check.cohort_key, check.allowed_cohort
            else:
                kind, key, allowed = 0, check.project_key, check.allowed_project
            groups = self.groups[kind].get(key)
            if groups is None:
                groups = self.groups[kind][key] = {}
            waiting = groups.get((allowed, shape[0]))
            if waiting is None:
                waiting = groups[(allowed, shape[0])] = []
            heapq.heappush(waiting, (order, token, shape))
            if not preemption:
                continue
            pool, resource, department = check.start_key
            department_lower = self._lower_than(
                (pool, resource, "department", department), priority
            )
            if department_lower <= 0:
                # Nothing to evict: nothing changes that before a lower-priority start.
                start_waits = self.wait_start.get(check.start_key)
                if start_waits is None:
                    start_waits = self.wait_start[check.start_key] = {}
                start_waits[shape] = token
                continue
            own_lower = self._lower_than((pool, resource, "project", shape[0]), priority)
            # What jobs of this priority or higher use (no eviction frees it) above the limits.
            project_short -= own_lower
            cohort_short -= department_lower
            pool_short -= department_lower
            if project_short > 0 or cohort_short > 0 or pool_short > 0:
                if pool_short >= cohort_short and pool_short >= project_short:
                    key, allowed = ("pool", pool, resource, department), check.allowed_pool
                    by, index = 2, check.pool_key
                elif cohort_short >= project_short:
                    key, allowed = ("cohort", pool, resource, department), check.allowed_cohort
                    by, index = 1, check.cohort_key
                else:
                    key, allowed = ("project", pool, resource, shape[0]), check.allowed_project
                    by, index = 0, check.project_key
                high_key = (*key, priority)
                _push(self.wait_high, high_key, (-allowed, token, shape))
                self.high_keys[by].setdefault(index, set()).add(high_key)
            else:
                self.wait_any.setdefault((pool, resource), []).append((token, shape))

    def _high_level(self, key: tuple) -> int:
        """The use by jobs of at least the key's priority, on the key's constraint."""
        kind, pool, resource, name, priority = key
        ledger = self.ledger
        if kind == "project":
            use = ledger.project_use.get((name, pool, resource), 0)
            return use - self._lower_than((pool, resource, "project", name), priority)
        lower = self._lower_than((pool, resource, "department", name), priority)
        if kind == "cohort":
            return ledger.cohort_use.get((name, pool, resource), 0) - lower
        return ledger.pool_use.get((pool, resource), 0) - lower

    def _wake_any(
        self,
        pool: str,
        resource: str,
        *,
        started: SimJob | None = None,
        borrowing: bool = False,
        department: str | None = None,
    ) -> None:
        waiting = self.wait_any.pop((pool, resource), None)
        if not waiting:
            return
        if started is None and department is None:
            for token, shape in waiting:
                self._wake(shape, token)
            return
        keep = []
        for token, shape in waiting:
            if started is not None:
                wake = shape[1] == started.department and (borrowing or started.priority < shape[5])
            else:
                wake = shape[1] == department
            if wake:
                self._wake(shape, token)
            else:
                keep.append((token, shape))
        if keep:
            self.wait_any[(pool, resource)] = keep

    def _wake(self, shape: tuple, token: int) -> None:
        """Wake a shape for one of its registrations (``token``; older ones are stale)."""
        if self.sleeping.get(shape) != token:
            return
        del self.sleeping[shape]
        bucket = self.buckets.get(shape)
        if bucket:
            self.awake.add(shape)
            if self.heads is not None:
                heapq.heappush(self.heads.setdefault(shape[0], []), (bucket[0][0], shape))

    def _put_forward(self, order: tuple, group: tuple) -> None:
        # Once is enough: a group already put forward at this place or earlier gets its turn.
        forwarded = self.forwarded.get(group)
        if forwarded is not None and forwarded <= order:
            return
        self.forwarded[group] = order
        heapq.heappush(self.forward.setdefault(group[3], []), (order, group))

    def _group_turn(self, order: tuple, group: tuple) -> None:
        """A group put forward reaches its place in its project's queue: wake its first shape
        if the constraint still allows it (an admission since the release may have taken the
        room; then the group waits for the next release), and put the group forward again at
        its next shape's place."""
        if self.forwarded.get(group) == order:
            del self.forwarded[group]
        kind, key, allowed, project = group
        waiting = self.groups[kind][key].get((allowed, project))
        sleeping = self.sleeping
        while waiting and sleeping.get(waiting[0][2]) != waiting[0][1]:
            heapq.heappop(waiting)  # stale: the shape was woken by another registration
        if not waiting or self.uses[kind].get(key, 0) > allowed:
            return
        _, token, shape = heapq.heappop(waiting)
        self._wake(shape, token)
        if waiting:
            self._put_forward(waiting[0][0], group)

    def _project_head(self, project: str, now: float) -> tuple | None:
        """The project's first waiting job that can start now, as (borrows, order, shape); the
        shapes found unable to start on the way sleep."""
        heap = self.heads.setdefault(project, [])
        forward = self.forward.get(project)
        buckets, sleeping = self.buckets, self.sleeping
        while True:
            # Groups put forward at or before the first awake shape's place get their turn.
            while forward and (not heap or forward[0][0] <= heap[0][0]):
                self._group_turn(*heapq.heappop(forward))
            if not heap:
                return None
            order, shape = heap[0]
            bucket = buckets[shape]
            if not bucket or shape in sleeping or bucket[0][0] != order:
                heapq.heappop(heap)  # stale: its shape's head changed or it sleeps
                continue
            borrows = self._can_start(shape, now)
            if borrows is not None:
                return borrows, order, shape
            heapq.heappop(heap)
            self._sleep(shape)

    def _first_fit(self, shape: tuple) -> str | None:
        ledger = self.ledger
        project_use, cohort_use, pool_use = (
            ledger.project_use,
            ledger.cohort_use,
            ledger.pool_use,
        )
        for check in self.checks[shape]:
            if (
                project_use.get(check.project_key, 0) <= check.allowed_project
                and cohort_use.get(check.cohort_key, 0) <= check.allowed_cohort
                and pool_use.get(check.pool_key, 0) <= check.allowed_pool
            ):
                return check.pool
        return None

    def _can_start(self, shape: tuple, now: float) -> bool | None:
        """Whether the shape's first job can start now (it fits, or evictions make room), and
        then whether it borrows there: None when it cannot start. Changes nothing."""
        project_use, cohort_use, pool_use = self.uses
        for check in self.checks[shape]:
            use = project_use.get(check.project_key, 0)
            if (
                use <= check.allowed_project
                and cohort_use.get(check.cohort_key, 0) <= check.allowed_cohort
                and pool_use.get(check.pool_key, 0) <= check.allowed_pool
            ):
                return use > check.allowed_guarantee
        if not self.snapshot.preemption.enabled:
            return None
        job = self.buckets[shape][0][1]
        for check in self.checks[shape]:
            if self._preemption_could_help(job, check):
                borrows = self._preempt_in(job, check, dry=True)
                if borrows is not None:
                    return borrows
        return None

    # Admissions at time `now`, in rounds as Kueue's scheduler takes them: each round takes the
    # first waiting job of every project (a ClusterQueue) that can start, then admits them
    # jobs that fit without borrowing first, then by priority and submission, each checked
    # again at its turn; rounds go on until no project has a job that can start. A job that
    # cannot start does not hold back the ones behind it (BestEffortFIFO). Only awake shapes are
    # worth trying: the others would fail (see _sleep); a shape woken during a round (a new
    # victim for it, a preemption that freed more than it took) joins its project's heap.
    def _admit(self, now: float) -> None:
        if self.reference:
            self._admit_reference(now)
            return
        buckets = self.buckets
        heads: dict[str, list[tuple[tuple, tuple]]] = {}
        for shape in self.awake:
            heads.setdefault(shape[0], []).append((buckets[shape][0][0], shape))
        for heap in heads.values():
            heapq.heapify(heap)
        self.heads = heads
        preemption = self.snapshot.preemption.enabled
        try:
            while True:
                chosen = []
                for project in {*heads, *self.forward}:
                    head = self._project_head(project, now)
                    if head is not None:
                        chosen.append(head)
                if not chosen:
                    return
                chosen.sort()
                for _, order, shape in chosen:
                    bucket = buckets[shape]
                    if not bucket or shape in self.sleeping or bucket[0][0] != order:
                        continue
                    job = bucket[0][1]
                    pool = self._first_fit(shape)
                    if pool is None and preemption:
                        pool = self._preempt_for(job, shape, now)
                    if pool is None:
                        self._sleep(shape)  # an earlier one of the round took the room
                        continue
                    heapq.heappop(bucket)
                    self._start(job, pool, now, job.duration(self.scenario))
                    if bucket:
                        heapq.heappush(heads[shape[0]], (bucket[0][0], shape))
                    else:
                        self.awake.discard(shape)
        finally:
            self.heads = None
            self.forward.clear()
            self.forwarded.clear()

    def _admit_reference(self, now: float) -> None:
        """The same rule, plainly: every round looks at every waiting shape in queue order and
        takes each project's first one that can start; they go non-borrowing first, then in
        queue order, each checked again at its turn."""
        preemption = self.snapshot.preemption.enabled
        while True:
            ordered = sorted(
                (bucket[0][0], shape) for shape, bucket in self.buckets.items() if bucket
            )
            chosen: dict[str, tuple] = {}
            for order, shape in ordered:
                if shape[0] in chosen:
                    continue
                borrows = self._can_start(shape, now)
                if borrows is not None:
                    chosen[shape[0]] = (borrows, order, shape)
            if not chosen:
                return
            for _, _order, shape in sorted(chosen.values()):
                bucket = self.buckets[shape]
                job = bucket[0][1]
                pool = self._first_fit(shape)
                if pool is None and preemption:
                    pool = self._preempt_for(job, shape, now)
                if pool is not None:
                    heapq.heappop(bucket)
                    self._start(job, pool, now, job.duration(self.scenario))

    def _victims_in(self, job: SimJob, pool: str) -> list[SimJob]:
        """Candidates in Kueue's order: other projects first, lowest priority, newest start."""
        ledger = self.ledger
        reclaim = ledger.project_use.get((job.project, pool, job.resource), 0) + job.amount <= (
            ledger.guaranteed.get((job.project, pool, job.resource), 0)
        )
        threshold = self.snapshot.preemption.borrow_threshold
        key = (pool, job.resource, job.department)
        ordered = self.victim_order.get(key)
        if ordered is None:
            admitted_at = self.admitted_at
            ordered = self.victim_order[key] = sorted(
                (o.priority, -admitted_at[o.key], o.key, o)
                for o in self.running_in.get(key, {}).values()
            )
        others, own = [], []
        priority = job.priority
        for other_priority, _, _, other in ordered:
            if other_priority >= priority:
                break
            if other.project == job.project:
                own.append(other)
            elif reclaim or threshold is None or other.priority <= threshold:
                others.append(other)
        return others + own

    def _preempt_for(self, job: SimJob, shape: tuple, now: float) -> str | None:
        """Evict what the job needs in the first pool where that is enough; that pool."""
        plan = self.plans.pop(shape, None)
        if plan is not None and plan[0] == self.version:
            _, check, victims = plan
            self._evict(victims)
            return check.pool
        for check in self.checks[shape]:
            if self._preemption_could_help(job, check) and self._preempt_in(job, check) is not None:
                return check.pool
        return None

    def _preempt_in(self, job: SimJob, check: _Check, *, dry: bool = False) -> bool | None:
        """Evict the fewest victims that make room in the check's pool; None when no set does.
        Else whether the job borrows once they are gone (``dry``: nobody is evicted)."""
        candidates = self._victims_in(job, check.pool)
        if not candidates:
            return None
        project_use, cohort_use, pool_use = self.uses
        guaranteed = self.ledger.guaranteed
        # Victims run in this pool and department: one cohort and pool key for all of them.
        cohort_key, pool_key, project_key = check.cohort_key, check.pool_key, check.project_key

        def fits() -> bool:
            return (
                project_use.get(project_key, 0) <= check.allowed_project
                and cohort_use[cohort_key] <= check.allowed_cohort
                and pool_use[pool_key] <= check.allowed_pool
            )

        def take(victim_key: tuple, amount: int) -> None:
            project_use[victim_key] -= amount
            cohort_use[cohort_key] -= amount
            pool_use[pool_key] -= amount

        removed: list[tuple[SimJob, tuple]] = []
        for victim in candidates:
            victim_key = self.job_keys[victim.key][1]
            if victim.project != job.project and project_use[victim_key] <= guaranteed.get(
                victim_key, 0
            ):
                continue  # its project is back within its guarantee: not a reclaim target
            take(victim_key, victim.amount)
            removed.append((victim, victim_key))
            if fits():
                break
        if not removed or not fits():
            for victim, victim_key in removed:
                take(victim_key, -victim.amount)
            return None
        # Put back, newest removal first, every victim that is not needed after all.
        needed = [removed[-1]]
        for victim, victim_key in reversed(removed[:-1]):
            take(victim_key, -victim.amount)
            if fits():
                continue
            take(victim_key, victim.amount)
            needed.append((victim, victim_key))
        borrows = project_use.get(project_key, 0) > check.allowed_guarantee
        for victim, victim_key in needed:
            take(victim_key, -victim.amount)  # restore; the eviction stops them the regular way
        victims = [victim for victim, _ in needed]
        if dry:
            self.plans[_shape(job)] = (self.version, check, victims)
            return borrows
        self._evict(victims)
        return borrows

    def _evict(self, victims: list[SimJob]) -> None:
        for victim in victims:
            self._stop(victim.key)
            outcome = self.outcomes[victim.key]
            outcome.preemptions += 1
            outcome.start = outcome.end = outcome.pool = None
            self._enqueue(victim)

    def run(self, stop_when_started: Iterable[str] = ()) -> SimulationResult:
        snapshot = self.snapshot
        now = snapshot.now
        watched = set(stop_when_started)
        on_nodes: list[tuple[SimJob, str]] = []
        for job in snapshot.jobs:
            if job.started_at is not None:
                # Where it runs when the snapshot does not say: the first pool with room.
                pool = job.running_pool or next(
                    (p for p in job.pools if self.ledger.fits(job, p)), job.pools[0]
                )
                keys = self._move(job, pool, 1)
                self.admitted_at[job.key] = job.started_at
                if self._placed_by_nodes(job, pool):
                    self.running[job.key] = (job, pool, math.inf)
                    self.running_in.setdefault(keys[6], {})[job.key] = job
                    self.outcomes[job.key].pool = pool
                    on_nodes.append((job, pool))
                    continue
                end = job.started_at + job.duration(self.scenario)
                # A running job past its expected end ends "any moment now".
                end = max(end, now)
                self.running[job.key] = (job, pool, end)
                self.running_in.setdefault(keys[6], {})[job.key] = job
                self.generation[job.key] = 1
                heapq.heappush(self.ends, (end, 1, job.key))
                outcome = self.outcomes[job.key]
                outcome.start, outcome.end, outcome.pool = job.started_at, end, pool
                continue
            ready = max(job.submitted_at, job.eligible_at)
            if ready <= now:
                self._enqueue(job)
            else:
                self.arrivals.append((ready, _queue_order(job), job))
        # Pods on nodes: those whose nodes are known first, then by start; then the admitted
        # jobs whose pods wait for room.
        on_nodes.sort(key=lambda item: (item[0].nodes is None, item[0].started_at, item[0].key))
        for job, pool in on_nodes:
            if not job.placed:
                self.unplaced.setdefault(pool, {})[job.key] = job
                continue
            self.placement[job.key] = self.nodes[pool].hold(job) if job.amount else []
            # A running job past its expected end ends "any moment now".
            duration = max(job.duration(self.scenario), now - job.started_at)
            self._run_from(job, pool, job.started_at, duration)
        for pool in self.nodes:
            self._place_waiting(pool, now)
        self.arrivals.sort(key=lambda item: (item[0], item[1]))
        arrival_index = 0
        self._admit(now)
        while True:
            if watched and all(self.outcomes[k].start is not None for k in watched):
                break
            next_end = self.ends[0][0] if self.ends else math.inf
            next_arrival = (
                self.arrivals[arrival_index][0] if arrival_index < len(self.arrivals) else math.inf
            )
            now = min(next_end, next_arrival)
            if now > self.horizon or now == math.inf:
                break
            self.now = now
            while self.ends and self.ends[0][0] <= now:
                _, generation, key = heapq.heappop(self.ends)
                if self.generation.get(key) == generation and key in self.running:
                    self._stop(key)
            while arrival_index < len(self.arrivals) and self.arrivals[arrival_index][0] <= now:
                self._enqueue(self.arrivals[arrival_index][2])
                arrival_index += 1
            self._admit(now)
        for outcome in self.outcomes.values():
            if outcome.start is not None and outcome.start > self.horizon:
                outcome.start = outcome.end = None
        return SimulationResult(outcomes=self.outcomes, horizon=self.horizon)


def simulate(
    snapshot: Snapshot,
    *,
    horizon_seconds: float = 24 * 3600,
    scenario: str = HIGH,
    stop_when_started: Iterable[str] = (),
    _reference: bool = False,
) -> SimulationResult:
    """Every job's predicted start (None past the horizon) under one duration estimate.

    With ``stop_when_started`` the run ends as soon as those jobs have started (the forecast of
    one job needs no more).
    """
    run = _Run(snapshot, scenario, snapshot.now + horizon_seconds, reference=_reference)
    return run.run(stop_when_started)


# --- the forecast of one job -------------------------------------------------------------------
@dataclass(frozen=True)
class Forecast:
    """When a job is likely to start, in seconds from the snapshot's time.

    ``low`` assumes running jobs end early (the optimistic estimate), ``high`` the conservative
    one; None means not within the horizon. ``possible`` is False when the job can never start
    (its project's maximum, its cohort or the pool is smaller than the request).
    """

    low: float | None
    high: float | None
    horizon: float
    possible: bool = True
    pool: str | None = None

    @property
    def starts_now(self) -> bool:
        return self.high is not None and self.high <= NOW_SECONDS

    @property
    def text(self) -> str:
        return forecast_text(self)

    def as_dict(self) -> dict:
        return {
            "starts_now": self.starts_now,
            "low_seconds": None if self.low is None else round(self.low),
            "high_seconds": None if self.high is None else round(self.high),
            "horizon_seconds": round(self.horizon),
            "possible": self.possible,
            "pool": self.pool,
            "text": self.text,
        }


NOW_SECONDS = 60.0  # a start within a minute is "now"


MAX_EXPECTED_ARRIVALS = 2000


def expected_arrivals(snapshot: Snapshot, probe: SimJob, horizon_seconds: float) -> list[SimJob]:
    """The jobs expected to be submitted after the probe that would go ahead of it: as many of
    higher priority in every coming window as came in the last one, each window's spread evenly
    over it (a rate, not a replay of the past hour's bursts), up to the horizon. Jobs of the
    probe's priority or lower queue behind it."""
    window = snapshot.arrival_window
    ahead = [job for job in snapshot.recent if job.priority > probe.priority]
    if window <= 0 or not ahead:
        return []
    ahead.sort(key=lambda job: (job.submitted_at, job.key))
    step = window / len(ahead)
    expected = []
    for n in range(min(MAX_EXPECTED_ARRIVALS, int(horizon_seconds / step))):
        model = ahead[n % len(ahead)]
        at = snapshot.now + step * (n + 0.5)
        expected.append(
            replace(
                model,
                key=f"expected-{n}",
                submitted_at=at,
                eligible_at=0.0,
                started_at=None,
                running_pool=None,
                nodes=None,
                placed=True,
            )
        )
    return expected


def forecast(snapshot: Snapshot, probe: SimJob, *, horizon_seconds: float = 24 * 3600) -> Forecast:
    """The start range of ``probe`` (a job not in the snapshot yet, or one of its queued jobs).

    The early end assumes running jobs end early and nothing new comes; the late end, the
    conservative run times and the higher-priority submissions the last window's rate expects.
    """
    others = tuple(job for job in snapshot.jobs if job.key != probe.key)
    with_probe = replace(snapshot, jobs=(*others, probe))
    arrivals = tuple(expected_arrivals(snapshot, probe, horizon_seconds))
    starts: dict[str, float | None] = {}
    pool = None
    for scenario in (LOW, HIGH):
        result = simulate(
            replace(with_probe, jobs=(*with_probe.jobs, *arrivals))
            if scenario == HIGH and arrivals
            else with_probe,
            horizon_seconds=horizon_seconds,
            scenario=scenario,
            stop_when_started=(probe.key,),
        )
        start = result.start(probe.key)
        starts[scenario] = None if start is None else max(0.0, start - snapshot.now)
        if scenario == HIGH:
            pool = result.outcomes[probe.key].pool
    low, high = starts[LOW], starts[HIGH]
    if low is not None and high is not None and low > high:
        low, high = high, low  # a quicker end can reorder the queue; keep the range ordered
    if low is None and high is not None:
        low = high
    ledger = _Ledger(with_probe)
    possible = any(ledger.ever_fits(probe, p) for p in probe.pools)
    return Forecast(low=low, high=high, horizon=horizon_seconds, possible=possible, pool=pool)


def earliest_free_start(
    snapshot: Snapshot, probe: SimJob, *, horizon_seconds: float = 24 * 3600
) -> float | None:
    """A later start window: seconds from now from which ``probe`` (its request), submitted
    then, would start at once, with the queue as the conservative estimate drains it. None when
    not within the horizon.

    The candidate times are the expected ends of the other jobs; the first that works is found
    by bisection (once the queue ahead has drained it stays drained, short of new submissions).
    """
    others = tuple(job for job in snapshot.jobs if job.key != probe.key)
    base = replace(snapshot, jobs=others)
    limit = snapshot.now + horizon_seconds
    ends = simulate(base, horizon_seconds=horizon_seconds, scenario=HIGH).outcomes.values()
    later = {o.end for o in ends if o.end is not None and snapshot.now < o.end <= limit}
    candidates = [snapshot.now, *sorted(later)]

    def starts_at_once(at: float) -> bool:
        moved = replace(probe, submitted_at=at, eligible_at=at, started_at=None, running_pool=None)
        result = simulate(
            replace(base, jobs=(*others, moved)),
            horizon_seconds=horizon_seconds,
            scenario=HIGH,
            stop_when_started=(probe.key,),
        )
        start = result.start(probe.key)
        return start is not None and start - at <= NOW_SECONDS

    low, high = 0, len(candidates) - 1
    if not starts_at_once(candidates[high]):
        return None
    while low < high:
        middle = (low + high) // 2
        if starts_at_once(candidates[middle]):
            high = middle
        else:
            low = middle + 1
    return candidates[low] - snapshot.now


def duration_text(seconds: float) -> str:
    """'25 min', '3 h', '2 h 10 min', '2 d 4 h'."""
    minutes = max(1, round(seconds / 60))
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h" + (f" {rest} min" if rest and hours < 10 else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def _rounded_minutes(seconds: float, *, up: bool) -> int:
    minutes = seconds / 60
    step = 5 if minutes < 120 else 30
    value = math.ceil(minutes / step) * step if up else math.floor(minutes / step) * step
    return max(step if up else 0, int(value))


def forecast_text(result: Forecast) -> str:
    """'now'; 'likely to start in 25–40 min'; 'not within 24 h at today's load'."""
    horizon = duration_text(result.horizon)
    if not result.possible:
        return (
            "never: the project's quota or the pool (or, for one pod, each of its nodes) is "
            "smaller than this request"
        )
    if result.starts_now:
        return "now"
    if result.high is None and result.low is None:
        return f"not within {horizon} at today's load"
    low_minutes = _rounded_minutes(result.low or 0.0, up=False)
    if result.high is None:
        return (
            f"likely to start in {duration_text(low_minutes * 60)} or later, "
            f"perhaps not within {horizon}"
        )
    high_minutes = max(_rounded_minutes(result.high, up=True), low_minutes)
    if low_minutes == high_minutes or (low_minutes == 0 and high_minutes <= 5):
        return f"likely to start in about {duration_text(high_minutes * 60)}"
    if low_minutes < 60 and high_minutes < 60:
        return f"likely to start in {low_minutes}–{high_minutes} min"
    low_text = "a few minutes" if low_minutes == 0 else duration_text(low_minutes * 60)
    return f"likely to start in {low_text}–{duration_text(high_minutes * 60)}"
