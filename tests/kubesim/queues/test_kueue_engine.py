"""Kueue's admission arithmetic without a server: quota, borrowing, preemption, queue order."""

from __future__ import annotations

from kubesim.controllers.kueue.engine import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_RECLAMATION,
    ClusterQueue,
    Flavor,
    KueueEngine,
    PodSet,
    ResourceGroup,
    ResourceQuota,
    Workload,
)
from kubesim.controllers.kueue.quantity import format_milli, requests_of_pod_spec, to_milli

GPU = "nvidia.com/gpu"


def make_cq(name, gpus, *, cohort=None, borrowing=None, lending=None, flavors=("h100",), **kw):
    quotas = {}
    for i, flavor in enumerate(flavors):
        n = gpus if isinstance(gpus, int) else gpus[i]
        quotas[(flavor, GPU)] = ResourceQuota(
            to_milli(n),
            None if borrowing is None else to_milli(borrowing),
            None if lending is None else to_milli(lending),
        )
    return ClusterQueue(
        name=name,
        cohort=cohort,
        groups=[ResourceGroup([GPU], list(flavors))],
        quotas=quotas,
        **kw,
    )


def make_wl(name, gpus, *, cq="cq", priority=0, ts=0.0, count=1):
    return Workload(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        cluster_queue=cq,
        local_queue="lq",
        priority=priority,
        timestamp=ts,
        podsets=[PodSet("main", count, {GPU: to_milli(gpus)})],
        job_uid=f"job-{name}",
    )


def engine_with(*cqs, flavors=("h100",)):
    engine = KueueEngine()
    engine.set_config(list(cqs), [Flavor(f) for f in flavors])
    return engine


def test_quantities_round_trip():
    assert to_milli("500m") == 500
    assert to_milli("36Gi") == 36 * 2**30 * 1000
    assert format_milli("memory", to_milli("36Gi")) == "36Gi"
    assert format_milli("cpu", to_milli("1500m")) == "1500m"
    assert format_milli(GPU, to_milli(2)) == "2"
    spec = {"containers": [{"resources": {"limits": {GPU: "2"}, "requests": {"cpu": "1"}}}]}
    assert requests_of_pod_spec(spec) == {GPU: 2000, "cpu": 1000}


def test_admits_within_nominal_then_reports_shortfall_like_kueue():
    engine = engine_with(make_cq("cq", 4))
    engine.upsert(make_wl("a", 3, ts=1))
    engine.upsert(make_wl("b", 3, ts=2))
    decisions = engine.schedule(now=10)
    by_name = {d.workload.name: d for d in decisions}
    assert by_name["a"].kind == "admit"
    assert by_name["a"].assignment.podsets[0].flavors == {GPU: "h100"}
    assert by_name["b"].kind == "pending"
    assert by_name["b"].message == (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu "
        "in flavor h100, 2 more needed"
    )
    # Nothing changed: the next cycle has no new decision for b.
    assert engine.schedule(now=11) == []


def test_uncovered_resource_and_over_maximum_messages():
    engine = engine_with(make_cq("cq", 4))
    wl = make_wl("a", 1)
    wl.podsets[0].requests["cpu"] = 1000
    engine.upsert(wl)
    engine.upsert(make_wl("big", 9, ts=2))
    messages = {d.workload.name: d.message for d in engine.schedule(now=1)}
    assert messages["a"] == (
        "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue"
    )
    assert messages["big"] == (
        "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in "
        "flavor h100, previously considered podsets requests (0) + current podset request (9) "
        "> maximum capacity (4)"
    )


def test_second_flavor_used_when_first_is_full():
    engine = engine_with(make_cq("cq", (1, 2), flavors=("h100", "a100")), flavors=("h100", "a100"))
    engine.upsert(make_wl("a", 1, ts=1))
    engine.upsert(make_wl("b", 2, ts=2))
    decisions = {d.workload.name: d for d in engine.schedule(now=1)}
    assert decisions["a"].assignment.podsets[0].flavors == {GPU: "h100"}
    assert decisions["b"].assignment.podsets[0].flavors == {GPU: "a100"}


def test_priority_then_fifo_order_and_strict_fifo_blocks():
    engine = engine_with(make_cq("cq", 2, strategy="StrictFIFO"))
    engine.upsert(make_wl("old-low", 1, priority=0, ts=1))
    engine.upsert(make_wl("new-high", 2, priority=100, ts=5))
    engine.upsert(make_wl("newer-low", 1, priority=0, ts=6))
    decisions = engine.schedule(now=1)
    assert [d.workload.name for d in decisions if d.kind == "admit"] == ["new-high"]
    assert [w.name for w in engine.pending_in("cq")] == ["old-low", "newer-low"]


def test_best_effort_fifo_skips_a_head_that_does_not_fit():
    engine = engine_with(make_cq("cq", 2))
    engine.upsert(make_wl("big", 3, priority=100, ts=1))
    engine.upsert(make_wl("small", 1, ts=2))
    admitted = [d.workload.name for d in engine.schedule(now=1) if d.kind == "admit"]
    assert admitted == ["small"]


def test_borrowing_limits_and_lending_limit():
    lender = make_cq("lender", 4, cohort="co", lending=2)
    borrower = make_cq("borrower", 0, cohort="co", borrowing=3)
    engine = engine_with(lender, borrower)
    engine.upsert(make_wl("b1", 3, cq="borrower", ts=1))
    decisions = {d.workload.name: d for d in engine.schedule(now=1)}
    # Only 2 of the lender's 4 GPUs may be lent.
    assert decisions["b1"].kind == "pending"
    assert decisions["b1"].message.endswith("> maximum capacity (2)")
    engine.remove(("ns", "b1"))
    engine.upsert(make_wl("b2", 2, cq="borrower", ts=2))
    assert [d.kind for d in engine.schedule(now=2)] == ["admit"]
    assert engine.cluster_queues["borrower"].borrowing_in({("h100", GPU)})


def test_reclaim_within_cohort_preempts_the_borrower():
    lender = make_cq("lender", 4, cohort="co", reclaim_within_cohort="Any")
    borrower = make_cq("borrower", 0, cohort="co")
    engine = engine_with(lender, borrower)
    engine.upsert(make_wl("borrowed", 4, cq="borrower", ts=1))
    assert [d.kind for d in engine.schedule(now=1)] == ["admit"]
    engine.upsert(make_wl("owner", 2, cq="lender", ts=2))
    (decision,) = engine.schedule(now=2)
    assert decision.kind == "preempting"
    assert [(t.workload.name, t.reason) for t in decision.targets] == [
        ("borrowed", IN_COHORT_RECLAMATION)
    ]
    assert decision.message.endswith(". Pending the preemption of 1 workload(s)")
    engine.release(("ns", "borrowed"))
    kinds = {d.workload.name: d.kind for d in engine.schedule(now=3)}
    assert kinds["owner"] == "admit"


def test_within_cluster_queue_preempts_lowest_priority_newest_first_minimal_set():
    engine = engine_with(make_cq("cq", 4, within_cluster_queue="LowerPriority"))
    engine.upsert(make_wl("low-old", 2, priority=1, ts=1))
    engine.schedule(now=1)
    engine.upsert(make_wl("low-new", 2, priority=1, ts=2))
    engine.schedule(now=2)
    engine.upsert(make_wl("high", 2, priority=10, ts=3))
    (decision,) = engine.schedule(now=3)
    assert decision.kind == "preempting"
    assert [(t.workload.name, t.reason) for t in decision.targets] == [
        ("low-new", IN_CLUSTER_QUEUE)
    ]


def test_no_preemption_of_equal_priority():
    engine = engine_with(make_cq("cq", 2, within_cluster_queue="LowerPriority"))
    engine.upsert(make_wl("a", 2, priority=5, ts=1))
    engine.schedule(now=1)
    engine.upsert(make_wl("b", 2, priority=5, ts=2))
    (decision,) = engine.schedule(now=2)
    assert decision.kind == "pending"


# ---- the portal's policy (quotas.manifests.preemption_policy) as Kueue v0.19 applies it -------
PORTAL_POLICY = {
    "within_cluster_queue": "LowerPriority",
    "reclaim_within_cohort": "LowerPriority",
    "borrow_within_cohort": "LowerPriority",
    "borrow_max_priority": 500,
}
HIGH, NORMAL, LOW = 1000, 500, 100


def lender_and_borrower(**policy):
    lender = make_cq("lender", 8, cohort="co", **policy)
    borrower = make_cq("borrower", 0, cohort="co", **policy)
    return engine_with(lender, borrower)


def borrow_then_claim(engine, borrower_priority, lender_priority):
    engine.upsert(make_wl("borrowed", 8, cq="borrower", priority=borrower_priority, ts=1))
    assert [d.kind for d in engine.schedule(now=1)] == ["admit"]
    engine.upsert(make_wl("owner", 8, cq="lender", priority=lender_priority, ts=2))
    (decision,) = engine.schedule(now=2)
    return decision


def test_a_lender_does_not_reclaim_from_a_high_priority_borrower():
    decision = borrow_then_claim(lender_and_borrower(**PORTAL_POLICY), HIGH, NORMAL)
    assert decision.kind == "pending"
    # Even the lender's own high job waits: LowerPriority never takes an equal priority.
    decision = borrow_then_claim(lender_and_borrower(**PORTAL_POLICY), HIGH, HIGH)
    assert decision.kind == "pending"


def test_a_lender_reclaims_from_a_low_priority_borrower():
    decision = borrow_then_claim(lender_and_borrower(**PORTAL_POLICY), LOW, NORMAL)
    assert decision.kind == "preempting"
    assert [(t.workload.name, t.reason) for t in decision.targets] == [
        ("borrowed", IN_COHORT_RECLAMATION)
    ]


def test_reclaim_any_would_evict_the_high_priority_borrower():
    decision = borrow_then_claim(
        lender_and_borrower(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority"),
        HIGH,
        LOW,
    )
    assert decision.kind == "preempting"
    assert [t.workload.name for t in decision.targets] == ["borrowed"]


def _two_borrowers(victim_priority, **policy):
    # idle owns 8 and lends them; "a" borrows 4 of them, then "b" wants 8 while borrowing.
    idle = make_cq("idle", 8, cohort="co", **policy)
    a = make_cq("a", 0, cohort="co", **policy)
    b = make_cq("b", 0, cohort="co", **policy)
    engine = engine_with(idle, a, b)
    engine.upsert(make_wl("a-job", 4, cq="a", priority=victim_priority, ts=1))
    assert [d.kind for d in engine.schedule(now=1)] == ["admit"]
    engine.upsert(make_wl("b-job", 8, cq="b", priority=HIGH, ts=2))
    (decision,) = engine.schedule(now=2)
    return decision


def test_borrow_within_cohort_takes_lower_borrowers_up_to_the_threshold():
    decision = _two_borrowers(LOW, **PORTAL_POLICY)
    assert decision.kind == "preempting"
    assert [(t.workload.name, t.reason) for t in decision.targets] == [
        ("a-job", "InCohortReclaimWhileBorrowing")
    ]
    # Above maxPriorityThreshold (a protected class) it is never taken by a borrower.
    policy = {**PORTAL_POLICY, "borrow_max_priority": 100}
    assert _two_borrowers(NORMAL, **policy).kind == "pending"
    # Without borrowWithinCohort a borrower preempts nobody in other ClusterQueues.
    policy = {**PORTAL_POLICY, "borrow_within_cohort": "Never", "borrow_max_priority": None}
    assert _two_borrowers(LOW, **policy).kind == "pending"


def test_reclaim_takes_the_lowest_priority_borrowed_work_first_and_stops_at_nominal():
    engine = engine_with(
        make_cq("lender", 8, cohort="co", **PORTAL_POLICY),
        make_cq("borrower", 4, cohort="co", **PORTAL_POLICY),
    )
    engine.upsert(make_wl("b-normal", 4, cq="borrower", priority=NORMAL, ts=1))
    engine.upsert(make_wl("b-low", 4, cq="borrower", priority=LOW, ts=2))
    engine.upsert(make_wl("b-low2", 4, cq="borrower", priority=LOW, ts=3))
    engine.schedule(now=3)
    engine.upsert(make_wl("owner", 8, cq="lender", priority=HIGH, ts=4))
    (decision,) = engine.schedule(now=4)
    assert decision.kind == "preempting"
    # The borrower is 8 above its nominal 4: both low jobs go, the normal one (within its
    # nominal once they are gone) stays.
    assert sorted(t.workload.name for t in decision.targets) == ["b-low", "b-low2"]
