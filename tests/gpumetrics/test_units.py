"""Pure parts of GPU metrics: attribution, the block codec, rollups and the summary figures."""

import math

import pytest

from gpumetrics import codec
from gpumetrics.attribution import JobFacts, attribute, job_id_from_pod
from gpumetrics.idle import idle_verdict
from gpumetrics.parsing import DeviceKey, DeviceReading
from gpumetrics.series import UTIL, WIDTH, xid_meaning
from gpumetrics.services import devices_expected, slot, summary_from_rows


def reading(uuid, pod="", namespace="", gi="", node="n1", util=50.0):
    return DeviceReading(
        key=DeviceKey(node, uuid, gi), namespace=namespace, pod=pod, fields={UTIL: util}
    )


@pytest.mark.parametrize(
    ("pod", "job_id"),
    [
        ("gp-job-11-x7k2p", 11),
        ("gp-job-7-master-0", 7),
        ("gp-job-7-worker-1", 7),
        ("gp-job-12", 12),
        ("gp-job-1x-abc", None),
        ("my-gp-job-3-abc", None),
        ("trainer", None),
        ("", None),
    ],
)
def test_job_id_from_pod_name(pod, job_id):
    assert job_id_from_pod(pod) == job_id


def test_readings_go_to_the_job_whose_pod_and_namespace_match():
    jobs = {11: JobFacts(11, "gp-alpha", 1), 12: JobFacts(12, "gp-beta", 1)}
    out = attribute(
        [
            reading("GPU-a", "gp-job-11-abc", "gp-alpha"),
            reading("GPU-b", "gp-job-12-abc", "gp-alpha"),  # job 12 lives in gp-beta
            reading("GPU-c", "gp-job-99-abc", "gp-alpha"),  # no such job
            reading("GPU-d", "someone-else", "default", util=30.0),
            reading("GPU-e", util=0.0),
        ],
        jobs,
    )
    assert {j: [r.key.uuid for r in rs] for j, rs in out.by_job.items()} == {11: ["GPU-a"]}
    total = out.unattributed["n1"]
    assert (total.devices, total.held_by_others, total.util_sum) == (4, 3, 50 + 50 + 30 + 0)
    assert out.warnings == {}


def test_mig_instances_are_told_apart_by_gpu_instance_id():
    jobs = {1: JobFacts(1, "ns", 1), 2: JobFacts(2, "ns", 1)}
    out = attribute(
        [
            reading("GPU-m", "gp-job-1-a", "ns", gi="7"),
            reading("GPU-m", "gp-job-2-a", "ns", gi="8"),
        ],
        jobs,
    )
    assert [r.key.gi_id for r in out.by_job[1]] == ["7"]
    assert [r.key.gi_id for r in out.by_job[2]] == ["8"]
    assert out.warnings == {}


def test_isolation_check_more_devices_than_asked_for():
    out = attribute(
        [reading("GPU-a", "gp-job-5-a", "ns"), reading("GPU-b", "gp-job-5-a", "ns")],
        {5: JobFacts(5, "ns", 1)},
    )
    (message,) = out.warnings[5]
    assert "asked for 1 GPU device(s) but shows up on 2" in message


def test_isolation_check_one_device_in_two_jobs():
    out = attribute(
        [
            reading("GPU-a", "gp-job-5-a", "ns", node="n1"),
            reading("GPU-a", "gp-job-6-a", "ns", node="n2"),
        ],
        {5: JobFacts(5, "ns", 1), 6: JobFacts(6, "ns", 1)},
    )
    assert "in this job and in job(s) 6" in out.warnings[5][0]
    assert "in this job and in job(s) 5" in out.warnings[6][0]


@pytest.mark.parametrize(
    ("shared", "warned"),
    [((True, True), False), ((True, False), True), ((False, False), True)],
)
def test_isolation_check_knows_the_pools_sharing_mode(shared, warned):
    """Two jobs on one GPU are expected in a time-slicing/MPS pool, not otherwise."""
    out = attribute(
        [reading("GPU-a", "gp-job-5-a", "ns"), reading("GPU-a", "gp-job-6-a", "ns")],
        {5: JobFacts(5, "ns", 1, shared=shared[0]), 6: JobFacts(6, "ns", 1, shared=shared[1])},
    )
    assert bool(out.warnings) == warned


def test_devices_expected_per_kind():
    assert devices_expected("single", 1, 1) == 1
    assert devices_expected("single", 8, 1) == 8
    assert devices_expected("mig", 0, 1) == 1
    assert devices_expected("gang", 2, 4) == 8


def test_xid_meanings_for_the_common_codes():
    for code in (13, 31, 43, 48, 63, 64, 74, 79, 94, 95):
        assert "unknown" not in xid_meaning(code)
    assert "fallen off the bus" in xid_meaning(79)
    assert "unknown" in xid_meaning(12345)


def test_slot_is_shared_by_sweeps_in_one_period():
    assert slot(1000.2, 15) == slot(1004.9, 15) == 990
    assert slot(1005, 15) == 1005


def test_codec_roundtrip_append_and_dedupe():
    start = codec.block_start(7300, codec.RAW)
    assert start == 7200
    rows = [(7200 + 15 * i, [float(i)] * WIDTH) for i in range(4)]
    ts, vals = b"", b""
    for row in rows:  # appended one sample at a time, as the sweep does
        a, b = codec.encode(start, codec.RAW, [row])
        ts, vals = ts + a, vals + b
    assert len(ts) + len(vals) == 4 * (2 + 4 * WIDTH)
    times, values = codec.decode(start, codec.RAW, ts, vals)
    assert times == [t for t, _ in rows]
    assert values[WIDTH * 3] == 3.0
    # the same scrape appended twice (two overlapping sweeps) is read once
    a, b = codec.encode(start, codec.RAW, [rows[1]])
    times2, _ = codec.decode(start, codec.RAW, ts + a, vals + b)
    assert times2 == times
    with pytest.raises(ValueError, match="outside the block"):
        codec.encode(start, codec.RAW, [(start - 1, [0.0] * WIDTH)])


def test_rollup_mean_and_max_and_weighted_rollup_of_rollups():
    nan = math.nan
    times = [0, 15, 30, 45, 60, 75]
    util = [10.0, 20.0, 30.0, nan, 100.0, 0.0]
    flat = []
    for u in util:
        flat += [u] + [1.0] * (WIDTH - 1)
    minutes = codec.rollup(times, flat, src_width=WIDTH, step=60, weighted=False)
    assert [t for t, _ in minutes] == [0, 60]
    first = minutes[0][1]
    assert first[0] == 4  # raw samples in the minute
    assert first[1] == pytest.approx(20.0)  # NaN left out of the mean
    assert first[1 + WIDTH] == 30.0
    flat_m = [v for _, row in minutes for v in row]
    (hour,) = codec.rollup([0, 60], flat_m, src_width=codec.ROLLUP_WIDTH, step=3600, weighted=True)
    assert hour[1][0] == 6
    assert hour[1][1] == pytest.approx((20.0 * 4 + 50.0 * 2) / 6)
    assert hour[1][1 + WIDTH] == 100.0


def test_summary_figures_and_the_idle_flag():
    def rows(utils, power=300.0):
        return [
            (i * 15, [u, 0.0, 1000.0, 80000.0, power, 50.0, 1980.0]) for i, u in enumerate(utils)
        ]

    busy = summary_from_rows(
        [(1.0, rows([90.0] * 23 + [10.0]))], period=15, threshold=10.0, held_seconds=3600
    )
    assert busy["util_mean"] == pytest.approx((90.0 * 23 + 10.0) / 24)
    assert busy["util_p95"] == 90.0
    assert busy["idle"] is False
    assert busy["fb_peak_mib"] == 1000.0
    assert busy["fb_total_mib"] == 80000.0
    assert busy["energy_kwh"] == pytest.approx(300.0 * 15 * 24 / 3.6e6)
    assert busy["gpu_hours"] == 1.0
    assert busy["idle_verdict"] == "busy"
    idle = summary_from_rows(
        [(1.0, rows([0.0] * 18 + [80.0] * 6))], period=15, threshold=10.0, held_seconds=360
    )
    assert idle["idle"] is True
    assert idle["idle_verdict"] == "idle"
    assert idle["idle_fraction"] == 0.75
    empty = summary_from_rows([], period=15, threshold=10.0, held_seconds=0)
    assert empty["idle"] is False
    assert empty["idle_verdict"] == "too_short"
    assert empty["util_mean"] is None


def test_an_eight_gpu_job_read_once_at_start_up_is_too_short_to_judge():
    # 8 GPUs at 0 % in the one sweep that saw the job (it ran 3 s): 8 readings, one moment.
    start_up = [(1.0, [(1000, [0.0, 0.0, 500.0, 80000.0, 70.0, 30.0, 1980.0])])] * 8
    summary = summary_from_rows(start_up, period=15, threshold=10.0, held_seconds=8 * 15)
    assert summary["samples"] == 8
    assert summary["idle_verdict"] == "too_short"
    assert summary["idle"] is False


MIN = 60


@pytest.mark.parametrize(
    ("readings", "verdict", "idle_fraction"),
    [
        ([], "too_short", None),
        ([(0, 0.0)], "too_short", 1.0),  # one start-up reading
        ([(0, 0.0), (15, 0.0)], "too_short", 1.0),
        ([(0, g) for g in [0.0] * 8], "too_short", 1.0),  # 8 GPUs, one sweep
        ([(t, 0.0) for t in range(0, 5 * MIN, 15)], "too_short", 1.0),  # 4 min 45 s
        ([(t, 0.0) for t in (0, 300)], "too_short", 1.0),  # 5 minutes but 2 sweeps
        ([(t, 0.0) for t in (0, 60, 120, 180, 300)], "idle", 1.0),  # 5 sweeps over 5 min
        ([(t, 0.0) for t in range(0, 5 * MIN + 1, 15)], "idle", 1.0),
        ([(t, 95.0) for t in range(0, 5 * MIN + 1, 15)], "busy", 0.0),
        ([(t, 5.0 if t < 180 else 50.0) for t in range(0, 5 * MIN + 1, 15)], "idle", 12 / 21),
        ([(t, 5.0 if t < 150 else 50.0) for t in range(0, 5 * MIN + 1, 15)], "busy", 10 / 21),
        ([(t, 10.0) for t in range(0, 5 * MIN + 1, 15)], "busy", 0.0),  # at the threshold: busy
    ],
)
def test_idle_verdict_needs_enough_evidence(readings, verdict, idle_fraction):
    judged = idle_verdict(readings, threshold=10.0, min_span_seconds=5 * MIN)
    assert judged.verdict == verdict
    assert judged.idle is (verdict == "idle")
    assert judged.idle_fraction == pytest.approx(idle_fraction)
