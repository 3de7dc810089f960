"""Planner statistics for the small tables every list joins (users, memberships, projects,
departments).

The job list's plans hinge on how many projects a member has: with stale statistics
PostgreSQL took 40 projects for 9 and 10 memberships for 2 and chose bitmap scans of a whole
project's jobs over an index walk. Migration 0009 lowers these tables' autovacuum analyze
threshold to 5 changes, but where autovacuum is off (some managed or test servers are set up
so) nothing would ever analyse them; a periodic task (`portal.tasks.analyze_small_tables`)
analyses each one that changed since its last ANALYZE. On tables of a few thousand rows an
ANALYZE takes a millisecond or two.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth import get_user_model
from django.db import connections

SMALL_TABLES = ("tenants_membership", "tenants_project", "tenants_department")


def small_tables() -> list[str]:
    return [*SMALL_TABLES, get_user_model()._meta.db_table]


def tables_to_analyze(changes: Mapping[str, int | None], *, at_least: int = 1) -> list[str]:
    """The tables with at least `at_least` rows changed since their last ANALYZE (a table the
    statistics views do not know yet counts as changed), in a stable order."""
    return sorted(
        name for name, changed in changes.items() if changed is None or changed >= at_least
    )


def analyze_small_tables(using: str = "default") -> list[str]:
    """ANALYZE each small table that changed since its last ANALYZE; the names analysed.

    PostgreSQL only (elsewhere nothing is done)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return []
    names = small_tables()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_mod_since_analyze FROM pg_stat_user_tables "
            "WHERE schemaname = current_schema() AND relname = ANY(%s)",
            [names],
        )
        changes: dict[str, int | None] = {name: None for name in names}
        changes.update(dict(cursor.fetchall()))
        chosen = tables_to_analyze(changes)
        for name in chosen:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(name)}")
    return chosen
