"""Readable tables for people, JSON for scripts."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain left-aligned table; wide cells are not wrapped so `grep` and `awk` still work."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for index, value in enumerate(row):
            widths[index] = max(widths[index], len(value))
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str) -> None:
    click.echo(table(headers, rows) if rows else empty)


def short_time(value: str | None) -> str:
    """'2026-12-01T13:21:39.123456Z' -> '2026-12-01 13:21:39'."""
    if not value:
        return "-"
    return value.replace("T", " ")[:19]
