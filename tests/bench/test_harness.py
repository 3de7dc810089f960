"""The bench harness's own parts: its command line, the load refusal, the --runs summary, the
processes it starts and stops; and every bench script answering --help through it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import _harness as harness

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(p for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))


def parser_with_jobs() -> argparse.ArgumentParser:
    parser = harness.make_parser("A bench.\n\nMore.", short={"jobs": 10, "sizes": "100"})
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--sizes", default="1000,10000")
    return parser


def test_the_common_options_default_to_three_quiet_pinned_runs():
    args = harness.parse_args(parser_with_jobs(), [])

    assert (args.runs, args.short, args.allow_busy, args.pin) == (3, False, False, True)
    assert args.max_load == harness.LOAD_LIMIT
    assert (args.jobs, args.sizes) == (1000, "1000,10000")
    assert (args.shared_services, args.json) == (True, None)  # the toy needs no services


@pytest.mark.parametrize(
    ("argv", "busy", "pin"),
    [
        (["--force"], True, True),
        (["--allow-busy"], True, True),
        (["--no-pin"], False, False),
        (["--pin", "--force"], True, True),
    ],
)
def test_force_is_allow_busy_and_pinning_can_be_turned_off(argv, busy, pin):
    args = harness.parse_args(parser_with_jobs(), argv)

    assert (args.allow_busy, args.pin) == (busy, pin)


def test_a_script_that_needs_postgres_and_redis_gets_private_ones_unless_told():
    parser = harness.make_parser("A bench.", services=("postgres", "redis"))

    assert harness.parse_args(parser, []).shared_services is False
    assert harness.parse_args(parser, ["--shared-services"]).shared_services is True
    assert harness.parse_args(parser, [])._services == ("postgres", "redis")


@pytest.mark.parametrize(
    ("env", "database", "redis"),
    [
        ({}, "postgres://postgres@127.0.0.1:5432/gp_x", "redis://127.0.0.1:6379/12"),
        (
            {"BENCH_DATABASE_URL": "postgres://h/other", "BENCH_REDIS_URL": "redis://h:1/3"},
            "postgres://h/other",
            "redis://h:1/3",
        ),
        (
            {
                harness.PRIVATE_DATABASE_ENV: "postgres://postgres@127.0.0.1:40001",
                harness.PRIVATE_REDIS_ENV: "redis://127.0.0.1:40002",
                "BENCH_DATABASE_URL": "postgres://h/other",
            },
            "postgres://postgres@127.0.0.1:40001/gp_x",
            "redis://127.0.0.1:40002/12",
        ),
    ],
)
def test_the_runs_private_services_win_over_the_shared_ones(monkeypatch, env, database, redis):
    for name in (
        "BENCH_DATABASE_URL",
        "BENCH_REDIS_URL",
        harness.PRIVATE_DATABASE_ENV,
        harness.PRIVATE_REDIS_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    assert (harness.database_url("gp_x"), harness.redis_url(12)) == (database, redis)


def test_short_takes_the_scripts_smaller_values():
    args = harness.parse_args(parser_with_jobs(), ["--short"])

    assert (args.jobs, args.sizes) == (10, "100")


def test_an_option_given_explicitly_wins_over_short():
    args = harness.parse_args(parser_with_jobs(), ["--short", "--jobs", "77"])

    assert (args.jobs, args.sizes) == (77, "100")


@pytest.mark.parametrize("runs", ["0", "-3", "many"])
def test_runs_must_be_a_positive_whole_number(runs, capsys):
    with pytest.raises(SystemExit):
        harness.parse_args(parser_with_jobs(), ["--runs", runs])

    assert "--runs" in capsys.readouterr().err


def test_the_help_says_what_short_sets(capsys):
    with pytest.raises(SystemExit):
        harness.parse_args(parser_with_jobs(), ["--help"])

    assert "--short sets: --jobs 10, --sizes 100" in capsys.readouterr().out


def test_summary_is_median_min_and_max():
    summary = harness.summarise([3.0, 1.0, 2.0, 10.0])

    assert summary == harness.Summary(median=2.5, minimum=1.0, maximum=10.0, count=4)


def test_nothing_to_summarise_is_an_error():
    with pytest.raises(ValueError, match="no values"):
        harness.summarise([])


def test_a_summary_line_says_the_load_and_cores_beside_the_figure():
    line = harness.summary_line("rate", "jobs/s", [51.6, 48.0, 55.1], [0.5, 1.2, 0.9], 2)

    assert line == (
        "rate: median 51.6 jobs/s (min 48, max 55.1 over 3 runs; load 0.50–1.20 on 2 cores)"
    )


def test_the_summary_has_a_line_per_figure_and_per_side_in_first_seen_order():
    runs = [
        {
            "figures": [
                {"name": "rate", "value": 10.0, "unit": "/s", "load": 0.4},
                {"name": "p99", "value": 80.0, "unit": "ms", "load": 0.5},
            ],
            "cpu": {"kubesim": 4.0, "this process": 1.0},
            "load_after": [1.0, 0.5, 0.2],
        },
        {
            "figures": [
                {"name": "rate", "value": 14.0, "unit": "/s", "load": 0.6},
                {"name": "p99", "value": 90.0, "unit": "ms", "load": 0.7},
            ],
            "cpu": {"kubesim": 6.0, "this process": 1.0},
            "load_after": [1.1, 0.5, 0.2],
        },
    ]

    lines = harness.summary_lines(runs, cores=2)

    assert [line.split(":")[0] for line in lines] == [
        "rate",
        "p99",
        "CPU seconds, kubesim",
        "CPU seconds, this process",
    ]
    assert lines[0].startswith("rate: median 12 /s (min 10, max 14 over 2 runs")
    assert lines[2].startswith("CPU seconds, kubesim: median 5 s (min 4, max 6")


def test_a_quiet_machine_is_not_refused():
    assert harness.busy_refusal(harness.Machine(load=(1.5, 3.0, 3.0), cores=2)) is None


def test_a_busy_machine_is_refused_saying_its_load_and_the_way_out():
    reason = harness.busy_refusal(harness.Machine(load=(2.37, 1.0, 0.5), cores=2))

    assert "2.37" in reason
    assert "2 cores" in reason
    assert "--allow-busy" in reason


def test_settling_waits_no_longer_than_told_and_hands_back_the_load_it_found():
    # Any load is under this limit: the machine as it is, at once.
    assert harness.settle(1e9, seconds=600).load[0] < 1e9
    # No load is under this one: it gives up after its wait, and the caller refuses.
    gave_up = harness.settle(-1.0, seconds=0.1)
    assert harness.busy_refusal(gave_up, -1.0) is not None


def test_a_figure_of_a_run_started_on_a_busy_machine_is_marked_busy():
    runs = [
        {"figures": [{"name": "rate", "value": 10.0, "unit": "/s", "load": 0.4}], "busy": False},
        {"figures": [{"name": "rate", "value": 12.0, "unit": "/s", "load": 3.1}], "busy": True},
    ]

    (line,) = harness.summary_lines(runs, cores=2)

    assert line.endswith("load 0.40–3.10 on 2 cores) BUSY")
    assert not harness.summary_lines(runs[:1], cores=2)[0].endswith("BUSY")


def test_run_refuses_without_measuring_when_the_machine_is_busy(capsys):
    args = harness.parse_args(parser_with_jobs(), ["--max-load", "-1", "--settle", "0"])
    measured = []

    code = harness.run(args, lambda args, stack: measured.append(1))

    assert code == 2
    assert measured == []
    assert "refused: machine busy: the 1-minute load average" in capsys.readouterr().err


def test_allow_busy_measures_and_leaves_the_figures_for_the_parent_run(
    tmp_path, monkeypatch, capsys
):
    figures_file = tmp_path / "figures.json"
    monkeypatch.setenv(harness.FIGURES_ENV, str(figures_file))
    # --no-pin: pinned, the run would pin this (pytest's) process to half the CPUs.
    args = harness.parse_args(parser_with_jobs(), ["--max-load", "-1", "--force", "--no-pin"])

    def measure(args, stack):
        harness.figure("rate", 42.0, "jobs/s")
        harness.figure("not measured", None)
        return 3

    code = harness.run(args, measure)

    assert code == 3
    record = json.loads(figures_file.read_text())
    assert [(f["name"], f["value"], f["unit"]) for f in record["figures"]] == [
        ("rate", 42.0, "jobs/s")
    ]
    assert record["exit"] == 3
    assert record["busy"] is True
    assert "this process" in record["cpu"]
    out = capsys.readouterr().out
    assert out.startswith("machine: ")
    assert "machine after the run: " in out
    assert "CPU seconds: this process" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--runs", "3", "--jobs", "5"], ["--jobs", "5", "--allow-busy", "--runs", "1"]),
        (["--runs=3", "--allow-busy"], ["--allow-busy", "--runs", "1"]),
        (["--force", "--json", "out.json"], ["--force", "--runs", "1"]),
        (["--json=out.json", "--short"], ["--short", "--allow-busy", "--runs", "1"]),
        ([], ["--allow-busy", "--runs", "1"]),
    ],
)
def test_each_of_several_runs_is_one_run_that_does_not_refuse(argv, expected):
    assert harness.child_argv(argv) == expected


@pytest.mark.parametrize(
    ("cpus", "halves"),
    [
        ([0], None),
        ([0, 1], ({0}, {1})),
        ([3, 2, 1, 0], ({0, 1}, {2, 3})),
        ([0, 1, 2], ({0}, {1, 2})),
    ],
)
def test_pinning_gives_kubesim_and_the_portal_different_cpus(cpus, halves):
    assert harness.split_cpus(cpus) == halves


def test_percentile_is_the_value_at_that_fraction_of_the_sorted_values():
    values = list(range(100, 0, -1))  # 100 … 1

    assert harness.percentile(values, 0.5) == 51
    assert harness.percentile(values, 0.99) == 100
    assert harness.percentile([7.0], 0.99) == 7.0


def test_portal_env_runs_the_servers_as_in_production_unless_told(monkeypatch):
    for name in ("DEBUG", "SECRET_KEY", "PORTAL_KUBE_QPS", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)

    env = harness.portal_env(
        database_url="postgres://x/db", redis_url="redis://r/1", kubeconfig="/k", kube_qps=20
    )
    dev = harness.portal_env(database_url="postgres://x/db", kube_qps=None, production=False)

    assert (env["DEBUG"], env["SECRET_KEY"]) == ("false", harness.SECRET_KEY)
    assert (env["CELERY_BROKER_URL"], env["KUBECONFIG"], env["PORTAL_KUBE_QPS"]) == (
        "redis://r/1",
        "/k",
        "20",
    )
    assert {"DEBUG", "SECRET_KEY", "PORTAL_KUBE_QPS", "KUBECONFIG"}.isdisjoint(dev)
    assert dev["DATABASE_URL"] == "postgres://x/db"


def test_the_stack_waits_for_a_process_to_be_ready_counts_its_cpu_and_stops_it(tmp_path):
    script = "import time; print('up and ready.', flush=True); sum(range(10**6)); time.sleep(60)"
    with harness.Stack(workdir=tmp_path) as stack:
        service = stack.spawn(
            [sys.executable, "-c", script], label="toy", env=None, ready=b"ready."
        )
        assert service.process.poll() is None
        stack.stop(service)
        assert service.process.poll() is not None
        assert stack.services == []

    assert "up and ready." in (tmp_path / "toy.log").read_text()
    sides = stack.cpu_by_side()
    assert list(sides) == ["portal", "this process"]
    assert sides["portal"] >= 0


@pytest.mark.skipif(
    harness.split_cpus(os.sched_getaffinity(0)) is None, reason="pinning needs two CPUs"
)
def test_pinned_portal_processes_run_on_the_portals_cpus_only(tmp_path, capsys):
    kubesim_cpus, portal_cpus = harness.split_cpus(os.sched_getaffinity(0))
    with harness.Stack(workdir=tmp_path, pin=True) as stack:
        service = stack.spawn(
            [sys.executable, "-c", "print('ready.', flush=True); import time; time.sleep(60)"],
            label="toy",
            ready=b"ready.",
        )
        echo = stack.spawn(
            [sys.executable, "-c", "print('ready.', flush=True); import time; time.sleep(60)"],
            label="echo",
            side="echo",
            pin_as="kubesim",
            ready=b"ready.",
        )

        assert os.sched_getaffinity(service.pid) == portal_cpus
        assert os.sched_getaffinity(echo.pid) == kubesim_cpus
    assert "pinned: kubesim on CPU" in capsys.readouterr().out


@pytest.mark.skipif(
    harness.split_cpus(os.sched_getaffinity(0)) is None, reason="pinning needs two CPUs"
)
def test_a_running_process_is_pinned_with_its_threads_and_children(tmp_path):
    # As kubesim is pinned: after it has started its threads.
    script = (
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ready.', flush=True); time.sleep(60)\n"
    )
    first_cpu = {min(os.sched_getaffinity(0))}
    with harness.Stack(workdir=tmp_path) as stack:
        service = stack.spawn([sys.executable, "-c", script], label="toy", ready=b"ready.")
        children = harness.wait_until(
            lambda: harness.descendants(service.pid), timeout=30, what="no child"
        )

        harness.pin_tree(service.pid, first_cpu)

        threads = [int(t.name) for t in Path(f"/proc/{service.pid}/task").iterdir()]
        assert len(threads) >= 2
        for pid in [*threads, *children]:
            assert os.sched_getaffinity(pid) == first_cpu


def test_a_process_started_for_the_run_by_the_parent_counts_on_the_portals_side(tmp_path):
    burner = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True: sum(range(10**5)); time.sleep(0.01)"]
    )
    try:
        with harness.Stack(workdir=tmp_path, adopt={"PostgreSQL": burner.pid}) as stack:
            harness.wait_until(
                lambda: stack.cpu_by_side()["portal: PostgreSQL"] > 0, timeout=30, what="no CPU"
            )
        sides = stack.cpu_by_side()
    finally:
        burner.kill()
        burner.wait()

    assert list(sides) == ["portal", "portal: PostgreSQL", "this process"]
    assert sides["portal"] == sides["portal: PostgreSQL"] > 0
    assert stack.portal_cpu() == sides["portal"]


def test_a_private_redis_answers_on_its_own_port_and_is_stopped(tmp_path):
    import redis

    services = harness.PrivateServices(("redis",), None, tmp_path)
    try:
        env, pids = services.start()
        url = env[harness.PRIVATE_REDIS_ENV]
        assert redis.Redis.from_url(f"{url}/12").ping()
        assert set(pids) == {"Redis"}
    finally:
        services.destroy()

    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(f"{url}/12", socket_connect_timeout=1).ping()


def test_a_process_that_dies_before_it_is_ready_is_reported_with_its_log(tmp_path):
    with harness.Stack(workdir=tmp_path) as stack, pytest.raises(RuntimeError) as failure:
        stack.spawn(
            [sys.executable, "-c", "print('no database'); raise SystemExit(1)"],
            label="broken",
            ready=b"ready.",
        )

    assert "broken did not start: exited" in str(failure.value)
    assert "no database" in str(failure.value)


def test_several_runs_each_in_a_fresh_process_then_the_summary(tmp_path):
    counter = tmp_path / "count"
    bench = tmp_path / "toy_bench.py"
    bench.write_text(
        textwrap.dedent(
            f"""
            import sys
            from pathlib import Path
            sys.path.insert(0, {str(REPO)!r})
            from bench import _harness as harness

            def measure(args, stack):
                counter = Path({str(counter)!r})
                n = int(counter.read_text()) + 1 if counter.exists() else 1
                counter.write_text(str(n))
                print(f"rate this run: {{n * 10}}")
                harness.figure("rate", n * 10, "jobs/s")

            parser = harness.make_parser("A toy.", short={{}})
            sys.exit(harness.run(harness.parse_args(parser), measure))
            """
        )
    )

    result = subprocess.run(
        [sys.executable, str(bench), "--runs", "3", "--allow-busy"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert [line for line in out.splitlines() if line.startswith("rate this run")] == [
        "rate this run: 10",
        "rate this run: 20",
        "rate this run: 30",
    ]
    assert "=== summary over 3 of 3 runs ===" in out
    assert "rate: median 20 jobs/s (min 10, max 30 over 3 runs; load " in out


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_bench_script_answers_help_with_the_harness_options(script):
    result = subprocess.run(
        [sys.executable, str(script), "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    for option in ("--runs", "--short", "--force", "--allow-busy", "--pin", "--no-pin", "--json"):
        assert option in result.stdout
