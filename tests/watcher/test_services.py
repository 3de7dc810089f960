"""The watcher's writes in jobs.services, on PostgreSQL: compare-and-set on the state the caller
saw, cluster events folded by uid, pod rows."""

import pytest

from jobs.status import PodRecord

pytestmark = pytest.mark.django_db


def test_a_transition_from_a_stale_reading_is_refused_and_writes_nothing(make_job):
    from jobs.models import Job, JobEvent
    from jobs.services import InvalidTransition, job_transition

    job = make_job()
    job_transition(
        job, to="running", reason="PodsReady", source="reconciler", expected_from="submitted"
    )
    stale = Job.objects.get(pk=job.pk)
    stale.state = "queued"  # what a slower writer last saw
    with pytest.raises(InvalidTransition):
        # queued → admitted is allowed by the table, but the job is no longer queued.
        job_transition(
            stale, to="admitted", reason="QuotaReserved", source="watcher", expected_from="queued"
        )
    assert Job.objects.get(pk=job.pk).state == "running"
    assert JobEvent.objects.filter(job=job, to_state="admitted").count() == 0
    job_transition(
        job, to="succeeded", reason="Completed", source="watcher", expected_from="running"
    )
    assert Job.objects.get(pk=job.pk).state == "succeeded"


def test_a_cluster_event_seen_again_only_raises_its_count(make_job):
    from jobs.models import JobEvent
    from jobs.services import job_record_cluster_event

    job = make_job()
    common = {
        "job_id": job.pk,
        "key": "uid-1",
        "reason": "BackOff",
        "occurred_at": "2026-01-01T00:00:00Z",
        "warning": True,
    }
    assert job_record_cluster_event(message="keeps failing", count=1, **common) is True
    assert job_record_cluster_event(message="keeps failing", count=3, **common) is False
    # A replay of an older copy (relist, second watcher) never lowers it.
    assert job_record_cluster_event(message="keeps failing", count=2, **common) is False
    rows = JobEvent.objects.filter(job=job, dedupe_key="uid-1")
    assert [(r.count, r.to_state, r.warning) for r in rows] == [(3, "", True)]


def test_pod_rows_are_upserted_by_uid_and_kept_when_the_pod_goes(make_job):
    from jobs.models import JobPod
    from jobs.services import job_record_pods

    job = make_job()
    record = PodRecord(
        uid="p1",
        name="gp-job-1-abc",
        rank=0,
        node="node-1",
        phase="Running",
        started_at="2026-01-01T00:00:00Z",
        finished_at=None,
        gpu_uuids=["GPU-1"],
        gpu_indices=[2],
        exit_code=None,
        reason="",
        message="",
        restart_count=0,
        container="trainer",
    )
    job_record_pods(job_id=job.pk, records=[record], present_uids={"p1"})
    job_record_pods(job_id=job.pk, records=[record], present_uids={"p1"})
    assert JobPod.objects.filter(job=job).count() == 1
    job_record_pods(job_id=job.pk, records=[], present_uids=set())
    pod = JobPod.objects.get(job=job)
    assert pod.deleted
    assert (pod.node, pod.gpu_indices) == ("node-1", [2])


def test_a_pod_that_changes_is_updated_in_place_and_a_new_one_added_in_one_write(
    make_job, django_assert_num_queries
):
    import dataclasses

    from jobs.models import JobPod
    from jobs.services import job_record_pods

    job = make_job()
    first = PodRecord(
        uid="p1", name="gp-job-1-a", rank=0, node="node-1", phase="Pending", started_at=None,
        finished_at=None, gpu_uuids=[], gpu_indices=[], exit_code=None, reason="", message="",
        restart_count=0, container="trainer",
    )  # fmt: skip
    job_record_pods(job_id=job.pk, records=[first], present_uids={"p1"})
    running = dataclasses.replace(first, phase="Running", gpu_indices=[0])
    second = dataclasses.replace(first, uid="p2", name="gp-job-1-b", rank=1)

    with django_assert_num_queries(2):  # the upsert, then the deleted-pods update
        job_record_pods(job_id=job.pk, records=[running, second], present_uids={"p1", "p2"})

    rows = {p.uid: (p.phase, p.gpu_indices, p.rank) for p in JobPod.objects.filter(job=job)}
    assert rows == {"p1": ("Running", [0], 0), "p2": ("Pending", [], 1)}
