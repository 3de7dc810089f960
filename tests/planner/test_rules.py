"""The planner's pure rules: run-time estimates, right-sizing, the what-if's figures, advice
candidates' sizes."""

from __future__ import annotations

import pytest

from planner import estimates, rightsizing, whatif
from planner import simulation as sim
from planner.advice import _sizes_below

H100 = "NVIDIA-H100-80GB-HBM3"
GIB = 1024


@pytest.mark.parametrize(
    ("history", "low", "high"),
    [
        ([], 900.0, 3600.0),  # no history: a quarter of the maximum runtime .. all of it
        ([600, 600], 900.0, 3600.0),  # too little history
        ([600, 600, 1200], 600.0, 1080.0),
        ([100, 200, 300, 400, 9000], 200.0, 3600.0),  # never beyond the maximum runtime
    ],
)
def test_estimates(history, low, high):
    got = estimates.estimate_duration(max_runtime_seconds=3600, history=history)
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))


def usage(**kw):
    base = {
        "gpus": 1,
        "pods": 1,
        "gpu_model": H100,
        "util_mean": 22.0,
        "fb_peak_mib": 18 * GIB,
        "fb_total_mib": 80 * GIB,
        "gpu_hours": 10.0,
    }
    return rightsizing.Usage(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "offered", "expected"),
    [
        ({}, (), "a 3g.40gb slice would have fit"),
        ({"fb_peak_mib": 5 * GIB, "util_mean": 10.0}, (), "a 1g.10gb slice would have fit"),
        # The pool offers only 1g.10gb and 3g.40gb: 2g.20gb is never named.
        ({"fb_peak_mib": 14 * GIB, "util_mean": 20.0}, ("1g.10gb", "3g.40gb"), "a 3g.40gb"),
        ({"fb_peak_mib": 70 * GIB, "util_mean": 22.0}, (), None),  # needs the whole memory
        ({"util_mean": 95.0}, (), None),  # busy
        ({"util_mean": None}, (), None),  # no evidence
        ({"gpu_model": "NVIDIA-L40S"}, (), None),  # no MIG on this model
        ({"gpus": 8, "util_mean": 20.0}, (), "2 GPUs would have been enough"),
        ({"gpus": 8, "util_mean": 90.0}, (), None),
        ({"gpus": 2, "pods": 2, "util_mean": 5.0}, (), None),  # gangs are left alone
    ],
)
def test_right_sizing(kw, offered, expected):
    found = rightsizing.suggest(usage(**kw), offered_profiles=offered)
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert found.describe().startswith(expected)


def test_right_sizing_evidence_and_month():
    assert rightsizing.evidence_text(usage()) == "peak memory 18 GiB of 80 and utilisation 22 %"
    rows = [(usage(), rightsizing.suggest(usage())), (usage(util_mean=95.0), None)]
    month = rightsizing.project_month(rows)
    assert (month.jobs, month.oversized_jobs) == (2, 1)
    assert month.gpu_hours == 20.0
    assert month.oversized_gpu_hours == 10.0
    assert month.saved_gpu_hours == pytest.approx(10.0 * 4 / 7)  # a 3g slice holds 3/7


@pytest.mark.parametrize(
    ("gpus", "sizes"), [(1, []), (2, [1]), (4, [2, 1]), (8, [4, 2, 1]), (6, [3, 1])]
)
def test_fewer_gpus_to_try(gpus, sizes):
    assert _sizes_below(gpus) == sizes


def test_whatif_figures():
    def job(key, project, submitted, amount=2):
        return sim.SimJob(key, project, "d", ("p",), "gpu", amount, 100, submitted, 3600.0)

    period = (0.0, 10 * 3600.0)
    rows = [
        (job("a", "x", 0.0), 0.0, 3600.0, 0, 0),
        (job("b", "x", 0.0), 7200.0, 10800.0, 1, 1),
        (job("c", "x", 9.5 * 3600), 9.5 * 3600, 11 * 3600.0, 0, 0),  # half in the period
        (job("d", "y", 0.0), None, None, 0, 0),  # never started
    ]
    got = whatif.figures(rows, period)
    x = got["x"]
    assert x.jobs == 3
    assert x.wait_median == 0.0
    assert x.wait_p90 == pytest.approx(0.8 * 7200)
    assert x.gpu_hours == pytest.approx(2 + 2 + 1)
    assert x.borrowed_gpu_hours == pytest.approx(1.0)
    assert x.preemptions == 1
    assert got["y"].not_started == 1
    assert got["y"].wait_p90 is None


def test_a_proposal_replaces_rows_and_a_zero_row_removes_one():
    from quotas.arithmetic import QuotaEntry

    current = [QuotaEntry("x", "d", "p", "gpu", 2, None), QuotaEntry("y", "d", "p", "gpu", 4, 0)]
    proposal = [QuotaEntry("x", "d", "p", "gpu", 8, 0), QuotaEntry("y", "d", "p", "gpu", 0, 0)]
    assert whatif.apply_proposal(current, proposal) == [QuotaEntry("x", "d", "p", "gpu", 8, 0)]
