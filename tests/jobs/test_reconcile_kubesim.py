"""Reconciliation against a real kubesim (HTTPS Kubernetes API, CRD schemas, Kueue/Volcano
simulation), in-process: services and tasks' bodies, no Celery (tests/e2e has the worker)."""

import time

import pytest

from tests.jobs.kubesim_org import count_owned, reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


@pytest.mark.parametrize(
    ("data", "objects"),
    [
        ({"kind": "single", "gpus": 1}, [("Job", "batch/v1")]),
        ({"kind": "mig", "mig_profile": "1g.10gb"}, [("Job", "batch/v1")]),
        (
            {"kind": "gang", "gpus": 8, "replicas": 2, "backend": "kueue"},
            [("Job", "batch/v1"), ("Service", "v1")],
        ),
        (
            {"kind": "gang", "gpus": 8, "replicas": 2, "backend": "volcano"},
            [("Job", "batch.volcano.sh/v1alpha1")],
        ),
    ],
    ids=["single", "mig", "gang-kueue", "gang-volcano"],
)
def test_each_kind_runs_to_success_and_reconcile_twice_creates_nothing_twice(org, data, objects):
    from jobs.reconcile.services import job_reconcile

    job = submit(org, **data)
    ns = org["project"].namespace
    assert job_reconcile(job_id=job.pk) == "applied"
    job_reconcile(job_id=job.pk)
    job_reconcile(job_id=job.pk)
    for kind, api_version in objects:
        assert count_owned(kind, api_version, ns, job.pk) == 1
    seen = reconcile_until(job, {"succeeded", "failed"})
    assert seen[-1] == "succeeded", seen
    assert "running" in seen or "admitted" in seen or "queued" in seen


@pytest.mark.django_db(transaction=True)
def test_concurrent_reconciles_create_one_object(org):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from jobs.reconcile.services import job_reconcile

    job = submit(org, kind="single", gpus=1)

    def run(_):
        try:
            return job_reconcile(job_id=job.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(run, range(4)))
    assert count_owned("Job", "batch/v1", org["project"].namespace, job.pk) == 1


def test_cancel_deletes_the_cluster_objects(org):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_cancel

    job = submit(org, kind="gang", gpus=1, replicas=2, backend="kueue")
    job_reconcile(job_id=job.pk)
    ns = org["project"].namespace
    assert count_owned("Service", "v1", ns, job.pk) == 1
    job_cancel(actor=org["user"], job=job)
    assert job_reconcile(job_id=job.pk) == "deleted"
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    assert count_owned("Job", "batch/v1", ns, job.pk) == 0
    assert count_owned("Service", "v1", ns, job.pk) == 0


def test_drift_before_start_recreates_and_after_start_fails(org, settings):
    from jobs.manifests import object_name
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from portal.kube import apply as kube

    ns = org["project"].namespace
    # Queued job (it asks for more than is free right now? no: simply not admitted yet).
    queued = submit(org, kind="single", gpus=1, priority="low")
    job_reconcile(job_id=queued.pk)
    kube.delete("batch/v1", "Job", object_name(queued.pk), ns)
    assert job_reconcile(job_id=queued.pk) == "recreated"
    assert count_owned("Job", "batch/v1", ns, queued.pk) == 1

    # A job seen running, then deleted by hand, is marked failed with the reason.
    job = submit(org, kind="single", gpus=1, command=["sleep", "3600"])
    reconcile_until(job, {"running"})
    kube.delete("batch/v1", "Job", object_name(job.pk), ns)
    time.sleep(0.2)
    assert job_reconcile(job_id=job.pk) == "failed"
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "failed"
    assert stored.state_reason == "ObjectDeleted"
    assert "deleted outside the portal" in stored.state_message


def test_a_rejected_manifest_marks_the_job_failed_with_the_servers_message(org):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile

    job = submit(org, kind="single", gpus=1)
    # Bypass validation to make the API server itself refuse the object.
    Job.objects.filter(pk=job.pk).update(cpu="lots")
    assert job_reconcile(job_id=job.pk) == "rejected"
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "failed"
    assert stored.state_reason == "Rejected"
    assert "is invalid" in stored.state_message or "quantities" in stored.state_message


def test_a_failing_container_fails_the_job_with_its_exit_code(org):
    from jobs.models import Job

    job = submit(org, kind="single", gpus=1, command=["sh", "-c", "sleep 1; exit 3"])
    seen = reconcile_until(job, {"succeeded", "failed"})
    assert seen[-1] == "failed", seen
    stored = Job.objects.get(pk=job.pk)
    assert "exited with code 3" in stored.state_message, stored.state_message


def test_a_higher_priority_job_preempts_and_the_victim_shows_preempted(org):
    from jobs.models import Job

    low = submit(org, kind="gang", gpus=8, replicas=2, priority="low", command=["sleep", "36000"])
    reconcile_until(low, {"running"})
    high = submit(org, kind="gang", gpus=8, replicas=2, priority="high")
    reconcile_until(high, {"admitted", "running", "succeeded"})
    reconcile_until(low, {"preempted", "queued"})
    stored = Job.objects.get(pk=low.pk)
    events = list(stored.events.values_list("to_state", flat=True))
    assert "preempted" in events, (events, stored.state_reason, stored.state_message)
    # The victim is requeued, not failed: once the high-priority gang is done it runs again.
    reconcile_until(high, {"succeeded"})
    seen = reconcile_until(low, {"running", "failed"})
    assert seen[-1] == "running", (seen, Job.objects.get(pk=low.pk).state_message)
