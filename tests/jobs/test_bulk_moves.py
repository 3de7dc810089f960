"""The resync's moves in one statement (jobs.reconcile.bulk): its shape, its parameters, and
what a page of moves leaves in the database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobs.reconcile import bulk

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_every_event_column_the_statement_leaves_out_may_be_null():
    from jobs.models import JobEvent

    left_out = [
        field.name
        for field in JobEvent._meta.concrete_fields
        if not field.primary_key and field.name not in bulk.EVENT_COLUMNS
    ]

    assert left_out  # occurred_at, dedupe_key
    for name in left_out:
        assert JobEvent._meta.get_field(name).null, f"{name} needs a value in EVENT_COLUMNS"


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([], {"now": NOW, "source": "reconciler"}),
        (
            [(7, "queued", "running", "PodsRunning", "1/1 pods ready")],
            {
                "now": NOW,
                "source": "reconciler",
                "id0": 7,
                "ex0": "queued",
                "to0": "running",
                "re0": "PodsRunning",
                "me0": "1/1 pods ready",
            },
        ),
        (
            [(1, "queued", "admitted", "R" * 80, ""), (2, "running", "succeeded", "Done", "m")],
            {
                "now": NOW,
                "source": "reconciler",
                "id0": 1,
                "ex0": "queued",
                "to0": "admitted",
                "re0": "R" * 64,  # the reason column's length, as job_transition cuts it
                "me0": "",
                "id1": 2,
                "ex1": "running",
                "to1": "succeeded",
                "re1": "Done",
                "me1": "m",
            },
        ),
    ],
)
def test_the_parameters_name_each_rows_values(rows, expected):
    assert bulk.move_params(rows, now=NOW, source="reconciler") == expected


@pytest.mark.parametrize(
    ("rows", "reconciled", "present", "absent"),
    [
        (1, False, ["%(id0)s::bigint", "FOR UPDATE OF j", "ORDER BY j"], ["%(id1)s"]),
        (3, True, ["%(me2)s::text", '"last_reconciled_at" = %(now)s'], ["%(id3)s"]),
        (2, False, ["RETURNING", "INSERT INTO"], ["last_reconciled_at"]),
    ],
)
def test_the_statement_has_a_values_row_per_move_and_stamps_reconciled_when_asked(
    rows, reconciled, present, absent
):
    sql = bulk.move_sql(rows, reconciled=reconciled)

    assert sql.count("::bigint") == rows
    for text in present:
        assert text in sql
    for text in absent:
        assert text not in sql


def test_no_moves_is_no_statement():
    with pytest.raises(ValueError, match="no moves"):
        bulk.move_sql(0, reconciled=False)
    assert bulk.move_rows([], now=NOW, source="x", reconciled=False) == set()


@pytest.mark.django_db
def test_a_page_of_moves_writes_states_stamps_and_one_event_each_in_one_statement(
    make_job, django_assert_num_queries
):
    from jobs.models import Job, JobEvent

    jobs = [make_job(state="queued") for _ in range(3)]
    Job.objects.filter(pk=jobs[2].pk).update(state="cancelled")  # moved meanwhile
    rows = [(j.pk, "queued", "running", "PodsRunning", f"pod {i}") for i, j in enumerate(jobs)]

    with django_assert_num_queries(1):
        moved = bulk.move_rows(rows, now=NOW, source="reconciler", reconciled=True)

    assert moved == {jobs[0].pk, jobs[1].pk}
    stored = {j.pk: j for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    assert [stored[j.pk].state for j in jobs] == ["running", "running", "cancelled"]
    assert stored[jobs[1].pk].state_message == "pod 1"
    assert stored[jobs[0].pk].last_reconciled_at == NOW
    assert stored[jobs[0].pk].state_changed_at == NOW
    assert stored[jobs[2].pk].last_reconciled_at is None
    events = JobEvent.objects.filter(source="reconciler").order_by("job_id")
    assert [(e.job_id, e.from_state, e.to_state, e.message, e.count) for e in events] == [
        (jobs[0].pk, "queued", "running", "pod 0", 1),
        (jobs[1].pk, "queued", "running", "pod 1", 1),
    ]
    assert {e.created_at for e in events} == {NOW}
