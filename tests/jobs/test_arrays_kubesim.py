"""Job arrays against a real kubesim, in-process (the array pass's body, no Celery): at most
`parallelism` elements in the cluster, the next ones applied as earlier ones finish, each with
its own env; a held element's own reconcile does not apply it; two passes at once apply each
element once; cancel removes what reached the cluster."""

import pytest

from tests.jobs.kubesim_org import count_owned, reconcile_until

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


def submit_array(org, **data):
    from jobs.arrays.services import array_submit

    body = {
        "kind": "single",
        "gpus": 1,
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["sh", "-c", "sleep 5"],
    }
    body.update(data)
    return array_submit(actor=org["user"], project=org["project"], data=body)


def elements(array):
    from jobs.models import Job

    return list(Job.objects.filter(array=array, superseded=False).order_by("array_index"))


def in_cluster(org, jobs):
    ns = org["project"].namespace
    return [j.array_index for j in jobs if count_owned("Job", "batch/v1", ns, j.pk)]


def test_parallelism_holds_the_rest_until_earlier_elements_finish(org):
    from jobs.arrays.reconcile import array_reconcile
    from jobs.reconcile.services import job_reconcile
    from portal.kube import apply as kube

    array = submit_array(org, name="sw", sweep={"lr": [0.1, 0.01, 0.001]}, parallelism=2)
    jobs = elements(array)
    assert job_reconcile(job_id=jobs[2].pk) == "held"  # only the array's pass applies it
    assert array_reconcile(array_id=array.pk)["applied"] == 2
    assert array_reconcile(array_id=array.pk)["applied"] == 0  # slots full
    assert in_cluster(org, jobs) == [0, 1]
    batch_job = kube.get("batch/v1", "Job", f"gp-job-{jobs[1].pk}", org["project"].namespace)
    env = {
        e["name"]: e["value"] for e in batch_job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert (env["ARRAY_INDEX"], env["ARRAY_COUNT"], env["SWEEP_LR"]) == ("1", "3", "0.01")
    assert batch_job["metadata"]["labels"]["gpu-portal.io/job-name"] == "sw-1"

    reconcile_until(jobs[0], {"succeeded"})
    assert array_reconcile(array_id=array.pk)["applied"] == 1
    assert in_cluster(org, jobs) == [0, 1, 2]


@pytest.mark.django_db(transaction=True)
def test_two_passes_at_once_apply_each_element_once(org):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from jobs.arrays.reconcile import array_reconcile
    from jobs.reconcile.locking import JobBusy

    array = submit_array(org, array={"count": 6, "parallelism": 4})

    def run(_):
        try:
            return array_reconcile(array_id=array.pk)["applied"]
        except JobBusy:
            return 0
        finally:
            connection.close()

    with ThreadPoolExecutor(3) as pool:
        applied = list(pool.map(run, range(3)))
    assert sum(applied) == 4
    assert in_cluster(org, elements(array)) == [0, 1, 2, 3]


def test_cancel_removes_the_applied_elements_and_never_applies_the_held_ones(org):
    from jobs.arrays.reconcile import array_reconcile
    from jobs.arrays.services import array_cancel
    from jobs.models import Job

    array = submit_array(org, array={"count": 4, "parallelism": 2})
    array_reconcile(array_id=array.pk)
    assert in_cluster(org, elements(array)) == [0, 1]
    assert array_cancel(actor=org["user"], array=array) == 4
    counts = array_reconcile(array_id=array.pk)
    assert (counts["cleaned"], counts["applied"]) == (2, 0)
    assert in_cluster(org, elements(array)) == []
    assert set(Job.objects.filter(array=array).values_list("state", flat=True)) == {"cancelled"}
    assert not Job.objects.filter(array=array, cleanup_pending=True).exists()
