"""The forward simulation, table-driven: each case is a small cluster, its jobs, and the start
time (in minutes) each job is expected to get."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner import simulation as sim
from quotas.arithmetic import DepartmentCap, QuotaEntry

MIN = 60.0
HIGH_PRIO, NORMAL, LOW_PRIO = 1000, 100, 10


def quota(project, nominal, borrowing=0, *, dept="d", pool="h100", resource="gpu"):
    return QuotaEntry(project, dept, pool, resource, nominal, borrowing)


def job(
    key,
    project="a",
    amount=1,
    *,
    dept="d",
    minutes=60,
    low=None,
    priority=NORMAL,
    at=0.0,
    running_since=None,
    pool="h100",
    pools=None,
    resource="gpu",
    eligible_at=0.0,
    pods=1,
    nodes=None,
    placed=True,
):
    running = running_since is not None
    return sim.SimJob(
        key=key,
        project=project,
        department=dept,
        pools=tuple(pools or (pool,)),
        resource=resource,
        amount=amount,
        priority=priority,
        submitted_at=at * MIN,
        duration_high=minutes * MIN,
        duration_low=None if low is None else low * MIN,
        started_at=running_since * MIN if running else None,
        running_pool=pool if running else None,
        eligible_at=eligible_at * MIN,
        pods=pods,
        nodes=nodes,
        placed=placed,
    )


def snapshot(
    jobs, quotas, capacity=None, *, caps=(), preemption=True, threshold=None, now=0, nodes=None
):
    """``nodes``: {pool: GPUs per node} turns on node placement there (nodes named n0, n1...)."""
    pools = capacity or {"h100": {"gpu": 8}}
    nodes = nodes or {}

    def named(slug):
        return tuple((f"n{i}", gpus) for i, gpus in enumerate(nodes.get(slug, ())))

    return sim.Snapshot(
        now=now * MIN,
        pools=tuple(sim.Pool(slug, dict(c), nodes=named(slug)) for slug, c in pools.items()),
        quotas=tuple(quotas),
        caps=tuple(caps),
        jobs=tuple(jobs),
        preemption=sim.Preemption(enabled=preemption, borrow_threshold=threshold),
    )


def starts(snap, **kwargs):
    result = sim.simulate(snap, **kwargs)
    return {
        key: (None if o.start is None else round(o.start / MIN))
        for key, o in result.outcomes.items()
    }


CASES = {
    "Kueue admits a job within its guarantee before an older one that must borrow": (
        [
            job("x", amount=4, running_since=-10, minutes=70),
            job("y", amount=4, running_since=-10, minutes=40),
            job("a-old", amount=4, at=-10),
            job("b-new", project="b", amount=4, at=-5),
        ],
        [quota("a", 4, None), quota("b", 4, None)],
        None,
        {"b-new": 30, "a-old": 60},
    ),
    "one job per project per round: another project's borrower goes before a second job": (
        [
            job("b-run", project="b", amount=6, running_since=-10, minutes=40),
            job("a1", amount=4, at=-3, minutes=120),
            job("a2", amount=2, at=-2),
            job("b1", project="b", amount=2, at=-1, minutes=120),
        ],
        [quota("a", 6, None), quota("b", 6, None)],
        {"h100": {"gpu": 12}},
        {"a1": 0, "b1": 0, "a2": 30},
    ),
    "a free pool starts everything at once": (
        [job("x", amount=4), job("y", amount=4, at=1)],
        [quota("a", 8)],
        None,
        {"x": 0, "y": 1},
    ),
    "FIFO: the older of two equal jobs goes first": (
        [
            job("run", amount=8, running_since=-30, minutes=60),
            job("late", amount=8, at=-5, minutes=60),
            job("early", amount=8, at=-10, minutes=60),
        ],
        [quota("a", 8)],
        None,
        {"run": -30, "early": 30, "late": 90},
    ),
    "priority before FIFO": (
        [
            job("run", amount=8, running_since=-30, minutes=60, priority=HIGH_PRIO),
            job("old-normal", amount=8, at=-20, minutes=60),
            job("new-high", amount=8, at=-1, priority=HIGH_PRIO, minutes=60),
        ],
        [quota("a", 8)],
        None,
        {"run": -30, "new-high": 30, "old-normal": 90},
    ),
    "best effort: a small job passes a big one that does not fit": (
        [
            job("run", amount=6, running_since=0, minutes=60),
            job("big", amount=4, at=1),
            job("small", amount=2, at=2),
        ],
        [quota("a", 8)],
        None,
        {"run": 0, "big": 60, "small": 2},
    ),
    "gang all-or-nothing: 2 pods x 4 GPUs wait for 8 free, not 6": (
        [
            job("run", amount=2, running_since=0, minutes=30),
            job("gang", amount=8, at=1),
        ],
        [quota("a", 8)],
        None,
        {"run": 0, "gang": 30},
    ),
    "borrowing: idle nominal of the cohort is lent": (
        [job("x", project="a", amount=8)],
        [quota("a", 4, None), quota("b", 4)],
        None,
        {"x": 0},
    ),
    "borrowing limit bounds what is borrowed": (
        [job("x", project="a", amount=8), job("y", project="a", amount=6, at=1)],
        [quota("a", 4, 2), quota("b", 4)],
        None,
        {"x": None, "y": 1},
    ),
    "no borrowing across departments": (
        [job("x", project="a", amount=8)],
        [quota("a", 4, None), quota("b", 4, dept="other")],
        None,
        {"x": None},
    ),
    "a department cap bounds the maximum": (
        [job("x", project="a", amount=7), job("y", project="a", amount=6, at=1)],
        [quota("a", 4, None), quota("b", 4)],
        None,
        {"x": None, "y": 1},
    ),
    "reclaim: the lender takes back its nominal from a lower-priority borrower": (
        [
            job("borrower", project="b", amount=8, running_since=0, minutes=120, priority=LOW_PRIO),
            job("lender", project="a", amount=4, at=10, priority=NORMAL),
        ],
        [quota("a", 4, None), quota("b", 4, None)],
        None,
        # The borrower is evicted at 10 and starts again when the lender's job ends at 70.
        {"lender": 10, "borrower": 70},
    ),
    "no reclaim from an equal-priority borrower: the lender waits for it to end": (
        [
            job("borrower", project="b", amount=8, running_since=0, minutes=120),
            job("lender", project="a", amount=4, at=10),
        ],
        [quota("a", 4, None), quota("b", 4, None)],
        None,
        {"borrower": 0, "lender": 120},
    ),
    "no reclaim when preemption is off": (
        [
            job("borrower", project="b", amount=8, running_since=0, minutes=120, priority=LOW_PRIO),
            job("lender", project="a", amount=4, at=10),
        ],
        [quota("a", 4, None), quota("b", 4, None)],
        "preemption-off",
        {"borrower": 0, "lender": 120},
    ),
    "within the project a high job preempts a low one": (
        [
            job("low", amount=8, running_since=0, minutes=120, priority=LOW_PRIO),
            job("high", amount=4, at=5, priority=HIGH_PRIO, minutes=30),
        ],
        [quota("a", 8)],
        None,
        {"high": 5, "low": 35},
    ),
    "MIG: slices of a profile are their own resource": (
        [
            job("whole", amount=8, running_since=0, minutes=120),
            job("slice", amount=1, at=1, resource="1g.10gb"),
            job("slice2", amount=7, at=2, resource="1g.10gb"),
        ],
        [quota("a", 8), quota("a", 7, resource="1g.10gb")],
        {"h100": {"gpu": 8, "1g.10gb": 7}},
        {"whole": 0, "slice": 1, "slice2": 61},
    ),
    "MIG: a profile the project has no quota for never starts": (
        [job("slice", amount=1, resource="3g.40gb")],
        [quota("a", 8), quota("a", 7, resource="1g.10gb")],
        {"h100": {"gpu": 8, "1g.10gb": 7, "3g.40gb": 2}},
        {"slice": None},
    ),
    "eligible pools: the first that fits wins": (
        [
            job("run", amount=8, running_since=0, minutes=120, pool="h100"),
            job("either", amount=2, at=1, pools=("h100", "a100")),
        ],
        [quota("a", 8), quota("a", 4, pool="a100")],
        {"h100": {"gpu": 8}, "a100": {"gpu": 4}},
        {"run": 0, "either": 1},
    ),
    "the pool's capacity bounds an over-subscribed quota": (
        [job("x", project="a", amount=6), job("y", project="b", amount=6, at=1)],
        [quota("a", 6), quota("b", 6)],
        None,
        {"x": 0, "y": 60},
    ),
    "a start window: not before it opens": (
        [job("later", amount=1, eligible_at=90)],
        [quota("a", 8)],
        None,
        {"later": 90},
    ),
}


# Node placement: two 8-GPU nodes (n0, n1). Kueue admits on quota; a job starts when each of its
# pods finds a node, the one left fullest (kube-scheduler's MostAllocated, as kubesim scores).
TWO_NODES = {"h100": (8, 8)}
SIXTEEN = {"h100": {"gpu": 16}}
NODE_CASES = {
    "an 8-GPU pod waits for a whole node, not for 8 GPUs anywhere": (
        [
            job("x", amount=4, running_since=-10, minutes=30, nodes=("n0",)),
            job("y", amount=4, running_since=-10, minutes=60, nodes=("n1",)),
            job("big", amount=8, at=0),
        ],
        [quota("a", 16)],
        {"x": -10, "y": -10, "big": 20},
    ),
    "small pods are packed onto one node, keeping the other whole": (
        [job("s1", amount=2, at=0), job("s2", amount=2, at=1), job("big", amount=8, at=2)],
        [quota("a", 16)],
        {"s1": 0, "s2": 1, "big": 2},
    ),
    "an admitted job holds its quota while its pod waits for a node": (
        [
            job("x", amount=4, running_since=0, minutes=30, nodes=("n0",)),
            job("y", amount=4, running_since=0, minutes=60, nodes=("n1",)),
            job("big", amount=8, at=1),
            job("small", amount=4, at=2),
        ],
        [quota("a", 16)],
        {"big": 30, "small": 30},
    ),
    "a quota larger than the nodes: admitted jobs queue at the nodes in priority order": (
        [
            job("run", project="b", amount=8, running_since=0, minutes=30, dept="e", pods=2),
            job("first", amount=8, at=1),
            job("second", amount=8, at=2),
            job("urgent", amount=8, at=3, priority=HIGH_PRIO),
        ],
        [quota("a", 24), quota("b", 8, dept="e")],
        {"run": 0, "first": 1, "urgent": 30, "second": 61},
    ),
    "a gang's pods are placed all or none, each on a node of its own when it must be": (
        [
            job("x", amount=4, running_since=0, minutes=30, nodes=("n0",)),
            job("gang", amount=16, pods=2, at=1),
        ],
        [quota("a", 16)],
        {"gang": 30},
    ),
    "a pod larger than every node never starts": (
        [job("huge", amount=16, at=0), job("pair", amount=16, pods=2, at=1)],
        [quota("a", 16)],
        {"huge": None, "pair": 1},
    ),
    "an admitted job whose pods wait in the snapshot starts when a node frees": (
        [
            job("x", amount=8, running_since=-10, minutes=20, nodes=("n0",)),
            job("y", amount=4, running_since=-10, minutes=60, nodes=("n1",)),
            job("waiting", amount=8, running_since=-2, placed=False),
            job("queued", amount=4, at=-1),
        ],
        [quota("a", 24)],
        {"waiting": 10, "queued": 0},
    ),
}


@pytest.mark.parametrize("name", list(NODE_CASES))
def test_node_placement(name):
    jobs, quotas, expected = NODE_CASES[name]
    got = starts(snapshot(jobs, quotas, SIXTEEN, nodes=TWO_NODES))
    assert {k: got[k] for k in expected} == expected


def test_a_pod_larger_than_every_node_is_never_possible():
    snap = snapshot([], [quota("a", 16)], SIXTEEN, nodes=TWO_NODES)
    assert not sim.forecast(snap, job("huge", amount=16)).possible
    assert sim.forecast(snap, job("pair", amount=16, pods=2)).starts_now


@pytest.mark.parametrize("name", list(CASES))
def test_admission_order(name):
    jobs, quotas, capacity, expected = CASES[name]
    caps = ()
    preemption = True
    if capacity == "preemption-off":
        capacity, preemption = None, False
    if name == "a department cap bounds the maximum":
        caps = (DepartmentCap("d", "h100", "gpu", 6),)
    got = starts(snapshot(jobs, quotas, capacity, caps=caps, preemption=preemption))
    assert {k: got[k] for k in expected} == expected


def test_a_preempted_job_is_counted_and_requeued():
    snap = snapshot(
        [
            job("borrower", project="b", amount=8, running_since=0, minutes=120, priority=LOW_PRIO),
            job("lender", project="a", amount=4, at=10),
        ],
        [quota("a", 4, None), quota("b", 4, None)],
    )
    result = sim.simulate(snap)
    assert result.outcomes["borrower"].preemptions == 1
    assert result.outcomes["lender"].borrowed == 0


def test_borrowed_units_are_recorded():
    snap = snapshot([job("x", project="a", amount=6)], [quota("a", 4, None), quota("b", 4)])
    assert sim.simulate(snap).outcomes["x"].borrowed == 2


def test_the_borrow_threshold_protects_a_higher_borrower():
    # a (4 nominal) asks 6 (borrowing 2): it may evict b's borrowers only up to the threshold.
    jobs = [
        job("b-run", project="b", amount=6, running_since=0, minutes=120, priority=NORMAL),
        job("a-big", project="a", amount=6, at=1, priority=HIGH_PRIO),
    ]
    quotas = [quota("a", 4, None), quota("b", 4, None)]
    protected = starts(snapshot(jobs, quotas, threshold=LOW_PRIO))
    assert protected["a-big"] == 120
    allowed = starts(snapshot(jobs, quotas, threshold=NORMAL))
    assert allowed["a-big"] == 1


def test_forecast_range_and_text():
    jobs = [job("run", amount=8, running_since=-10, minutes=40, low=20)]
    snap = snapshot(jobs, [quota("a", 8)])
    probe = job("probe", amount=4)
    result = sim.forecast(snap, probe)
    assert (result.low, result.high) == (10 * MIN, 30 * MIN)
    assert result.text == "likely to start in 10–30 min"


def test_forecast_now_and_never_and_beyond_the_horizon():
    quotas = [quota("a", 8)]
    assert sim.forecast(snapshot([], quotas), job("p", amount=2)).text == "now"
    never = sim.forecast(snapshot([], quotas), job("p", amount=16))
    assert not never.possible
    assert never.text.startswith("never")
    busy = snapshot([job("run", amount=8, running_since=0, minutes=48 * 60)], quotas)
    assert sim.forecast(busy, job("p", amount=2)).text == "not within 24 h at today's load"


def test_forecast_of_a_queued_job_counts_the_jobs_ahead():
    jobs = [
        job("run", amount=8, running_since=0, minutes=60),
        job("ahead", amount=8, at=1, minutes=60),
        job("mine", amount=8, at=2, minutes=60),
    ]
    result = sim.forecast(snapshot(jobs, [quota("a", 8)], now=5), jobs[2])
    assert result.high == (120 - 5) * MIN


# The late end expects the last window's higher-priority submissions to go on at the same rate
# (spread evenly over each window): 8 GPUs, a running 8-GPU job ending at 30 min (20 early),
# the probe asks for 8. (recent submissions as (priority, minutes), window) → (low, high).
ARRIVAL_CASES = {
    "nothing came lately": ([], 60, (20, 30)),
    "one high job an hour comes at 30, runs 20 min first": ([(HIGH_PRIO, 20)], 60, (20, 50)),
    "two an hour: the one at 15 evicts the running job, the probe follows it": (
        [(HIGH_PRIO, 20)] * 2,
        60,
        (20, 35),
    ),
    "jobs of the probe's priority queue behind it": ([(NORMAL, 20)] * 3, 60, (20, 30)),
    "and lower ones too": ([(LOW_PRIO, 20)], 60, (20, 30)),
    "a window of 0 expects nothing": ([(HIGH_PRIO, 20)], 0, (20, 30)),
    "as many as the quota holds: never within the horizon": ([(HIGH_PRIO, 60)], 60, (20, None)),
}


@pytest.mark.parametrize("name", ARRIVAL_CASES)
def test_the_late_end_expects_higher_priority_submissions_at_the_last_windows_rate(name):
    recent, window, expected = ARRIVAL_CASES[name]
    snap = snapshot([job("run", amount=8, running_since=-10, minutes=40, low=30)], [quota("a", 8)])
    snap = replace(
        snap,
        recent=tuple(
            job(f"r{i}", amount=8, priority=priority, minutes=minutes, at=-5 - i)
            for i, (priority, minutes) in enumerate(recent)
        ),
        arrival_window=window * MIN,
    )
    result = sim.forecast(snap, job("probe", amount=8))
    minutes = tuple(None if v is None else round(v / MIN) for v in (result.low, result.high))
    assert minutes == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(30, "1 min"), (25 * 60, "25 min"), (3 * 3600, "3 h"), (130 * 60, "2 h 10 min"),
     (50 * 3600, "2 d 2 h")],
)  # fmt: skip
def test_duration_text(seconds, text):
    assert sim.duration_text(seconds) == text


# --- the fast run against the plain reference ------------------------------------------------
# The simulation lets a shape that failed sleep until something it depends on changes; the
# reference run (``_reference=True``) tries every waiting job after every admission. Random
# small clusters with everything at once (pools, MIG, gangs' sizes, borrowing limits, three
# priorities, start windows, a borrow threshold, preemption on and off) must give the same
# outcomes, preemptions and borrowing included.
def _random_snapshot(rng):
    pools = ["a", "b"][: rng.choice([1, 1, 2])]
    projects = [(f"p{i}", f"d{i % 2}") for i in range(rng.randint(2, 4))]
    quotas = [
        QuotaEntry(project, dept, pool, resource, rng.randint(0, 6), rng.choice([None, 0, 2, 4]))
        for project, dept in projects
        for pool in pools
        for resource in ("gpu", "1g.10gb")
    ]
    capacity = {p: {"gpu": rng.randint(4, 14), "1g.10gb": rng.randint(2, 8)} for p in pools}
    # Some pools place whole GPUs on nodes (of 4 or 8 GPUs).
    nodes = {
        p: tuple((f"{p}{n}", rng.choice([4, 8])) for n in range(rng.randint(1, 3)))
        for p in pools
        if rng.random() < 0.5
    }
    jobs = []
    for i in range(rng.randint(5, 40)):
        project, dept = rng.choice(projects)
        eligible = tuple(rng.sample(pools, rng.randint(1, len(pools))))
        minutes = rng.choice([5, 10, 30, 60, 90])
        running = rng.random() < 0.3
        submitted = rng.randint(-30, 60)
        since = rng.randint(-60, 0) if running else None
        pods, per_pod = rng.choice([(1, 1), (1, 1), (1, 2), (1, 3), (1, 4), (1, 8), (2, 2), (2, 4)])
        jobs.append(
            job(
                f"j{i}",
                project=project,
                dept=dept,
                amount=pods * per_pod,
                pods=pods,
                placed=not running or rng.random() < 0.8,
                minutes=minutes,
                low=minutes / 2,
                priority=rng.choice([LOW_PRIO, NORMAL, HIGH_PRIO]),
                at=min(submitted, since) if running else submitted,
                running_since=since,
                pool=eligible[0],
                pools=eligible,
                resource=rng.choice(["gpu", "gpu", "1g.10gb"]),
                eligible_at=rng.choice([0, 0, 20]),
            )
        )
    return sim.Snapshot(
        now=0.0,
        pools=tuple(sim.Pool(slug, c, nodes=nodes.get(slug, ())) for slug, c in capacity.items()),
        quotas=tuple(quotas),
        jobs=tuple(jobs),
        preemption=sim.Preemption(
            enabled=rng.random() < 0.8, borrow_threshold=rng.choice([None, None, LOW_PRIO, NORMAL])
        ),
    )


def _outcomes(result):
    return {
        k: (o.start, o.end, o.pool, o.preemptions, o.borrowed) for k, o in result.outcomes.items()
    }


@pytest.mark.parametrize("block", range(4))
def test_the_fast_run_equals_the_reference_run(block):
    import random

    for seed in range(block * 100, block * 100 + 100):
        snap = _random_snapshot(random.Random(seed))
        for scenario in (sim.HIGH, sim.LOW):
            fast = _outcomes(sim.simulate(snap, scenario=scenario))
            plain = _outcomes(sim.simulate(snap, scenario=scenario, _reference=True))
            assert fast == plain, f"seed {seed}, scenario {scenario}"


def test_preemption_made_possible_by_an_end_is_not_missed():
    # "high" needs 3 of the pool's 4 GPUs; 3 are taken, 1 of them by a lower-priority job of
    # its own project: evicting it is not enough. When "short" ends at 10, it is: "high" evicts
    # "low" then, rather than waiting for "low" or "long" to end.
    jobs = [
        job("short", project="b", dept="e", amount=1, running_since=0, minutes=10),
        job("long", project="b", dept="e", amount=1, running_since=0, minutes=200),
        job("low", amount=1, running_since=0, minutes=120, priority=LOW_PRIO),
        job("high", amount=3, at=1, priority=HIGH_PRIO),
    ]
    quotas = [quota("a", 4), quota("b", 2, dept="e")]
    got = starts(snapshot(jobs, quotas, {"h100": {"gpu": 4}}))
    assert got["high"] == 10


def test_a_later_start_window_is_when_the_queue_ahead_has_drained():
    jobs = [
        job("run", amount=8, running_since=0, minutes=60),
        job("ahead", amount=4, at=1, minutes=30),
        job("mine", amount=4, at=2, minutes=30),
    ]
    snap = snapshot(jobs, [quota("a", 8)], now=5)
    # "ahead" and "mine" both start at 60 ("ahead" ends at 90): submitted at 60 or later, a
    # 4-GPU request starts at once; a 6-GPU one must wait for "ahead" to end.
    assert sim.earliest_free_start(snap, jobs[2]) == (60 - 5) * MIN
    big = job("mine", amount=6, at=2, minutes=30)
    assert sim.earliest_free_start(snap, big) == (90 - 5) * MIN
    assert sim.earliest_free_start(snap, job("mine", amount=16)) is None
