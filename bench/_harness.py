"""What every bench script shares: its command line, the machine it ran on, and the stack it
starts (kubesim, the web server, the Celery worker, the cluster watcher) and stops.

A script builds its parser with `make_parser`, reads it with `parse_args`, and hands its
measurement to `run`:

    parser = harness.make_parser(__doc__, short={"jobs": 50})
    parser.add_argument("--jobs", type=int, default=1000)
    args = harness.parse_args(parser)
    sys.exit(harness.run(args, measure))

    def measure(args, stack: harness.Stack) -> int | None:
        ks = stack.kubesim(no_cluster=True)
        web = stack.web(harness.portal_env(database_url=..., kubeconfig=ks.kubeconfig))
        ...
        harness.figure("rate", rate, "jobs/s")  # kept for --runs' median/min/max

Every script then takes:
  --runs N      measure N times, each in a fresh process; print the median, min and max of every
                recorded figure (with the load average it was taken at and the core count);
  --short       a quick run (the script's smaller counts; options given explicitly still win);
  --allow-busy  measure even when the 1-minute load average is above --max-load (default 1.5):
                without it the script refuses, since a busy machine's figures say little;
  --pin         with two cores or more, kubesim on one half of the CPUs and the portal's
                processes on the other (os.sched_setaffinity), so neither steals the other's.

Each run prints the machine (cores, load average) before it, and after it the load again and the
CPU seconds spent by each side: kubesim, the portal's processes (web, worker, watcher) and the
bench process itself (which is portal code too where a script measures in process).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

LOAD_LIMIT = 1.5
RUNS = 3  # each figure is the median of this many runs (with min and max)
SERVICE_NAMES = {"postgres": "PostgreSQL", "redis": "Redis"}
# Signed sessions and tokens made in the bench process must verify in the servers it starts.
SECRET_KEY = "bench-only-secret-key-not-for-production-use-0123456789"
FIGURES_ENV = "BENCH_FIGURES_FILE"  # where a child run of --runs N leaves its figures
PRIVATE_DATABASE_ENV = "BENCH_PRIVATE_POSTGRES"  # the run's private server, without a database
PRIVATE_REDIS_ENV = "BENCH_PRIVATE_REDIS"
SERVICES_ENV = "BENCH_SERVICES"  # the private services' pids a child run counts on the portal side
START_TIMEOUT = 90.0
# The CPUs this process may use before any pinning: the halves are taken from these.
CPUS_AT_START = frozenset(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


# --- command line -------------------------------------------------------------------------------


def make_parser(
    doc: str | None,
    *,
    short: dict[str, Any] | None = None,
    services: Sequence[str] = (),
) -> argparse.ArgumentParser:
    """A parser with the options every bench takes; `short` holds the script's --short values,
    `services` what the script needs of PostgreSQL ("postgres") and Redis ("redis"): the harness
    starts a private, pinned one of each per run unless --shared-services."""
    first_line = (doc or "").strip().splitlines()[0] if doc and doc.strip() else None
    parser = argparse.ArgumentParser(
        description=first_line,
        epilog=f"--short sets: {_describe_short(short)}" if short else None,
    )
    common = parser.add_argument_group("harness (bench/_harness.py)")
    common.add_argument(
        "--runs",
        type=positive_int,
        default=RUNS,
        help=f"measure N times (default {RUNS}); print median/min/max",
    )
    common.add_argument("--short", action="store_true", help="a quick run with smaller counts")
    common.add_argument(
        "--force",
        "--allow-busy",
        dest="allow_busy",
        action="store_true",
        help=f"measure even when the load average is above --max-load (default {LOAD_LIMIT}); "
        "the figures are then marked busy",
    )
    common.add_argument(
        "--max-load", type=float, default=LOAD_LIMIT, help="the load average refused above"
    )
    common.add_argument(
        "--settle",
        type=float,
        default=SETTLE_SECONDS,
        metavar="SECONDS",
        help=f"wait this long at most for the load to fall under --max-load before refusing "
        f"(default {SETTLE_SECONDS:g})",
    )
    common.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="kubesim on one half of the CPUs, the portal (web, worker, watcher, PostgreSQL, "
        "Redis, this process) on the other (default; needs 2 cores or more)",
    )
    if services:
        common.add_argument(
            "--shared-services",
            action="store_true",
            help=f"use the machine's {' and '.join(SERVICE_NAMES[s] for s in services)} "
            "(BENCH_DATABASE_URL, BENCH_REDIS_URL) instead of private ones started per run",
        )
    common.add_argument(
        "--json", type=Path, help="write the runs and the summary to this file (make bench)"
    )
    parser.set_defaults(_short_values=dict(short or {}), _services=tuple(services))
    if not services:
        parser.set_defaults(shared_services=True)
    return parser


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _describe_short(short: dict[str, Any]) -> str:
    return ", ".join(f"--{name.replace('_', '-')} {value}" for name, value in short.items())


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None):
    """Parse; with --short, the script's short values replace the defaults (not what was given)."""
    args = parser.parse_args(argv)
    if args.short and args._short_values:
        parser.set_defaults(**args._short_values)
        args = parser.parse_args(argv)
    return args


# --- the machine --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    load: tuple[float, float, float]
    cores: int

    def describe(self) -> str:
        one, five, fifteen = self.load
        return f"{self.cores} cores, load average {one:.2f} {five:.2f} {fifteen:.2f} (1/5/15 min)"


def machine() -> Machine:
    return Machine(load=os.getloadavg(), cores=os.cpu_count() or 1)


# How long a bench waits for the load of what ran just before (often its own previous run: the
# 1-minute average decays by e in a minute) to fall under the limit before it measures anyway.
SETTLE_SECONDS = 120.0


def settle(limit: float = LOAD_LIMIT, *, seconds: float = SETTLE_SECONDS) -> Machine:
    """The machine once its 1-minute load is at most `limit`, or after `seconds` of waiting."""
    deadline = time.monotonic() + seconds
    state = machine()
    while state.load[0] > limit and time.monotonic() < deadline:
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
        state = machine()
    return state


def busy_refusal(state: Machine, limit: float = LOAD_LIMIT) -> str | None:
    """Why the machine is too busy to measure on, or None when it is quiet enough."""
    if state.load[0] <= limit:
        return None
    return (
        f"the 1-minute load average is {state.load[0]:.2f} (above {limit:g}) on "
        f"{state.cores} cores: figures taken now would measure the other work. "
        "Wait for a quieter machine or pass --allow-busy (the figures then say the load)."
    )


# --- figures ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    load: float  # 1-minute load average when it was taken


_figures: list[Figure] = []


def figure(name: str, value: float | None, unit: str = "") -> None:
    """Record one figure of this run (as printed by the script) for --runs' summary."""
    if value is None or value != value:  # None or NaN: nothing measured
        return
    _figures.append(Figure(name, float(value), unit, os.getloadavg()[0]))


def recorded_figures() -> list[Figure]:
    return list(_figures)


@dataclass(frozen=True)
class Summary:
    median: float
    minimum: float
    maximum: float
    count: int


def summarise(values: Iterable[float]) -> Summary:
    values = list(values)
    if not values:
        raise ValueError("no values to summarise")
    return Summary(statistics.median(values), min(values), max(values), len(values))


def _number(value: float) -> str:
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.3g}"


def summary_line(
    name: str,
    unit: str,
    values: list[float],
    loads: list[float],
    cores: int,
    busy: bool = False,
) -> str:
    """`name: median X unit (min Y, max Z over N runs; load A–B on C cores)`, and `BUSY` after
    it when a run started on a machine above the load limit (--force)."""
    s = summarise(values)
    unit = f" {unit}" if unit else ""
    load = f"{min(loads):.2f}" if min(loads) == max(loads) else f"{min(loads):.2f}–{max(loads):.2f}"
    return (
        f"{name}: median {_number(s.median)}{unit} (min {_number(s.minimum)}, max "
        f"{_number(s.maximum)} over {s.count} run{'s' if s.count != 1 else ''}; "
        f"load {load} on {cores} cores)" + (" BUSY" if busy else "")
    )


@dataclass(frozen=True)
class Row:
    """One figure over the runs: what `summary_lines` prints and `make bench` tabulates."""

    name: str
    unit: str
    values: list[float]
    loads: list[float]
    busy: bool

    @property
    def summary(self) -> Summary:
        return summarise(self.values)


def summary_rows(runs: list[dict]) -> list[Row]:
    """One row per figure (in the order first seen), then one per CPU side, over the runs."""
    values: dict[tuple[str, str], list[float]] = {}
    loads: dict[tuple[str, str], list[float]] = {}
    busy: dict[tuple[str, str], bool] = {}
    for run_record in runs:
        was_busy = bool(run_record.get("busy"))
        for item in run_record.get("figures", []):
            key = (item["name"], item["unit"])
            values.setdefault(key, []).append(item["value"])
            loads.setdefault(key, []).append(item["load"])
            busy[key] = busy.get(key, False) or was_busy
        for side, seconds in run_record.get("cpu", {}).items():
            key = (f"CPU seconds, {side}", "s")
            values.setdefault(key, []).append(seconds)
            loads.setdefault(key, []).append(run_record.get("load_after", [0.0])[0])
            busy[key] = busy.get(key, False) or was_busy
    return [Row(n, u, values[(n, u)], loads[(n, u)], busy[(n, u)]) for (n, u) in values]


def summary_lines(runs: list[dict], cores: int) -> list[str]:
    """One line per figure (in the order first seen) over the runs' recorded figures."""
    return [
        summary_line(row.name, row.unit, row.values, row.loads, cores, row.busy)
        for row in summary_rows(runs)
    ]


# --- processes: CPU time, memory, pinning -------------------------------------------------------


def _proc_stat(pid: int) -> list[str]:
    # The fields after the command name (which may hold spaces and parentheses).
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """User + system CPU seconds of a process (with `children`, of those it has reaped too);
    NaN when it cannot be read (gone, or neither /proc nor psutil)."""
    try:
        fields = _proc_stat(pid)
    except OSError:
        return _psutil_cpu(pid, children)
    ticks = os.sysconf("SC_CLK_TCK")
    total = int(fields[11]) + int(fields[12])  # utime + stime
    if children:
        total += int(fields[13]) + int(fields[14])  # cutime + cstime
    return total / ticks


def _psutil_cpu(pid: int, children: bool) -> float:
    try:
        import psutil
    except ImportError:
        return float("nan")
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return float("nan")
    total = times.user + times.system
    if children:
        total += times.children_user + times.children_system
    return total


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (gunicorn's and Celery's forked workers)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            import psutil

            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except Exception:  # no psutil, or the process is gone
            return []
    parents: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int(_proc_stat(int(entry.name))[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a process, its reaped children and its live descendants (those that exit
    while being read count as nothing)."""
    below = (cpu_seconds(p) for p in descendants(pid))
    return cpu_seconds(pid, children=True) + sum(x for x in below if x == x)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def split_cpus(cpus: Iterable[int]) -> tuple[set[int], set[int]] | None:
    """kubesim's CPUs and the portal's, or None when there are fewer than two."""
    ordered = sorted(cpus)
    if len(ordered) < 2:
        return None
    half = len(ordered) // 2
    return set(ordered[:half]), set(ordered[half:])


def pin_tree(pid: int, cpus: set[int]) -> None:
    """Every thread of a running process and of its descendants onto `cpus`."""
    for process in [pid, *descendants(pid)]:
        try:
            threads = [int(t.name) for t in Path(f"/proc/{process}/task").iterdir()]
        except OSError:
            threads = [process]
        for thread in threads:
            with contextlib.suppress(OSError):  # it has just exited
                os.sched_setaffinity(thread, cpus)


# --- services the bench needs: PostgreSQL, Redis, Django ---------------------------------------


def database_url(default_name: str) -> str:
    """The script's own database: on the run's private PostgreSQL when the harness started one,
    else BENCH_DATABASE_URL, else on the local server."""
    server = os.environ.get(PRIVATE_DATABASE_ENV)
    if server:
        return f"{server}/{default_name}"
    return os.environ.get(
        "BENCH_DATABASE_URL", f"postgres://postgres@127.0.0.1:5432/{default_name}"
    )


def redis_url(default_db: int) -> str:
    server = os.environ.get(PRIVATE_REDIS_ENV)
    if server:
        return f"{server}/{default_db}"
    return os.environ.get("BENCH_REDIS_URL", f"redis://127.0.0.1:6379/{default_db}")


def _admin(url: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


def database_name(url: str) -> str:
    return url.rsplit("/", 1)[1]


def ensure_database(url: str) -> None:
    """Create the database named by `url` unless it exists (its data is kept)."""
    import psycopg

    name = database_name(url)
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def recreate_database(url: str) -> None:
    name = database_name(url)
    _admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    _admin(url, f'DROP DATABASE IF EXISTS "{database_name(url)}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_database(url: str, *, keep: bool = False) -> Iterator[str]:
    """A fresh database for the run, dropped afterwards (unless `keep`)."""
    recreate_database(url)
    try:
        yield url
    finally:
        if "django" in sys.modules:
            from django.db import connections

            connections.close_all()
        if not keep:
            drop_database(url)


def flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def setup_django(*, database_url: str, migrate: bool = True, **env: Any) -> None:
    """Configure this process as the portal (the given settings as environment), migrate."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    os.environ.update({name: str(value) for name, value in env.items()})
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def ensure_priority_classes() -> None:
    """The priority classes every install gets (the seed migration's values)."""
    from quotas.models import PriorityClass
    from quotas.priority_defaults import PRIORITY_CLASSES

    for default in PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(
            name=default.name,
            defaults={"value": default.value, "preemptible": default.preemptible},
        )


def portal_env(
    *,
    database_url: str,
    redis_url: str | None = None,
    kubeconfig: Path | str | None = None,
    kube_qps: float | None = 0,
    production: bool = True,
    code: Path = REPO,
    extra: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The environment of a portal process the bench starts (web, worker, watcher).

    `production`: DEBUG off with a fixed secret key, plain HTTP on 127.0.0.1, as the servers
    are measured. `kube_qps` 0 turns the client's pacing off (None: the default pacing)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PYTHONPATH": str(code),
        "LOG_LEVEL": "WARNING",
    }
    if redis_url is not None:
        env["CELERY_BROKER_URL"] = redis_url
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    if kube_qps is not None:
        env["PORTAL_KUBE_QPS"] = f"{kube_qps:g}"
    if production:
        env.update(
            DEBUG="false",
            SECRET_KEY=SECRET_KEY,
            SECURE_SSL_REDIRECT="false",
            ALLOWED_HOSTS="127.0.0.1,localhost",
        )
    env.update({name: str(value) for name, value in (extra or {}).items()})
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: Iterable[float], fraction: float) -> float:
    """The value at index int(n × fraction) of the sorted values (p99: fraction 0.99)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def wait_until(
    predicate: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    process: subprocess.Popen | None = None,
    log: Path | None = None,
    interval: float = 0.2,
) -> Any:
    """Poll until `predicate()` is truthy; its value. Fails early when `process` has exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        exited = process is not None and process.poll() is not None
        if exited or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            reason = "exited" if exited else f"not within {timeout:g} s"
            raise RuntimeError(f"{what}: {reason}\n{tail}")
        time.sleep(interval)


# --- the stack: kubesim and the portal's processes ----------------------------------------------


@dataclass
class Service:
    """A process the stack started: its side ("kubesim", "portal"), log and how to stop it."""

    label: str
    side: str
    process: subprocess.Popen
    log: Path | None = None
    stopper: Callable[[], Any] | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Server(Service):
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Watcher(Service):
    health_file: Path = field(default_factory=Path)

    def heartbeat(self) -> dict:
        try:
            return json.loads(self.health_file.read_text())
        except (OSError, ValueError):
            return {}

    def wait_leader(self, timeout: float = 60.0) -> None:
        """Until it holds the Lease (its informers start listing then)."""
        wait_until(
            lambda: self.heartbeat().get("leader"),
            timeout=timeout,
            what="the watcher did not take the Lease",
            process=self.process,
            log=self.log,
        )


class Stack:
    """Starts kubesim and the portal's processes for one run; stops them all at the end.

    Everything started through it is stopped in reverse order on exit, and its CPU seconds are
    counted per side (kubesim, portal, this process) until then."""

    def __init__(
        self,
        *,
        pin: bool = False,
        pin_self: bool = False,
        workdir: Path | None = None,
        prefix: str = "bench-",
        adopt: dict[str, int] | None = None,
    ):
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix=prefix))
        self.services: list[Service] = []
        self.retired: dict[str, float] = {}
        self.kubesims: dict[int, Service] = {}
        self.cpus: dict[str, set[int]] | None = None
        if pin:
            halves = split_cpus(CPUS_AT_START or ())
            if halves is None:
                print("--pin: fewer than two CPUs, nothing pinned", flush=True)
            else:
                self.cpus = {"kubesim": halves[0], "portal": halves[1]}
                if pin_self:
                    # The bench process drives the load and is the direct client of every
                    # baseline (or the portal code itself, in process): the portal's side.
                    os.sched_setaffinity(0, halves[1])
                print(
                    f"pinned: kubesim on CPU {_cpu_list(halves[0])}, the portal's processes on "
                    f"CPU {_cpu_list(halves[1])}, this process "
                    + (f"on CPU {_cpu_list(halves[1])}" if pin_self else "unpinned"),
                    flush=True,
                )
        # Processes started for the run by someone else (the private PostgreSQL and Redis the
        # parent run starts): their CPU seconds from now on count on the portal's side.
        self.adopted = {label: (pid, tree_cpu_seconds(pid)) for label, pid in (adopt or {}).items()}
        self._own_cpu_start = time.process_time()
        self._own_cpu = 0.0
        self._closed: dict[str, float] | None = None

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._closed is not None:
            return
        for service in reversed(list(self.services)):
            self.stop(service)
        self._own_cpu = time.process_time() - self._own_cpu_start
        # The adopted services outlive the stack: what they used until now is the run's.
        self._closed = self.cpu_by_side()

    # kubesim

    def kubesim(
        self,
        *,
        name: str = "ks",
        cluster: str | Path | None = None,
        speed: float = 1.0,
        no_cluster: bool = False,
        rbac: bool = False,
        crds: Sequence[str | Path] = (),
        workdir: Path | None = None,
    ):
        """A started kubesim (kubesim.testing.KubesimProcess). `cluster`: a file, or its YAML;
        `rbac`: enforce RBAC (--rbac)."""
        from kubesim.testing import KubesimProcess

        workdir = workdir or self.workdir / name
        if isinstance(cluster, str) and "\n" in cluster:
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / "cluster.yaml").write_text(cluster)
            cluster = workdir / "cluster.yaml"
        ks = KubesimProcess(
            crds=list(crds),
            cluster=Path(cluster) if cluster else None,
            speed=speed,
            no_cluster=no_cluster,
            rbac=rbac,
            workdir=workdir,
        ).start()
        service = Service(name, "kubesim", ks.process, ks.log_file, stopper=ks.stop)
        if self.cpus:
            pin_tree(ks.process.pid, self.cpus["kubesim"])
        self.services.append(service)
        self.kubesims[id(ks)] = service
        return ks

    # the portal's processes

    def spawn(
        self,
        argv: list[str],
        *,
        label: str,
        side: str = "portal",
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
        ready: bytes | None = None,
        timeout: float = START_TIMEOUT,
        stdout: int | None = None,
        pin_as: str | None = None,
    ) -> Service:
        """Start a process (its output in `label`.log unless `stdout` is given); with `ready`,
        wait until its log holds those bytes. With --pin it runs on the CPUs of `pin_as`
        (default: its side)."""
        log = None
        if stdout is None:
            log = self.workdir / f"{label}.log"
            out = open(log, "ab")  # noqa: SIM115 - the child keeps it
        cpus = self.cpus.get(pin_as or side) if self.cpus else None
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out if stdout is None else stdout,
            stderr=subprocess.STDOUT if stdout is None else None,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        if stdout is None:
            out.close()
        service = Service(label, side, process, log)
        self.services.append(service)
        if ready is not None and log is not None:
            wait_until(
                lambda: ready in log.read_bytes(),
                timeout=timeout,
                what=f"{label} did not start",
                process=process,
                log=log,
            )
        return service

    def web(
        self,
        env: dict[str, str],
        *,
        workers: int = 2,
        port: int | None = None,
        code: Path = REPO,
        label: str = "web",
    ) -> Server:
        """gunicorn (WSGI, as production) with `workers` processes; returns once it answers."""
        port = port or free_port()
        argv = [str(Path(sys.executable).parent / "gunicorn"), "portal.wsgi:application"]
        argv += ["-b", f"127.0.0.1:{port}", "-w", str(workers), "--log-level", "warning"]
        return self._server(argv, env, port, code, label)

    def asgi(
        self, env: dict[str, str], *, port: int | None = None, backlog: int = 4096, label="uvicorn"
    ) -> Server:
        """uvicorn (ASGI, one process: the live pages' event streams); returns once it answers."""
        port = port or free_port()
        argv = [str(Path(sys.executable).parent / "uvicorn"), "portal.asgi:application"]
        argv += ["--port", str(port), "--log-level", "warning", "--backlog", str(backlog)]
        return self._server(argv, env, port, REPO, label)

    def _server(self, argv, env, port: int, code: Path, label: str) -> Server:
        service = self.spawn(argv, label=label, env=env, cwd=code)
        server = Server(service.label, service.side, service.process, service.log, port=port)
        self.services[-1] = server
        wait_until(
            lambda: _answers(f"{server.url}/healthz"),
            timeout=START_TIMEOUT,
            what=f"{label} did not answer",
            process=server.process,
            log=server.log,
        )
        return server

    def worker(
        self, env: dict[str, str], *, concurrency: int = 2, name: str = "bench", label="worker"
    ) -> Service:
        """A Celery worker (prefork, `concurrency` processes); returns once it is ready."""
        argv = [str(Path(sys.executable).parent / "celery"), "-A", "portal", "worker"]
        argv += ["-l", "INFO", "-c", str(concurrency), "--without-gossip", "--without-mingle"]
        argv += ["--without-heartbeat", "-n", f"{name}@%h"]
        return self.spawn(argv, label=label, env=env, ready=b" ready.")

    def watcher(
        self, env: dict[str, str], *, identity: str | None = None, label: str = "watcher"
    ) -> Watcher:
        """`manage.py watch_cluster` with a heartbeat file (see Watcher.wait_leader)."""
        health = self.workdir / f"{label}.json"
        argv = [sys.executable, "manage.py", "watch_cluster"]
        if identity:
            argv += ["--identity", identity]
        argv += ["--health-file", str(health)]
        service = self.spawn(argv, label=label, env=env)
        watcher = Watcher(
            service.label, service.side, service.process, service.log, health_file=health
        )
        self.services[-1] = watcher
        return watcher

    # stopping and accounting

    def stop(self, target) -> None:
        """Stop a Service (or a kubesim this stack started); its CPU time is kept."""
        service = self.kubesims.pop(id(target), None) or target
        if service not in self.services:
            return
        self.services.remove(service)
        if service.process.poll() is None:
            cpu = tree_cpu_seconds(service.pid)
        else:
            cpu = 0.0
        self.retired[service.side] = self.retired.get(service.side, 0.0) + cpu
        if service.stopper is not None:
            service.stopper()
            return
        service.process.terminate()
        try:
            service.process.wait(20)
        except subprocess.TimeoutExpired:
            service.process.kill()
            service.process.wait()

    def cpu_by_side(self) -> dict[str, float]:
        """CPU seconds per side so far (stopped processes included), the portal's private
        PostgreSQL and Redis both in "portal" and on their own, and this process's."""
        if self._closed is not None:
            return dict(self._closed)
        sides = dict(self.retired)
        for service in self.services:
            if service.process.poll() is None:
                sides[service.side] = sides.get(service.side, 0.0) + tree_cpu_seconds(service.pid)
        order = {"kubesim": 0, "portal": 1}
        ordered = dict(sorted(sides.items(), key=lambda item: (order.get(item[0], 2), item[0])))
        for label, (pid, start) in self.adopted.items():
            used = tree_cpu_seconds(pid) - start
            if used == used:  # NaN: it is gone
                ordered["portal"] = ordered.get("portal", 0.0) + used
                ordered[f"portal: {label}"] = used
        ordered["this process"] = self._own_cpu or time.process_time() - self._own_cpu_start
        return ordered

    def cpu_by_process(self) -> dict[str, float]:
        """CPU seconds so far of each running service by label (with its descendants) and of
        each adopted one (since adopted): the per-process breakdown of a side."""
        out = {}
        for service in self.services:
            if service.process.poll() is None:
                out[service.label] = tree_cpu_seconds(service.pid)
        for label, (pid, start) in self.adopted.items():
            used = tree_cpu_seconds(pid) - start
            if used == used:
                out[label] = used
        return out

    def portal_cpu(self, *, include_self: bool = False) -> float:
        """CPU seconds of the portal's side so far (web, worker, watcher, PostgreSQL, Redis);
        with `include_self`, this process's too (the in-process benches run portal code)."""
        sides = self.cpu_by_side()
        return sides.get("portal", 0.0) + (sides["this process"] if include_self else 0.0)


def _cpu_list(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _answers(url: str) -> bool:
    """True once the server answers HTTP at all (any status)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


# --- running a bench ----------------------------------------------------------------------------


def run(
    args: argparse.Namespace,
    measure: Callable[[argparse.Namespace, Stack], int | None],
    argv: Sequence[str] | None = None,
) -> int:
    """Refuse on a busy machine (unless --force), then measure --runs times, each in a fresh
    process with private PostgreSQL and Redis of its own when the script needs them, and
    summarise; a single run without private services measures in this process. The exit code
    (0 when every run's was)."""
    if os.environ.get(FIGURES_ENV):  # one run of several: the parent has decided
        return _once(args, measure, machine())
    state = machine() if args.allow_busy else settle(args.max_load, seconds=args.settle)
    if not args.allow_busy:
        refusal = busy_refusal(state, args.max_load)
        if refusal:
            print(f"refused: machine busy: {refusal}", file=sys.stderr)
            return 2
    private = () if args.shared_services else tuple(args._services)
    if args.runs > 1 or private or args.json:
        return _repeat(args, list(sys.argv[1:] if argv is None else argv), private)
    return _once(args, measure, state)


def _once(args, measure, before: Machine) -> int:
    _figures.clear()
    busy = before.load[0] > args.max_load
    print(
        f"machine: {before.describe()}"
        + (f" BUSY (above {args.max_load:g}): the figures are marked busy" if busy else ""),
        flush=True,
    )
    adopt = json.loads(os.environ.get(SERVICES_ENV) or "{}")
    stack = Stack(pin=args.pin, pin_self=args.pin, adopt=adopt)
    try:
        code = measure(args, stack) or 0
    finally:
        stack.close()
    after = machine()
    cpu = stack.cpu_by_side()
    print(
        f"machine after the run: {after.describe()}; CPU seconds: "
        + ", ".join(f"{side} {seconds:.1f}" for side, seconds in cpu.items())
        + (f"; logs in {stack.workdir}" if any(stack.workdir.iterdir()) else ""),
        flush=True,
    )
    target = os.environ.get(FIGURES_ENV)
    if target:
        record = {
            "figures": [f.__dict__ for f in _figures],
            "cpu": cpu,
            "load_before": list(before.load),
            "load_after": list(after.load),
            "busy": busy,
            "cores": after.cores,
            "exit": code,
        }
        Path(target).write_text(json.dumps(record))
    return code


def child_argv(argv: Sequence[str]) -> list[str]:
    """The options for one run of --runs N: the same, as a single run that does not refuse
    (--json is the parent's)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
            continue
        if item in ("--runs", "--json"):
            skip = True
            continue
        if item.startswith(("--runs=", "--json=")):
            continue
        out.append(item)
    if "--allow-busy" not in out and "--force" not in out:
        out.append("--allow-busy")
    return [*out, "--runs", "1"]


class PrivateServices:
    """A PostgreSQL server and a Redis of the bench's own for each run, on the portal's CPUs,
    so that their CPU time is counted on its side and nothing else's work lands in them.

    PostgreSQL: initdb once (Debian's binaries; see tests/e2e/private_postgres.py), started and
    stopped around each run, without fsync (a throw-away server). Redis: a fresh server per run,
    without persistence."""

    def __init__(self, names: Sequence[str], cpus: set[int] | None, workdir: Path):
        self.names, self.cpus, self.workdir = tuple(names), cpus, workdir
        self.postgres = None
        self.redis: subprocess.Popen | None = None
        if "postgres" in self.names:
            from tests.e2e.private_postgres import PrivatePostgres

            self.postgres = PrivatePostgres().init()

    def start(self) -> tuple[dict[str, str], dict[str, int]]:
        """Start them; the environment for the run and the pids to count."""
        env, pids = {}, {}
        if self.postgres is not None:
            self.postgres.start()
            pid = int((self.postgres.data / "postmaster.pid").read_text().split()[0])
            if self.cpus:
                pin_tree(pid, self.cpus)  # its backends, forked later, inherit it
            env[PRIVATE_DATABASE_ENV] = self.postgres.url("postgres").rsplit("/", 1)[0]
            pids["PostgreSQL"] = pid
        if "redis" in self.names:
            port = free_port()
            cpus = self.cpus
            log = open(self.workdir / "redis.log", "ab")  # noqa: SIM115 - the child keeps it
            self.redis = subprocess.Popen(
                [
                    "redis-server",
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--protected-mode",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
            )
            log.close()
            wait_until(
                lambda: _redis_answers(port),
                timeout=30,
                what="redis-server did not start",
                process=self.redis,
                log=self.workdir / "redis.log",
            )
            env[PRIVATE_REDIS_ENV] = f"redis://127.0.0.1:{port}"
            pids["Redis"] = self.redis.pid
        return env, pids

    def stop(self) -> None:
        if self.redis is not None and self.redis.poll() is None:
            self.redis.terminate()
            try:
                self.redis.wait(20)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait()
        self.redis = None
        if self.postgres is not None and self.postgres.running():
            self.postgres.stop()

    def destroy(self) -> None:
        self.stop()
        if self.postgres is not None:
            self.postgres.destroy()


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _repeat(args, argv: list[str], private: Sequence[str] = ()) -> int:
    script = Path(sys.argv[0]).resolve()
    runs, worst = [], 0
    halves = split_cpus(CPUS_AT_START or ()) if args.pin else None
    workdir = Path(tempfile.mkdtemp(prefix="bench-services-"))
    services = PrivateServices(private, halves[1] if halves else None, workdir) if private else None
    if services:
        print(
            "private services for each run: "
            + " and ".join(SERVICE_NAMES[name] for name in private)
            + (f", on CPU {_cpu_list(halves[1])}" if halves else ""),
            flush=True,
        )
    try:
        for index in range(args.runs):
            if index and not args.allow_busy:
                settle(args.max_load, seconds=args.settle)  # the run before's load, gone
            print(f"\n=== run {index + 1} of {args.runs} ===", flush=True)
            env_extra, pids = services.start() if services else ({}, {})
            try:
                with tempfile.NamedTemporaryFile(prefix="bench-figures-", suffix=".json") as f:
                    env = {**os.environ, **env_extra, FIGURES_ENV: f.name}
                    if pids:
                        env[SERVICES_ENV] = json.dumps(pids)
                    code = subprocess.call(
                        [sys.executable, str(script), *child_argv(argv)], env=env
                    )
                    text = Path(f.name).read_text()
            finally:
                if services:
                    services.stop()
            worst = worst or code
            if text:
                runs.append(json.loads(text))
    finally:
        if services:
            services.destroy()
    cores = machine().cores
    print(f"\n=== summary over {len(runs)} of {args.runs} runs ===")
    for line in summary_lines(runs, cores):
        print(line)
    if args.json:
        write_json(args.json, script, argv, runs, worst)
    return worst


def write_json(path: Path, script: Path, argv: list[str], runs: list[dict], code: int) -> None:
    """The runs and their summary, for `make bench`'s table (bench/_all.py)."""
    rows = [
        {
            "name": row.name,
            "unit": row.unit,
            "median": row.summary.median,
            "min": row.summary.minimum,
            "max": row.summary.maximum,
            "count": row.summary.count,
            "load_min": min(row.loads),
            "load_max": max(row.loads),
            "busy": row.busy,
        }
        for row in summary_rows(runs)
    ]
    record = {
        "script": script.name,
        "argv": argv,
        "exit": code,
        "cores": machine().cores,
        "load_before": [r["load_before"][0] for r in runs],
        "busy": any(r.get("busy") for r in runs),
        "runs": runs,
        "summary": rows,
    }
    Path(path).write_text(json.dumps(record, indent=1))
