"""Many state moves in ONE statement (PostgreSQL): compare-and-set on each row's expected state,
the rows locked in id order, and each moved job's timeline line inserted by the same statement.

The resync's moves (jobs.services.job_transition_many) used to take a SELECT … FOR UPDATE, an
UPDATE per distinct (from, to, reason, message) and an INSERT of the events per page; a page
of 1,000 moves with as many distinct messages was 1,002 round trips. Here it is one:

    WITH v(id, expected, to_state, reason, message) AS (VALUES …),
         locked AS (SELECT … ORDER BY id FOR UPDATE OF j),   -- id order: two passes never deadlock
         moved AS (UPDATE … WHERE j.state = v.expected RETURNING …)
    INSERT INTO <events> SELECT … FROM moved RETURNING job_id

A row whose state is no longer the one read (a reconcile or the watcher moved it meanwhile) is
neither updated nor given an event: READ COMMITTED re-checks `state = expected` on the newest
version of a row it had to wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import connection

from jobs.models import Job, JobEvent

# (job id, expected state, new state, reason, message), as `job_transition_many` decides them.
MoveRow = tuple[int, str, str, str, str]

# The event columns this statement fills, and with what; every other column must be nullable
# (tests/jobs/test_bulk_moves.py keeps this list honest against the model).
EVENT_COLUMNS = {
    "job": "moved.id",
    "created_at": "%(now)s",
    "from_state": "moved.expected",
    "to_state": "moved.to_state",
    "reason": "moved.reason",
    "message": "moved.message",
    "source": "%(source)s",
    "count": "1",
    "warning": "false",
}


def _column(model, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def move_sql(rows: int, *, reconciled: bool) -> str:
    """The statement for `rows` moves (named parameters: now, source; then the rows' values)."""
    if rows < 1:
        raise ValueError("no moves")
    q = connection.ops.quote_name
    jobs, events = q(Job._meta.db_table), q(JobEvent._meta.db_table)
    values = ", ".join(
        f"(%(id{i})s::bigint, %(ex{i})s::text, %(to{i})s::text, %(re{i})s::text, %(me{i})s::text)"
        for i in range(rows)
    )
    pk, state = _column(Job, "id"), _column(Job, "state")
    sets = [
        f"{state} = v.to_state",
        f"{_column(Job, 'state_reason')} = v.reason",
        f"{_column(Job, 'state_message')} = v.message",
        f"{_column(Job, 'state_changed_at')} = %(now)s",
        f"{_column(Job, 'updated_at')} = %(now)s",
    ]
    if reconciled:
        sets.append(f"{_column(Job, 'last_reconciled_at')} = %(now)s")
    columns = ", ".join(_column(JobEvent, name) for name in EVENT_COLUMNS)
    selected = ", ".join(EVENT_COLUMNS.values())
    # Identifiers come from the models' meta, every value is a parameter.
    return (
        f"WITH v (id, expected, to_state, reason, message) AS (VALUES {values}), "  # noqa: S608
        f"locked AS (SELECT j.{pk} FROM {jobs} j JOIN v ON v.id = j.{pk} "
        f"WHERE j.{state} = v.expected ORDER BY j.{pk} FOR UPDATE OF j), "
        f"moved AS (UPDATE {jobs} j SET {', '.join(sets)} FROM v "
        f"WHERE j.{pk} = v.id AND j.{pk} IN (SELECT {pk} FROM locked) "
        f"AND j.{state} = v.expected "
        f"RETURNING j.{pk} AS id, v.expected, v.to_state, v.reason, v.message) "
        f"INSERT INTO {events} ({columns}) SELECT {selected} FROM moved ORDER BY moved.id "
        f"RETURNING {_column(JobEvent, 'job')}"
    )


def move_params(rows: Sequence[MoveRow], *, now: datetime, source: str) -> dict[str, object]:
    params: dict[str, object] = {"now": now, "source": source}
    for i, (job_id, expected, to, reason, message) in enumerate(rows):
        params.update({f"id{i}": job_id, f"ex{i}": expected, f"to{i}": to, f"re{i}": reason[:64]})
        params[f"me{i}"] = message
    return params


def move_rows(rows: Sequence[MoveRow], *, now: datetime, source: str, reconciled: bool) -> set[int]:
    """Move the rows still in their expected state; the ids moved (each now has its event)."""
    if not rows:
        return set()
    with connection.cursor() as cursor:
        cursor.execute(
            move_sql(len(rows), reconciled=reconciled), move_params(rows, now=now, source=source)
        )
        return {row[0] for row in cursor.fetchall()}
