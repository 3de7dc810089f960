"""Benchmark: the short version of every bench of the performance table, as one markdown table.

Runs each script below with `--short --json` (so with the harness's defaults: pinned, private
PostgreSQL and Redis, the median of --runs runs) one after the other, then prints one table:
every figure each script recorded, with its median, min and max, the load average at which the
runs started and BUSY where that was above the limit (--force). `--write-docs` puts the table,
with the date and the machine, on the Benchmarks page (docs/benchmarks/index.md, between the
`make bench` markers).

    .venv/bin/python bench/_all.py [--runs 3] [--force] [--only submit,resync_scale] [--write-docs]

Its own time is the sum of the scripts'; the short sizes are chosen so that the whole stays
within 10 minutes on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import _harness as harness

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "benchmarks" / "index.md"
START, END = "<!-- make bench: start -->", "<!-- make bench: end -->"

# (label, script, extra arguments): the rows of the performance issue's table, short.
BENCHES: list[tuple[str, str, list[str]]] = [
    ("submit", "submit.py", []),
    ("submit --sweep", "submit.py", ["--sweep"]),
    ("job_cpu", "job_cpu.py", []),
    ("kueue_scale", "kueue_scale.py", []),
    ("resync_scale", "resync_scale.py", []),
    ("status_lag", "status_lag.py", []),
    ("live_pages", "live_pages.py", []),
    ("list_scale", "list_scale.py", []),
]
# The CPU sides worth a row (the breakdown of the portal's is in each script's own output).
CPU_ROWS = {"CPU seconds, kubesim", "CPU seconds, portal"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--runs", type=harness.positive_int, default=harness.RUNS)
    parser.add_argument("--force", action="store_true", help="measure on a busy machine too")
    parser.add_argument(
        "--only", help="comma-separated labels of the benches to run (default: all)"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument(
        "--max-load", type=float, default=harness.LOAD_LIMIT, help="refuse above this load"
    )
    args = parser.parse_args()
    state = harness.machine() if args.force else harness.settle(args.max_load)
    if not args.force:
        refusal = harness.busy_refusal(state, args.max_load)
        if refusal:
            print(f"refused: machine busy: {refusal}".replace("--allow-busy", "--force"),
                  file=sys.stderr)  # fmt: skip
            return 2
    chosen = BENCHES
    if args.only:
        wanted = {label.strip() for label in args.only.split(",")}
        chosen = [b for b in BENCHES if b[0] in wanted or b[1].removesuffix(".py") in wanted]
    started = time.monotonic()
    results, worst = [], 0
    for label, script, extra in chosen:
        with tempfile.NamedTemporaryFile(prefix="bench-all-", suffix=".json") as handle:
            argv = [sys.executable, str(REPO / "bench" / script), "--short", *extra]
            argv += ["--runs", str(args.runs), "--json", handle.name, "--max-load",
                     str(args.max_load)]  # fmt: skip
            if args.force:
                argv.append("--force")
            print(f"\n##### {label}: {' '.join(argv[1:])}", flush=True)
            t0 = time.monotonic()
            code = subprocess.call(argv, cwd=REPO)
            text = Path(handle.name).read_text()
        record = json.loads(text) if text else {"summary": [], "exit": code}
        record.update(label=label, seconds=time.monotonic() - t0, exit=code)
        results.append(record)
        worst = worst or code
    elapsed = time.monotonic() - started
    table = render(results, describe_machine(state), elapsed)
    print("\n" + table)
    if args.write_docs:
        write_docs(DOCS, table)
        print(f"written to {DOCS.relative_to(REPO)}")
    return worst


def describe_machine(state: harness.Machine) -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{state.cores} cores{f' ({model})' if model else ''}{memory}, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
            check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def render(results: list[dict], machine_text: str, elapsed: float) -> str:
    """The markdown the Benchmarks page holds: date, machine, then one row per figure."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {now} on {machine_text}, commit {_commit()}, by `make bench` "
        f"({elapsed / 60:.1f} min). Each figure: median of the runs (min–max); kubesim pinned "
        "to one half of the CPUs, the portal (web, worker, watcher, its own PostgreSQL and "
        "Redis) to the other. **BUSY**: the runs started above the load limit (--force), so "
        "the figure measures the other work too.",
        "",
        "| bench | figure | median | min–max | runs | load at start |",
        "|---|---|---|---|---|---|",
    ]
    for record in results:
        label = f"`{record['label']}`"
        rows = [r for r in record.get("summary", []) if _wanted(r["name"])]
        if not rows:
            lines.append(f"| {label} | failed (exit {record.get('exit')}) | | | | |")
            continue
        loads = record.get("load_before") or []
        load = f"{min(loads):.2f}–{max(loads):.2f}" if loads else "?"
        for row in rows:
            unit = f" {row['unit']}" if row["unit"] else ""
            busy = " **BUSY**" if row["busy"] else ""
            lines.append(
                f"| {label} | {row['name']} | {harness._number(row['median'])}{unit} | "
                f"{harness._number(row['min'])}–{harness._number(row['max'])} | "
                f"{row['count']} | {load}{busy} |"
            )
            label = ""
    took = ", ".join(
        f"{r['label']} {r['seconds']:.0f} s" for r in results if r.get("seconds") is not None
    )
    if took:
        lines += ["", f"Time per bench (all its runs): {took}."]
    return "\n".join(lines) + "\n"


def _wanted(name: str) -> bool:
    return not name.startswith("CPU seconds, ") or name in CPU_ROWS


def write_docs(path: Path, table: str) -> None:
    """Replace what is between the markers (appended with them when missing)."""
    text = path.read_text()
    block = f"{START}\n{table}{END}"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n## Latest `make bench`\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
