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
  Victims are taken lowest priority first, most recently started first, and go back to the
  queue (they start over: their expected duration counts again).

What it does not know: where pods land on nodes (fragmentation), image pulls and start-up time,
and jobs that will be submitted later. ``docs/user-guide/forecast.md`` lists what limits it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from quotas import arithmetic
from quotas.arithmetic import DepartmentCap, QuotaEntry

FULL_GPU = arithmetic.FULL_GPU
HIGH, LOW = "high", "low"  # which duration estimate a run uses


@dataclass(frozen=True)
class Pool:
    """A pool's physical capacity per resource: whole GPUs, or instances of a MIG profile."""

    slug: str
    capacity: Mapping[str, int]


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


@dataclass
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
        return self.pool_use.get(key, 0) + job.amount <= self.capacity.get(key, 0)

    def fits(self, job: SimJob, pool: str) -> bool:
        return self.quota_fits(job, pool) and self.capacity_fits(job, pool)

    def borrowing(self, project: str, department: str, pool: str, resource: str) -> int:
        """Units the project uses above its guarantee."""
        key = (project, pool, resource)
        return max(0, self.project_use.get(key, 0) - self.guaranteed.get(key, 0))

    def ever_fits(self, job: SimJob, pool: str) -> bool:
        """Whether the job could start in this pool with everything else idle."""
        key = (job.project, pool, job.resource)
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


class _Run:
    def __init__(self, snapshot: Snapshot, scenario: str, horizon: float) -> None:
        self.snapshot = snapshot
        self.scenario = scenario
        self.horizon = horizon
        self.ledger = _Ledger(snapshot)
        self.outcomes: dict[str, JobOutcome] = {job.key: JobOutcome() for job in snapshot.jobs}
        self.running: dict[str, tuple[SimJob, str, float]] = {}  # key → (job, pool, end)
        self.ends: list[tuple[float, int, str]] = []  # heap of (end, generation, key)
        self.generation: dict[str, int] = {}
        self.buckets: dict[tuple, list[tuple]] = {}  # shape → heap of (order, job)
        self.arrivals: list[tuple[float, tuple, SimJob]] = []
        self.lower: dict[tuple, dict[int, int]] = {}
        self.released: dict[tuple, int] = {}  # units released so far per constraint
        self.awake: set[tuple] = set()  # shapes with queued jobs worth trying
        self.sleeping: dict[tuple, int] = {}  # shape → token of its current sleep
        self.wait_release: dict[tuple, list[tuple[int, int, tuple]]] = {}
        self.wait_start: dict[tuple, dict[tuple, int]] = {}  # shape → lower units needed
        self.token = 0
        self.woken = False
        self.possible = {
            job.key: any(self.ledger.ever_fits(job, pool) for pool in job.pools)
            for job in snapshot.jobs
        }

    # Running amounts by priority, to tell at once when no preemption can make room.
    def _index(self, job: SimJob, pool: str, sign: int) -> None:
        for key in (
            (pool, job.resource, "project", job.project),
            (pool, job.resource, "department", job.department),
        ):
            by_priority = self.lower.setdefault(key, {})
            by_priority[job.priority] = by_priority.get(job.priority, 0) + sign * job.amount

    def _lower_than(self, key: tuple, priority: int) -> int:
        return sum(v for p, v in self.lower.get(key, {}).items() if p < priority)

    def _preemption_could_help(self, job: SimJob, pool: str) -> bool:
        """An upper bound: whether evicting every lower-priority job of the project and of the
        department in the pool would make room (False skips the search for victims)."""
        resource = job.resource
        own = self._lower_than((pool, resource, "project", job.project), job.priority)
        department = self._lower_than((pool, resource, "department", job.department), job.priority)
        if department <= 0:
            return False
        ledger = self.ledger
        key = (job.project, pool, resource)
        cohort = (job.department, pool, resource)
        return (
            ledger.project_use.get(key, 0) + job.amount - ledger.maximum.get(key, 0) <= own
            and ledger.cohort_use.get(cohort, 0) + job.amount - ledger.cohort_nominal.get(cohort, 0)
            <= department
            and ledger.pool_use.get((pool, resource), 0)
            + job.amount
            - ledger.capacity.get((pool, resource), 0)
            <= department
        )

    # jobs in and out
    def _start(self, job: SimJob, pool: str, at: float, duration: float) -> None:
        self.ledger.add(job, pool)
        self._index(job, pool, 1)
        end = at + max(0.0, duration)
        self.running[job.key] = (job, pool, end)
        generation = self.generation.get(job.key, 0) + 1
        self.generation[job.key] = generation
        heapq.heappush(self.ends, (end, generation, job.key))
        outcome = self.outcomes[job.key]
        outcome.start, outcome.end, outcome.pool = at, end, pool
        outcome.borrowed = self.ledger.borrowing(job.project, job.department, pool, job.resource)
        outcome.borrowed = min(outcome.borrowed, job.amount)
        # A lower-priority job is a new possible victim for the shapes that wait on preemption.
        waiting = self.wait_start.get((pool, job.resource, job.department))
        if waiting:
            key = (pool, job.resource, "department", job.department)
            lower: dict[int, int] = {}
            for shape, needed in list(waiting.items()):
                priority = shape[5]
                if priority <= job.priority:
                    continue
                if priority not in lower:
                    lower[priority] = self._lower_than(key, priority)
                if lower[priority] >= needed:
                    del waiting[shape]
                    self._wake(shape)

    def _stop(self, key: str) -> SimJob:
        job, pool, _ = self.running.pop(key)
        self.ledger.add(job, pool, -1)
        self._index(job, pool, -1)
        for released in (
            ("project", job.project, pool, job.resource),
            ("cohort", job.department, pool, job.resource),
            ("pool", pool, job.resource),
        ):
            total = self.released.get(released, 0) + job.amount
            self.released[released] = total
            waiting = self.wait_release.get(released)
            while waiting and waiting[0][0] <= total:
                _, token, shape = heapq.heappop(waiting)
                if self.sleeping.get(shape) == token:
                    self._wake(shape)
        return job

    def _enqueue(self, job: SimJob) -> None:
        if not self.possible[job.key]:
            return  # can never start: its quota or the pool is too small
        shape = _shape(job)
        heapq.heappush(self.buckets.setdefault(shape, []), (_queue_order(job), job))
        if shape not in self.sleeping:
            self.awake.add(shape)

    # A shape that failed sleeps until what stopped it can have changed. Use only grows between
    # releases, so a shape short of s units on one constraint stays short until s units of it
    # are released; and preemption finds no new victims before a lower-priority job of its
    # department starts in the pool, or its own project releases quota (which may let it
    # reclaim). Waking too often is harmless; these are the only ways a failure can change.
    def _sleep(self, shape: tuple, job: SimJob) -> None:
        ledger = self.ledger
        self.token += 1
        token = self.token
        self.sleeping[shape] = token
        self.awake.discard(shape)
        resource = job.resource
        project, department, amount = job.project, job.department, job.amount
        released = self.released
        preemption = self.snapshot.preemption.enabled
        for pool in job.pools:
            project_key = (project, pool, resource)
            cohort_key = (department, pool, resource)
            project_short = (
                ledger.project_use.get(project_key, 0) + amount - ledger.maximum.get(project_key, 0)
            )
            cohort_short = (
                ledger.cohort_use.get(cohort_key, 0)
                + amount
                - ledger.cohort_nominal.get(cohort_key, 0)
            )
            pool_short = (
                ledger.pool_use.get((pool, resource), 0)
                + amount
                - ledger.capacity.get((pool, resource), 0)
            )
            if pool_short >= cohort_short and pool_short >= project_short:
                key, short = ("pool", pool, resource), pool_short
            elif cohort_short >= project_short:
                key, short = ("cohort", department, pool, resource), cohort_short
            else:
                key, short = ("project", *project_key), project_short
            threshold = released.get(key, 0) + max(1, short)
            heapq.heappush(self.wait_release.setdefault(key, []), (threshold, token, shape))
            if preemption:
                # Victims must cover the cohort's and the pool's shortfall at least.
                needed = max(1, cohort_short, pool_short)
                self.wait_start.setdefault((pool, resource, department), {})[shape] = needed
                # Its project's own releases may bring it back within its guarantee, where it
                # may reclaim what it lent.
                own = ("project", *project_key)
                above = (
                    ledger.project_use.get(project_key, 0)
                    + amount
                    - ledger.guaranteed.get(project_key, 0)
                )
                if own != key or above < short:
                    threshold = released.get(own, 0) + max(1, above)
                    heapq.heappush(self.wait_release.setdefault(own, []), (threshold, token, shape))

    def _wake(self, shape: tuple) -> None:
        if self.sleeping.pop(shape, None) is not None and self.buckets.get(shape):
            self.awake.add(shape)
            self.woken = True

    # passes of admissions at time `now`, until nothing new can be tried
    def _admit(self, now: float) -> None:
        self.woken = True
        while self.woken:
            self.woken = False
            self._admit_pass(now)

    def _admit_pass(self, now: float) -> None:
        heads = [(self.buckets[shape][0][0], shape) for shape in self.awake]
        heapq.heapify(heads)
        while heads:
            _, shape = heapq.heappop(heads)
            bucket = self.buckets[shape]
            if not bucket or shape in self.sleeping:
                continue
            job = bucket[0][1]
            pool = next((p for p in job.pools if self.ledger.fits(job, p)), None)
            if pool is None and self.snapshot.preemption.enabled:
                pool = self._preempt_for(job, now)
            if pool is None:
                # This shape waits; the others go on (BestEffortFIFO).
                self._sleep(shape, job)
                continue
            heapq.heappop(bucket)
            self._start(job, pool, now, job.duration(self.scenario))
            if bucket:
                heapq.heappush(heads, (bucket[0][0], shape))
            else:
                self.awake.discard(shape)

    def _victims_in(self, job: SimJob, pool: str) -> list[SimJob]:
        """Candidates in Kueue's order: other projects first, lowest priority, newest start."""
        ledger = self.ledger
        reclaim = ledger.project_use.get((job.project, pool, job.resource), 0) + job.amount <= (
            ledger.guaranteed.get((job.project, pool, job.resource), 0)
        )
        threshold = self.snapshot.preemption.borrow_threshold
        found = []
        for other, other_pool, _ in self.running.values():
            if other_pool != pool or other.resource != job.resource:
                continue
            if other.priority >= job.priority:
                continue
            if other.project != job.project:
                if other.department != job.department:
                    continue
                if not reclaim and threshold is not None and other.priority > threshold:
                    continue
            found.append(other)
        found.sort(
            key=lambda o: (
                o.project == job.project,
                o.priority,
                -(self.outcomes[o.key].start or 0.0),
                o.key,
            )
        )
        return found

    def _preempt_for(self, job: SimJob, now: float) -> str | None:
        ledger = self.ledger
        for pool in job.pools:
            if not self._preemption_could_help(job, pool):
                continue
            candidates = self._victims_in(job, pool)
            if not candidates:
                continue
            removed: list[tuple[SimJob, str]] = []
            for victim in candidates:
                if victim.project != job.project and not ledger.borrowing(
                    victim.project, victim.department, pool, victim.resource
                ):
                    continue  # its project is back within its guarantee: not a reclaim target
                ledger.add(victim, pool, -1)
                removed.append((victim, pool))
                if ledger.fits(job, pool):
                    break
            if not removed or not ledger.fits(job, pool):
                for victim, victim_pool in removed:
                    ledger.add(victim, victim_pool)
                continue
            # Put back, newest removal first, every victim that is not needed after all.
            needed = [removed[-1][0]]
            for victim, victim_pool in reversed(removed[:-1]):
                ledger.add(victim, victim_pool)
                if ledger.fits(job, pool):
                    continue
                ledger.add(victim, victim_pool, -1)
                needed.append(victim)
            for victim in needed:
                ledger.add(victim, pool)  # restore, then stop it the regular way
                self._stop(victim.key)
                outcome = self.outcomes[victim.key]
                outcome.preemptions += 1
                outcome.start = outcome.end = outcome.pool = None
                self._enqueue(victim)
            return pool
        return None

    def run(self, stop_when_started: Iterable[str] = ()) -> SimulationResult:
        snapshot = self.snapshot
        now = snapshot.now
        watched = set(stop_when_started)
        for job in snapshot.jobs:
            if job.started_at is not None:
                # Where it runs when the snapshot does not say: the first pool with room.
                pool = job.running_pool or next(
                    (p for p in job.pools if self.ledger.fits(job, p)), job.pools[0]
                )
                self.ledger.add(job, pool)
                self._index(job, pool, 1)
                end = job.started_at + job.duration(self.scenario)
                # A running job past its expected end ends "any moment now".
                end = max(end, now)
                self.running[job.key] = (job, pool, end)
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
) -> SimulationResult:
    """Every job's predicted start (None past the horizon) under one duration estimate.

    With ``stop_when_started`` the run ends as soon as those jobs have started (the forecast of
    one job needs no more).
    """
    run = _Run(snapshot, scenario, snapshot.now + horizon_seconds)
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


def forecast(snapshot: Snapshot, probe: SimJob, *, horizon_seconds: float = 24 * 3600) -> Forecast:
    """The start range of ``probe`` (a job not in the snapshot yet, or one of its queued jobs)."""
    others = tuple(job for job in snapshot.jobs if job.key != probe.key)
    with_probe = Snapshot(
        now=snapshot.now,
        pools=snapshot.pools,
        quotas=snapshot.quotas,
        caps=snapshot.caps,
        jobs=(*others, probe),
        preemption=snapshot.preemption,
    )
    starts: dict[str, float | None] = {}
    pool = None
    for scenario in (LOW, HIGH):
        result = simulate(
            with_probe,
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
        return "never: the project's quota or the pool is smaller than this request"
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
