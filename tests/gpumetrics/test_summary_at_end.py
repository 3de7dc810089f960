"""A finished job's efficiency summary is there as soon as the job ends (the watcher's
transition enqueues it), not only when the periodic maintenance task comes round."""

import time

import pytest

from tests.gpumetrics.test_services_db import sweep

pytestmark = pytest.mark.django_db

SUMMARY_TASK = "gpumetrics.tasks.summarise_ended_job"


def test_the_summary_is_final_right_after_the_job_ends(
    make_job,
    personas,
    api_client_for,
    web_client_for,
    django_capture_on_commit_callbacks,
    run_enqueued_tasks,
):
    from jobs.services import job_transition

    job = make_job(state="running")
    now = int(time.time()) // 15 * 15
    for t in range(now - 10 * 60, now, 15):
        sweep([(job, 80.0)], personas.project_a.namespace, t)
    url = f"/api/v1/jobs/{job.pk}/metrics/"
    assert api_client_for(personas.member).get(url).json()["summary"] is None

    with django_capture_on_commit_callbacks(execute=True):
        job_transition(
            job, to="succeeded", expected_from="running", reason="Completed", source="watcher"
        )
    assert run_enqueued_tasks(SUMMARY_TASK) == [(SUMMARY_TASK, (job.pk,))]

    summary = api_client_for(personas.member).get(url).json()["summary"]
    assert summary is not None
    assert summary["final"] is True
    assert summary["util_mean"] == pytest.approx(80.0)
    assert summary["samples"] == 40
    html = web_client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()
    assert "GPU efficiency" in html


def test_a_job_that_ends_without_gpu_records_enqueues_a_summary_that_writes_nothing(
    make_job, django_capture_on_commit_callbacks, run_enqueued_tasks
):
    from gpumetrics.models import JobGpuSummary
    from jobs.services import job_transition

    job = make_job(state="running")
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(job, to="failed", expected_from="running", reason="Error", source="watcher")
    assert run_enqueued_tasks(SUMMARY_TASK) == [(SUMMARY_TASK, (job.pk,))]
    assert not JobGpuSummary.objects.filter(job=job).exists()


def test_a_running_transition_enqueues_no_summary(
    make_job, django_capture_on_commit_callbacks, run_enqueued_tasks
):
    from jobs.services import job_transition

    job = make_job(state="admitted")
    with django_capture_on_commit_callbacks(execute=True):
        job_transition(
            job, to="running", expected_from="admitted", reason="Running", source="watcher"
        )
    assert run_enqueued_tasks(SUMMARY_TASK) == []


def test_an_eight_gpu_trainer_seen_once_is_too_short_to_judge(
    make_job, personas, api_client_for, web_client_for
):
    from gpumetrics import services
    from gpumetrics.parsing import DeviceKey, DeviceReading
    from gpumetrics.series import FB_FREE, FB_USED, POWER, UTIL
    from jobs.services import job_transition

    job = make_job(state="running", gpus=8)
    at = int(time.time()) // 15 * 15
    services.ingest(
        [
            DeviceReading(
                key=DeviceKey("n1", f"GPU-{job.pk}-{i}"),
                namespace=personas.project_a.namespace,
                pod=f"gp-job-{job.pk}-abcde",
                fields={UTIL: 0.0, FB_USED: 500.0, FB_FREE: 79000.0, POWER: 70.0},
            )
            for i in range(8)
        ],
        at=at,
    )
    job_transition(job, to="succeeded", expected_from="running", reason="Completed", source="t")
    services.summarise_ended_job(job.pk)

    summary = (
        api_client_for(personas.member).get(f"/api/v1/jobs/{job.pk}/metrics/").json()["summary"]
    )
    assert summary["samples"] == 8
    assert summary["idle_verdict"] == "too_short"
    assert summary["idle"] is False
    html = web_client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()
    assert "too short to judge" in html
    assert "idle 100 %" not in html
