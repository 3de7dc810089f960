"""`make bench`'s table (bench/_all.py): what the Benchmarks page holds."""

from __future__ import annotations

import pytest

from bench import _all


def record(label: str, rows: list[dict], loads=(0.4, 0.9), code=0) -> dict:
    return {"label": label, "summary": rows, "load_before": list(loads), "exit": code}


def row(name: str, median: float, unit: str = "", busy: bool = False) -> dict:
    return {
        "name": name,
        "unit": unit,
        "median": median,
        "min": median - 1,
        "max": median + 1,
        "count": 3,
        "busy": busy,
    }


@pytest.mark.parametrize(
    ("results", "expected"),
    [
        (
            [record("submit", [row("rate", 51.6, "jobs/s")])],
            ["| `submit` | rate | 51.6 jobs/s | 50.6–52.6 | 3 | 0.40–0.90 |"],
        ),
        (
            [record("resync", [row("pass", 12.0, "s", busy=True)], loads=(3.2, 4.0))],
            ["| `resync` | pass | 12 s | 11–13 | 3 | 3.20–4.00 **BUSY** |"],
        ),
        (
            [record("status_lag", [], code=1)],
            ["| `status_lag` | failed (exit 1) | | | | |"],
        ),
        (
            # Only the two sides' CPU rows: the portal's breakdown stays in the script's output.
            [
                record(
                    "kueue",
                    [
                        row("CPU seconds, kubesim", 5.0, "s"),
                        row("CPU seconds, portal", 9.0, "s"),
                        row("CPU seconds, portal: PostgreSQL", 2.0, "s"),
                        row("CPU seconds, this process", 1.0, "s"),
                    ],
                )
            ],
            [
                "| `kueue` | CPU seconds, kubesim | 5 s | 4–6 | 3 | 0.40–0.90 |",
                "|  | CPU seconds, portal | 9 s | 8–10 | 3 | 0.40–0.90 |",
            ],
        ),
    ],
)
def test_the_table_has_a_row_per_figure_with_median_range_and_load(results, expected):
    table = _all.render(results, "2 cores", elapsed=60)

    assert table.splitlines()[0].startswith("Measured ")
    assert "on 2 cores, commit " in table.splitlines()[0]
    body = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert body[1:] == expected


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        (
            f"# Benchmarks\n\nintro\n\n{_all.START}\nold table\n{_all.END}\n\n## After\n",
            f"# Benchmarks\n\nintro\n\n{_all.START}\nNEW\n{_all.END}\n\n## After\n",
        ),
        (
            "# Benchmarks\n\nintro\n",
            f"# Benchmarks\n\nintro\n\n## Latest `make bench`\n\n{_all.START}\nNEW\n{_all.END}\n",
        ),
    ],
)
def test_the_docs_page_gets_the_table_between_its_markers(tmp_path, page, expected):
    path = tmp_path / "index.md"
    path.write_text(page)

    _all.write_docs(path, "NEW\n")

    assert path.read_text() == expected
