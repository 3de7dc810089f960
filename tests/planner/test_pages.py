"""The planner on the pages: the form's forecast line, a waiting job's advice and taking it,
right-sizing of a finished job and per project, and the staff what-if."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.planner.conftest import make_job

pytestmark = pytest.mark.django_db

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def test_the_submit_forms_check_line_has_the_forecast(personas, web_client_for, busy_alpha):
    client = web_client_for(personas.member)
    fields = {"project": "alpha", "kind": "single", "image": IMAGE, "gpus": "1"}
    response = client.post("/jobs/new/check/", {**fields, "priority": "normal"})
    assert response.status_code == 200
    assert "Forecast: likely to start in 5–55 min (pool h100)." in response.text
    mig = client.post("/jobs/new/check/", {**fields, "kind": "mig", "mig_profile": "1g.10gb"})
    assert "Forecast: starts now (pool h100)." in mig.text


def test_advice_on_the_job_page_and_taking_it(personas, web_client_for, busy_alpha):
    from django.utils import timezone

    from jobs.models import Job

    waiting = make_job(personas, name="small", state="queued", created=timezone.now(), gpus=1)
    client = web_client_for(personas.member)
    page = client.get(f"/jobs/{waiting.pk}/")
    assert "Forecast: likely to start in" in page.text
    assert "a 1g.10gb MIG slice: starts now" in page.text
    link = next(
        a for a, query in page.context["planner"]["alternatives"] if "1g.10gb" in a.label
    ).submit_query(waiting)
    form = client.get(f"/jobs/new/?{link}")
    assert form.status_code == 200
    assert form.context["form"].initial["mig_profile"] == "1g.10gb"
    assert "Cancel job <a" in form.text  # the opt-in box

    body = {
        "project": "alpha",
        "name": "small-slice",
        "kind": "mig",
        "mig_profile": "1g.10gb",
        "image": IMAGE,
        "priority": "normal",
        "replaces": str(waiting.pk),
    }
    kept = client.post("/jobs/new/", body)
    assert kept.status_code == 302
    waiting.refresh_from_db()
    assert waiting.state == "queued"  # not ticked: the original stays
    Job.objects.filter(name="small-slice").update(state="cancelled")

    taken = client.post("/jobs/new/", {**body, "cancel_replaced": "1"}, follow=True)
    new = Job.objects.get(name="small-slice", state="submitted")
    assert new.kind == "mig"
    assert new.mig_profile == "1g.10gb"
    waiting.refresh_from_db()
    assert waiting.state == "cancelled"
    assert f"Job {waiting.name} cancelled: replaced by this one." in taken.text


def test_a_finished_job_page_shows_right_sizing(personas, web_client_for):
    from django.utils import timezone

    from gpumetrics.models import JobGpuSummary

    now = timezone.now()
    done = make_job(
        personas,
        name="done",
        state="succeeded",
        created=now - timedelta(hours=3),
        started=now - timedelta(hours=2),
        ended=now - timedelta(hours=1),
        gpus=1,
    )
    JobGpuSummary.objects.create(
        job=done,
        util_mean=22.0,
        fb_peak_mib=18 * 1024,
        fb_total_mib=80 * 1024,
        gpu_hours=1.0,
        computed_at=now,
        final=True,
    )
    page = web_client_for(personas.member).get(f"/jobs/{done.pk}/")
    assert (
        "peak memory 18 GiB of 80 and utilisation 22 %: a 3g.40gb slice would have fit" in page.text
    )
    summary = web_client_for(personas.member).get("/planner/projects/alpha/rightsizing/")
    assert summary.status_code == 200
    assert "1 of 1 finished jobs with GPU metrics could have been smaller" in summary.text
    assert web_client_for(personas.outsider).get(
        "/planner/projects/alpha/rightsizing/"
    ).status_code == (404)


def test_the_whatif_page_replays_and_applies(personas, web_client_for):
    from quotas.models import ProjectQuota

    assert web_client_for(personas.admin).get("/planner/whatif/").status_code == 403
    client = web_client_for(personas.staff)
    page = client.get("/planner/whatif/")
    assert page.status_code == 200
    key = "alpha|h100|gpu"
    form = {
        "start": "2026-11-01T00:00",
        "end": "2026-11-29T00:00",
        "key": [key, "beta|h100|gpu"],
        f"was-{key}": "8|4",
        f"nominal-{key}": "10",
        f"limit-{key}": "4",
        "was-beta|h100|gpu": "2|",
        "nominal-beta|h100|gpu": "2",
        "limit-beta|h100|gpu": "",
    }
    replay = client.post("/planner/whatif/", {**form, "replay": "1"})
    assert replay.status_code == 200
    assert "<svg" in replay.text or "0 jobs" in replay.text
    bad = client.post("/planner/whatif/", {**form, f"nominal-{key}": "-3", "replay": "1"})
    assert bad.status_code == 400
    assert "quotas.0.nominal" in bad.text
    applied = client.post("/planner/whatif/", {**form, "apply": "1"})
    assert applied.status_code == 302
    assert ProjectQuota.objects.get(project=personas.project_a, resource="gpu").nominal == 10
    assert ProjectQuota.objects.get(project=personas.project_b, resource="gpu").nominal == 2


def test_the_job_end_notification_carries_the_right_sizing(personas):
    from django.utils import timezone

    from gpumetrics.models import JobGpuSummary
    from notifications.models import Notification
    from notifications.producers import announce_job_end

    now = timezone.now()
    done = make_job(
        personas,
        name="done",
        state="succeeded",
        created=now - timedelta(hours=3),
        started=now - timedelta(hours=2),
        ended=now - timedelta(minutes=1),
        gpus=1,
    )
    JobGpuSummary.objects.create(
        job=done,
        util_mean=22.0,
        fb_peak_mib=18 * 1024,
        fb_total_mib=80 * 1024,
        gpu_hours=2.0,
        computed_at=now,
        final=True,
    )
    assert announce_job_end(done.pk)
    told = Notification.objects.get(user=personas.member)
    assert "Right-sizing: peak memory 18 GiB of 80 and utilisation 22 %: a 3g.40gb" in told.text
