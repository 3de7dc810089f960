"""The small tables' planner statistics are refreshed when they change (portal.dbstats)."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.dbstats import analyze_small_tables, small_tables, tables_to_analyze
from tenants.models import Department, Project


def test_only_changed_or_unknown_tables_are_chosen():
    changes = {"tenants_project": 3, "tenants_membership": 0, "auth_user": None}
    assert tables_to_analyze(changes) == ["auth_user", "tenants_project"]
    assert tables_to_analyze(changes, at_least=5) == ["auth_user"]


def _planner_rows(table: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
        return cursor.fetchone()[0]


def _flush_statistics() -> None:
    # Table statistics reach pg_stat_user_tables when a backend flushes them (at most once a
    # second on its own); this backend's writes are flushed now.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")


@pytest.mark.django_db(transaction=True)
def test_new_projects_reach_the_planner_statistics():
    analyze_small_tables()
    department = Department.objects.create(slug="stats", name="Stats")
    for i in range(12):
        Project.objects.create(slug=f"stats-{i}", name=f"S{i}", department=department)
    _flush_statistics()
    before = _planner_rows("tenants_project")

    analysed = analyze_small_tables()

    assert "tenants_project" in analysed
    assert "tenants_department" in analysed
    assert before != Project.objects.count()
    assert _planner_rows("tenants_project") == Project.objects.count()
    _flush_statistics()
    assert "tenants_project" not in analyze_small_tables()  # nothing changed since


def test_the_users_table_is_one_of_them():
    from django.contrib.auth import get_user_model

    assert get_user_model()._meta.db_table in small_tables()
