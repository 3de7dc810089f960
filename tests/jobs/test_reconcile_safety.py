"""Reconciliation under concurrency, against kubesim and PostgreSQL: a cancel racing an apply,
a resync acting on a stale snapshot, the sweep of objects no live job wants, a namespace being
deleted under a job."""

import threading
import time

import pytest

from tests.jobs.kubesim_org import count_owned, reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


def wait_until(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def advisory_lock_waiters() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["first-apply", "recreate"])
def test_a_cancel_racing_an_apply_leaves_no_job_in_the_cluster(org, monkeypatch, settings, path):
    """Reconcile A is inside its apply when the user cancels and reconcile B (the cancel's)
    runs; whatever the order, once both are done the cancelled job has nothing in the cluster.

    A's apply is held at a hook point (just before the request leaves) until B has either
    finished or is waiting for the job's lock, then let go: the interleaving that left a running
    Job no one deleted.
    """
    from django.db import connection

    from jobs.manifests import object_name
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_cancel
    from portal.kube import apply as kube

    ns = org["project"].namespace
    settings.PORTAL_JOB_LOCK_WAIT_SECONDS = 120  # B waits for A however loaded the machine is
    job = submit(org, kind="single", gpus=1, command=["sleep", "3600"])
    if path == "recreate":
        assert job_reconcile(job_id=job.pk) == "applied"
        kube.delete("batch/v1", "Job", object_name(job.pk), ns)
        wait_until(lambda: kube.get("batch/v1", "Job", object_name(job.pk), ns) is None)

    entered, release = threading.Event(), threading.Event()
    real_apply = kube.apply

    def apply_held_for_a(obj, **kwargs):
        if threading.current_thread().name == "reconcile-A":
            entered.set()
            assert release.wait(60)
        return real_apply(obj, **kwargs)

    monkeypatch.setattr(kube, "apply", apply_held_for_a)
    results = {}

    def run(name):
        try:
            results[name] = job_reconcile(job_id=job.pk)
        except Exception as exc:  # reported by the assertions below
            results[name] = exc
        finally:
            connection.close()

    a = threading.Thread(target=run, args=("A",), name="reconcile-A")
    a.start()
    assert entered.wait(30), results
    job_cancel(actor=org["user"], job=Job.objects.get(pk=job.pk))
    b = threading.Thread(target=run, args=("B",), name="reconcile-B")
    b.start()
    # B either runs to its end now or queues behind A's lock: both are deterministic points.
    wait_until(lambda: not b.is_alive() or advisory_lock_waiters() > 0, what="B to finish or wait")
    release.set()
    a.join(60)
    b.join(60)
    assert not a.is_alive()
    assert not b.is_alive()
    assert not any(isinstance(r, Exception) for r in results.values()), results

    assert count_owned("Job", "batch/v1", ns, job.pk) == 0, results
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.cleanup_pending) == ("cancelled", False)


# transaction=True: the resync lists in a reader thread (its own connection), where the racing
# reconcile's write is made; as in production, that write is committed when the pass goes on.
@pytest.mark.django_db(transaction=True)
def test_a_stale_resync_snapshot_cannot_move_a_running_job_back(org, monkeypatch):
    """The resync read the job as Admitted and the cluster as Queued; while it was listing, a
    reconcile saw the pods start. Its stale view must not move Running back to Queued."""
    from django.db import connection

    from jobs.models import Job, JobEvent
    from jobs.reconcile import services as reconcile

    job = submit(org, kind="single", gpus=1)
    # More GPUs than the queue can ever admit: Kueue keeps the workload pending (Queued).
    Job.objects.filter(pk=job.pk).update(gpus=64)
    reconcile_until(job, {"queued"})
    Job.objects.filter(pk=job.pk).update(state="admitted")
    real_list = reconcile._namespace_snapshots

    def list_then_a_reconcile_moves_the_job(namespace, jobs):
        snapshots = real_list(namespace, jobs)
        Job.objects.filter(pk=job.pk, state="admitted").update(state="running")
        connection.close()  # the reader thread's own connection
        return snapshots

    monkeypatch.setattr(reconcile, "_namespace_snapshots", list_then_a_reconcile_moves_the_job)
    events_before = JobEvent.objects.filter(job_id=job.pk).count()
    reconcile.resync_jobs(enqueue=lambda _job_id: None)
    assert Job.objects.get(pk=job.pk).state == "running"
    assert JobEvent.objects.filter(job_id=job.pk).count() == events_before


def _batch_job(name, namespace, labels):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                }
            },
        },
    }


def test_the_resync_sweeps_objects_of_cancelled_and_unknown_jobs_and_nothing_else(org):
    from jobs.manifests import object_name
    from jobs.models import Job, JobEvent
    from jobs.reconcile.services import job_reconcile, resync_jobs
    from jobs.selectors import job_manifests
    from jobs.services import job_cancel
    from portal.kube import apply as kube

    ns = org["project"].namespace
    command = ["sleep", "3600"]
    # A job the portal no longer has (its row was deleted), whose Job is still there.
    forgotten = submit(org, kind="single", gpus=1, command=command)
    forgotten_manifests = job_manifests(forgotten)
    forgotten_id = forgotten.pk
    Job.objects.filter(pk=forgotten_id).delete()
    for manifest in forgotten_manifests:
        kube.apply(manifest)
    # A cancelled job whose Job came back after its clean-up (a delayed apply landing late).
    cancelled = submit(org, kind="gang", gpus=1, replicas=2, backend="kueue", command=command)
    assert job_reconcile(job_id=cancelled.pk) == "applied"
    job_cancel(actor=org["user"], job=cancelled)
    assert job_reconcile(job_id=cancelled.pk) == "deleted"
    for manifest in job_manifests(cancelled):
        kube.apply(manifest)
    # A live job, an object for an id newer than any job here, and one without the portal's
    # managed-by label: none of them is the sweep's to delete.
    live = submit(org, kind="single", gpus=1, command=command)
    assert job_reconcile(job_id=live.pk) == "applied"
    for manifest in job_manifests(live, job_id=live.pk + 10_000):
        kube.apply(manifest)
    foreign = _batch_job("someone-elses", ns, {"gpu-portal.io/job-id": str(cancelled.pk)})
    kube.apply(foreign)

    counts = resync_jobs(enqueue=lambda _job_id: None)

    assert count_owned("Job", "batch/v1", ns, forgotten_id) == 0
    assert count_owned("Job", "batch/v1", ns, cancelled.pk) == 0
    assert count_owned("Service", "v1", ns, cancelled.pk) == 0
    assert counts["swept"] == 3, counts
    events = list(JobEvent.objects.filter(job=cancelled, reason="OrphanDeleted"))
    assert {e.message.split(" from ")[0] for e in events} == {
        f"deleted Job {object_name(cancelled.pk)}",
        f"deleted Service {object_name(cancelled.pk)}",
    }
    assert all("the job was cancelled" in e.message for e in events)
    assert count_owned("Job", "batch/v1", ns, live.pk) == 1
    assert count_owned("Job", "batch/v1", ns, live.pk + 10_000) == 1
    assert kube.get("batch/v1", "Job", "someone-elses", ns) is not None
    # Nothing left to do: a second pass deletes nothing and writes no event.
    assert resync_jobs(enqueue=lambda _job_id: None)["swept"] == 0
    assert JobEvent.objects.filter(job=cancelled, reason="OrphanDeleted").count() == 2


def test_a_finished_jobs_objects_go_after_the_retention_with_its_last_log_lines_kept(
    org, settings, web_client_for
):
    from jobs.models import Job, JobEvent
    from jobs.reconcile.services import resync_jobs

    ns = org["project"].namespace
    job = submit(
        org, kind="single", gpus=1, command=["sh", "-c", "echo epoch 1 loss 0.9; echo saved"]
    )
    reconcile_until(job, {"succeeded"})
    settings.PORTAL_JOB_RETENTION_SECONDS = 3600
    resync_jobs(enqueue=lambda _job_id: None)
    assert count_owned("Job", "batch/v1", ns, job.pk) == 1  # within the retention: kept

    settings.PORTAL_JOB_RETENTION_SECONDS = 0
    resync_jobs(enqueue=lambda _job_id: None)
    assert count_owned("Job", "batch/v1", ns, job.pk) == 0
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "succeeded"
    assert "epoch 1 loss 0.9" in stored.logs_tail
    assert "saved" in stored.logs_tail
    (event,) = JobEvent.objects.filter(job=job, reason="RetentionExpired")
    assert "retention" in event.message
    page = web_client_for(org["user"]).get(f"/jobs/{job.pk}/")
    assert "Last log lines" in page.content.decode()
    assert "epoch 1 loss 0.9" in page.content.decode()


def test_a_job_in_a_namespace_being_deleted_waits_instead_of_failing(org):
    """403 "being terminated" is a passing state: the namespace goes, the quota sync creates it
    again, and the job is applied then."""
    from kubernetes import client as k8s

    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from portal.kube import apply as kube
    from portal.kube.apply import RetryableKubeError
    from portal.kube.client import get_api_client
    from quotas.sync import sync_quota_objects

    ns = org["project"].namespace
    core = k8s.CoreV1Api(get_api_client())
    core.patch_namespace(ns, {"metadata": {"finalizers": ["test.gpu-portal.io/hold"]}})
    kube.delete("v1", "Namespace", ns)
    job = submit(org, kind="single", gpus=1)
    with pytest.raises(RetryableKubeError, match="being terminated"):
        job_reconcile(job_id=job.pk)
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == "submitted"
    assert stored.applied_at is None

    core.patch_namespace(ns, {"metadata": {"finalizers": None}})
    wait_until(lambda: kube.get("v1", "Namespace", ns) is None, what="the namespace to go")
    assert sync_quota_objects().errors == []
    assert job_reconcile(job_id=job.pk) == "applied"
    assert count_owned("Job", "batch/v1", ns, job.pk) == 1


def test_healthz_deep_is_ok_when_the_cluster_serves_every_backend(org, client):
    response = client.get("/healthz?deep=1")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert {name: b["installed"] for name, b in body["backends"].items()} == {
        "kueue": True,
        "volcano": True,
        "kai": True,  # kubesim serves KAI's CRDs too (portal.kube.discovery knows all three)
    }
