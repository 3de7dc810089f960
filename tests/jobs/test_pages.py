"""The jobs pages: list with filters, detail with manifest YAML and polling, submit, cancel."""

import pytest

pytestmark = [pytest.mark.django_db]


def test_list_shows_only_visible_jobs_and_filters(personas, web_client_for, make_job):
    from tests.factories import ProjectQuotaFactory

    mine = make_job(name="mine-1")
    ProjectQuotaFactory(
        project=personas.project_b, pool=personas.pool, resource="1g.10gb", nominal=1
    )
    make_job(name="theirs-1", project=personas.project_b, submitter=personas.outsider)
    page = web_client_for(personas.viewer).get("/jobs/")
    assert page.status_code == 200
    assert "mine-1" in page.text
    assert "theirs-1" not in page.text
    assert "mine-1" not in web_client_for(personas.viewer).get("/jobs/?kind=gang").text
    assert f'href="/jobs/{mine.pk}/"' in page.text


def test_detail_shows_manifest_yaml_and_follows_the_job_until_finished(
    personas, web_client_for, make_job
):
    from jobs.services import job_transition

    job = make_job(name="detail-1")
    client = web_client_for(personas.member)
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200
    assert f"name: gp-job-{job.pk}" in page.text
    assert "kueue.x-k8s.io/queue-name: gp-alpha" in page.text
    # One live stream for this job; the state re-fetches on its events (or polls without it).
    assert f'sse-connect="/jobs/live/?job={job.pk}"' in page.text
    assert 'hx-trigger="sse:job, sse:hello, live:poll"' in page.text
    assert "Cancel job" in page.text
    job_transition(job, expected_from=job.state, to="succeeded", reason="Completed", source="test")
    fragment = client.get(f"/jobs/{job.pk}/", headers={"HX-Request": "true"})
    assert "Succeeded" in fragment.text
    assert "hx-trigger" not in fragment.text  # no more updates once finished
    assert "<html" not in fragment.text


def test_an_eight_gpu_single_pod_job_is_called_single_pod(personas, web_client_for, make_job):
    job = make_job(name="eight-on-one", kind="single", gpus=8)
    client = web_client_for(personas.member)
    detail = client.get(f"/jobs/{job.pk}/").text
    kind = detail[detail.index("<dt>Kind</dt>") :]
    assert kind.startswith("<dt>Kind</dt><dd>Single pod</dd>")
    assert "<dt>GPUs</dt><dd>8</dd>" in detail
    listing = client.get("/jobs/").text
    assert "Single pod" in listing
    assert "Single GPU" not in detail + listing


def test_outsider_gets_404_and_viewer_has_no_cancel_button(personas, web_client_for, make_job):
    job = make_job()
    assert web_client_for(personas.outsider).get(f"/jobs/{job.pk}/").status_code == 404
    assert web_client_for(personas.outsider).post(f"/jobs/{job.pk}/cancel/").status_code == 404
    viewer_page = web_client_for(personas.viewer).get(f"/jobs/{job.pk}/")
    assert "Cancel job" not in viewer_page.text
    assert web_client_for(personas.viewer).post(f"/jobs/{job.pk}/cancel/").status_code == 403


def test_submit_form_creates_a_job_and_shows_errors(personas, web_client_for):
    from jobs.models import Job

    client = web_client_for(personas.member)
    assert client.get("/jobs/new/").status_code == 200
    bad = client.post(
        "/jobs/new/",
        {
            "project": "alpha",
            "kind": "single",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "command": "python train.py",
            "env": "CUDA_VISIBLE_DEVICES=0",
            "gpus": "1",
            "priority": "normal",
        },
    )
    assert bad.status_code == 400
    assert "CUDA_VISIBLE_DEVICES cannot be set" in bad.text
    assert not Job.objects.exists()
    good = client.post(
        "/jobs/new/",
        {
            "project": "alpha",
            "name": "from-form",
            "kind": "single",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "command": "python train.py --lr '0.1'",
            "env": "EPOCHS=3",
            "gpus": "2",
            "priority": "normal",
            "max_runtime_minutes": "30",
        },
    )
    job = Job.objects.get(name="from-form")
    assert good.status_code == 302
    assert good["Location"] == f"/jobs/{job.pk}/"
    assert job.command == ["python", "train.py", "--lr", "0.1"]
    assert job.env == {"EPOCHS": "3"}
    assert job.gpus == 2
    assert job.max_runtime_minutes == 30


def test_cancel_button(personas, web_client_for, make_job):
    job = make_job()
    client = web_client_for(personas.member)
    response = client.post(f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"
    again = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "it cannot become Cancelled" in again.text


def test_admin_lists_jobs_read_only_and_cancels(personas, web_client_for, make_job):
    job = make_job(name="admin-1")
    client = web_client_for(personas.staff)
    personas.staff.is_superuser = True
    personas.staff.save()
    assert "admin-1" in client.get("/admin/jobs/job/").text
    page = client.get(f"/admin/jobs/job/{job.pk}/change/")
    assert page.status_code == 200
    response = client.post(
        "/admin/jobs/job/", {"action": "cancel_jobs", "_selected_action": [job.pk]}
    )
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert job.events.last().source == "admin"
