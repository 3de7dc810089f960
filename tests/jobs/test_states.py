"""jobs/states.py and jobs.services.job_transition: the only writer of Job.state."""

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from jobs.states import ACTIVE, TERMINAL, TRANSITIONS, JobState, can_transition, sources_for


def test_table_covers_every_state_and_terminal_states_are_absorbing():
    assert set(TRANSITIONS) == set(JobState.values)
    for state in TERMINAL:
        assert TRANSITIONS[state] == frozenset()
    assert set(JobState.values) == ACTIVE | TERMINAL
    for targets in TRANSITIONS.values():
        assert JobState.SUBMITTED not in targets  # nothing goes back to Submitted


def test_every_active_state_can_be_cancelled_and_fail():
    for state in ACTIVE:
        assert can_transition(state, JobState.CANCELLED)
        assert can_transition(state, JobState.FAILED)


def test_sources_for_is_the_inverse_of_the_table():
    for to in JobState.values:
        for src in JobState.values:
            assert (src in sources_for(to)) == can_transition(src, to)


@pytest.mark.django_db
def test_transition_writes_state_and_event_together(make_job):
    from jobs.models import Job
    from jobs.services import job_transition

    job = make_job()
    job_transition(
        job,
        expected_from=job.state,
        to="queued",
        reason="Pending",
        message="waiting",
        source="test",
    )
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.state_reason, stored.state_message) == (
        "queued",
        "Pending",
        "waiting",
    )
    (event,) = stored.events.all()
    assert (event.from_state, event.to_state, event.reason, event.source) == (
        "submitted",
        "queued",
        "Pending",
        "test",
    )


@pytest.mark.django_db
def test_refused_transition_changes_nothing(make_job):
    from jobs.models import Job
    from jobs.services import InvalidTransition, job_transition

    job = make_job()
    job_transition(job, expected_from=job.state, to="succeeded", reason="Completed", source="test")
    with pytest.raises(InvalidTransition, match="is Succeeded; it cannot become Cancelled"):
        job_transition(job, expected_from=job.state, to="cancelled", reason="x", source="test")
    assert Job.objects.get(pk=job.pk).state == "succeeded"
    assert Job.objects.get(pk=job.pk).events.count() == 1


@pytest.mark.django_db
def test_compare_and_set_uses_the_stored_state_not_the_stale_object(make_job):
    """A stale in-memory copy cannot resurrect a job another writer already finished."""
    from jobs.models import Job
    from jobs.services import InvalidTransition, job_transition

    job = make_job()
    stale = Job.objects.get(pk=job.pk)
    job_transition(job, expected_from=job.state, to="cancelled", reason="Cancelled", source="api")
    with pytest.raises(InvalidTransition):
        job_transition(
            stale, expected_from=stale.state, to="running", reason="PodsReady", source="reconciler"
        )
    assert Job.objects.get(pk=job.pk).state == "cancelled"


@pytest.mark.django_db
def test_database_refuses_an_unknown_state(make_job):
    from django.db import IntegrityError, transaction

    from jobs.models import Job

    job = make_job()
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(state="exploded")


@pytest.mark.django_db
def test_random_event_sequences_never_leave_the_graph(make_job):
    """Hypothesis drives random transition requests; the stored state and the event log always
    agree with the table, refused requests change nothing, terminal states absorb."""
    from jobs.models import Job
    from jobs.services import InvalidTransition, job_transition

    class JobMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.job = make_job()
            self.model_state = JobState.SUBMITTED
            self.events = 0

        @rule(to=st.sampled_from(JobState.values))
        def request(self, to):
            allowed = can_transition(self.model_state, to)
            try:
                job_transition(
                    self.job,
                    expected_from=self.job.state,
                    to=to,
                    reason="Test",
                    source="hypothesis",
                )
            except InvalidTransition:
                assert not allowed
            else:
                assert allowed
                self.model_state = to
                self.events += 1

        @invariant()
        def stored_state_matches_model(self):
            stored = Job.objects.get(pk=self.job.pk)
            assert stored.state == self.model_state
            events = list(stored.events.order_by("id"))
            assert len(events) == self.events
            previous = JobState.SUBMITTED
            for event in events:
                assert event.from_state == previous
                assert can_transition(event.from_state, event.to_state)
                previous = event.to_state

    run_state_machine_as_test(
        JobMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=12,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


@pytest.mark.django_db
def test_a_transition_from_a_state_the_job_has_left_changes_nothing_and_writes_no_event(make_job):
    """A resync that read the job as Admitted cannot move it to Queued once a reconcile has
    moved it on to Running: the UPDATE compares against what the caller saw."""
    from jobs.models import Job
    from jobs.services import StaleTransition, job_transition

    job = make_job()
    job_transition(job, expected_from="submitted", to="admitted", reason="Admitted", source="test")
    snapshot = Job.objects.get(pk=job.pk)  # what the resync read
    job_transition(job, expected_from="admitted", to="running", reason="PodsReady", source="test")
    with pytest.raises(StaleTransition, match="is Running"):
        job_transition(
            snapshot, expected_from=snapshot.state, to="queued", reason="Pending", source="resync"
        )
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "running"
    assert list(stored.events.values_list("to_state", flat=True)) == ["admitted", "running"]


@pytest.mark.django_db
def test_expected_from_takes_the_state_member_too(make_job):
    from jobs.services import job_transition
    from jobs.states import JobState

    job = make_job()
    job_transition(
        job,
        expected_from=JobState.SUBMITTED,
        to=JobState.QUEUED,
        reason="Pending",
        source="watcher",
    )
    assert job.state == "queued"
    assert job.events.get().from_state == "submitted"


@pytest.mark.django_db
def test_bulk_transition_moves_only_jobs_still_in_the_state_read(make_job):
    """The resync's bulk move: the same compare-and-set per job as job_transition. A job another
    writer moved meanwhile, and a move the table forbids, change nothing and get no event."""
    from jobs.models import Job, JobEvent
    from jobs.services import Move, job_transition, job_transition_many

    queued = [make_job(state="queued") for _ in range(3)]
    raced = Job.objects.get(pk=queued[2].pk)  # the resync's copy, read as Queued
    job_transition(queued[2], expected_from="queued", to="cancelled", reason="x", source="api")
    finished = make_job(state="succeeded")
    moves = [
        Move(queued[0], "running", "PodsRunning", "1/1 pods ready"),
        Move(queued[1], "admitted", "PodsStarting", "0/1 pods ready"),
        Move(raced, "running", "PodsRunning", "1/1 pods ready"),
        Move(finished, "running", "PodsRunning", "1/1 pods ready"),
    ]

    moved = job_transition_many(moves, source="reconciler")

    assert [j.pk for j in moved] == [queued[0].pk, queued[1].pk]
    stored = dict(Job.objects.values_list("pk", "state"))
    assert [stored[j.pk] for j in (*queued, finished)] == [
        "running",
        "admitted",
        "cancelled",
        "succeeded",
    ]
    stored0 = Job.objects.get(pk=queued[0].pk)
    assert (stored0.state_reason, stored0.state_message) == ("PodsRunning", "1/1 pods ready")
    assert (queued[0].state, queued[0].state_reason) == ("running", "PodsRunning")  # in place
    assert raced.state == "queued"  # not moved: left as read
    events = JobEvent.objects.filter(source="reconciler").order_by("job_id")
    assert [(e.job_id, e.from_state, e.to_state, e.reason) for e in events] == [
        (queued[0].pk, "queued", "running", "PodsRunning"),
        (queued[1].pk, "queued", "admitted", "PodsStarting"),
    ]


@pytest.mark.django_db(transaction=True)
def test_bulk_transition_publishes_one_notice_per_moved_job_after_commit(
    make_job, settings, redis_server
):
    import json
    import time

    import redis

    from jobs.services import Move, job_transition_many
    from portal import pubsub

    url = redis_server.url()
    settings.PORTAL_PUBSUB_URL = url
    pubsub._client = None
    jobs = [make_job(state="queued") for _ in range(3)]
    listener = redis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
    channel = f"portal:jobs:{jobs[0].project.slug}"
    listener.subscribe(channel)
    try:
        while listener.get_message(timeout=0.2) is not None:
            pass
        job_transition_many([Move(j, "running", "PodsRunning") for j in jobs], source="test")
        got = []
        deadline = time.monotonic() + 5
        while len(got) < 3 and time.monotonic() < deadline:
            message = listener.get_message(timeout=0.5)
            if message:
                got.append(json.loads(message["data"]))
    finally:
        listener.close()
        pubsub._client = None
    assert sorted(got, key=lambda m: m["job"]) == [{"job": j.pk, "state": "running"} for j in jobs]


@pytest.mark.django_db
def test_bulk_status_notes_write_only_changed_texts_of_jobs_still_in_that_state(make_job):
    from jobs.models import Job
    from jobs.services import job_note_status_many

    same = make_job(state="running", state_reason="PodsRunning", state_message="1/1 pods ready")
    changed = make_job(state="running", state_reason="PodsRunning", state_message="0/1 pods ready")
    moved_on = make_job(state="running")
    stale = Job.objects.get(pk=moved_on.pk)
    Job.objects.filter(pk=moved_on.pk).update(state="succeeded", state_reason="Completed")
    before = Job.objects.get(pk=same.pk).updated_at

    noted = job_note_status_many(
        [(j, "PodsRunning", "1/1 pods ready") for j in (same, changed, stale)]
    )

    assert noted == 2  # `same` needed no write
    assert Job.objects.get(pk=same.pk).updated_at == before
    assert Job.objects.get(pk=changed.pk).state_message == "1/1 pods ready"
    assert Job.objects.get(pk=moved_on.pk).state_reason == "Completed"  # not its state's text


@pytest.mark.django_db
def test_a_deadlocked_bulk_transition_falls_back_to_one_job_at_a_time(make_job, monkeypatch):
    """Postgres chose the bulk move as a deadlock victim (another multi-row writer locked the
    rows in another order): nothing of it was written, so the jobs move one by one instead,
    still compare-and-set and stamped reconciled."""
    from django.db import OperationalError
    from psycopg.errors import DeadlockDetected

    from jobs import services
    from jobs.models import Job, JobEvent

    def deadlocked(moves, **kwargs):
        try:
            raise DeadlockDetected("deadlock detected")
        except DeadlockDetected as cause:
            raise OperationalError("deadlock detected") from cause

    monkeypatch.setattr(services, "_transition_chunk", deadlocked)
    jobs = [make_job(state="queued") for _ in range(2)]
    raced = Job.objects.get(pk=jobs[1].pk)
    Job.objects.filter(pk=jobs[1].pk).update(state="running")

    moved = services.job_transition_many(
        [services.Move(jobs[0], "admitted", "PodsStarting"), services.Move(raced, "admitted", "x")],
        source="reconciler",
        reconciled=True,
    )

    assert [j.pk for j in moved] == [jobs[0].pk]
    stored = Job.objects.get(pk=jobs[0].pk)
    assert stored.state == "admitted"
    assert stored.last_reconciled_at is not None
    assert Job.objects.get(pk=jobs[1].pk).state == "running"
    assert list(JobEvent.objects.values_list("job_id", flat=True)) == [jobs[0].pk]
