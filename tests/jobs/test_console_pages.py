"""The researcher's job pages through the Django client: the submit form (kind switch, choices
with reasons, errors by their fields, the feasibility line, the YAML preview, submit again,
templates), the job list (filters in the URL, GPUs, cancel, a constant number of queries), the
job page and the home page; viewers get no write control."""

import html
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

pytestmark = [pytest.mark.django_db]

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def form_data(**fields):
    data = {
        "project": "alpha",
        "kind": "single",
        "image": IMAGE,
        "command": "python train.py",
        "env": "",
        "gpus": "1",
        "priority": "normal",
        "max_runtime_minutes": "60",
    }
    data.update(fields)
    return data


def field_block(page: str, name: str) -> str:
    """The HTML of one form field's wrapper (label, input, help, errors)."""
    start = page.index(f'id="id_{name}"')
    begin = page.rindex('<div class="field', 0, start)
    return page[begin : page.index("</div>", start)]


def check(client, **fields) -> str:
    response = client.post("/jobs/new/check/", form_data(**fields))
    assert response.status_code == 200
    return html.unescape(response.content.decode())


def usage(project, resource="gpu", in_use=0, pool="h100"):
    from jobs.models import QueueUsage

    QueueUsage.objects.create(
        queue_kind="clusterqueue",
        queue_name=f"gp-{project.slug}",
        project=project,
        pool=pool,
        resource=resource,
        in_use=in_use,
        guaranteed=8,
    )


def lender(personas, nominal=4):
    """A second project of alpha's department, whose idle guarantee alpha may borrow."""
    from tests.factories import ProjectFactory, ProjectQuotaFactory

    gamma = ProjectFactory(slug="gamma", department=personas.project_a.department)
    ProjectQuotaFactory(project=gamma, pool=personas.pool, resource="gpu", nominal=nominal)


# --- submit form -----------------------------------------------------------------------------


def test_kind_switch_marks_the_fields_of_each_kind_and_ignores_hidden_leftovers(
    personas, web_client_for
):
    from jobs.models import Job

    client = web_client_for(personas.member)
    page = client.get("/jobs/new/").content.decode()
    assert 'data-kind="single"' in page
    assert 'type="radio" name="kind" value="mig"' in page
    assert 'data-kinds="single gang"' in field_block(page, "gpus")
    assert 'data-kinds="mig"' in field_block(page, "mig_profile")
    assert 'data-kinds="gang"' in field_block(page, "replicas")
    assert "data-kinds" not in field_block(page, "image")  # for every kind
    # A gang's pod count left in the (now hidden) field does not stop a single-GPU job.
    response = client.post("/jobs/new/", form_data(name="leftover", replicas="abc"))
    assert response.status_code == 302
    assert Job.objects.get(name="leftover").replicas == 1


def test_pools_and_profiles_without_quota_are_disabled_with_the_reason(personas, web_client_for):
    from tests.factories import GpuPoolFactory, ProjectQuotaFactory

    GpuPoolFactory(slug="a100", name="A100", gpu_model="NVIDIA-A100-SXM4-40GB")
    ProjectQuotaFactory(
        project=personas.project_a, pool=personas.pool, resource="1g.10gb", nominal=2
    )
    page = web_client_for(personas.member).get("/jobs/new/").content.decode()
    pool = field_block(page, "pool")
    assert re.search(r'<option value="h100"(?! disabled)[^>]*>', pool)
    assert re.search(
        r'<option value="a100" disabled>A100 \(a100, NVIDIA-A100-SXM4-40GB\) '
        r"\(not available: project alpha has no quota in this pool\)</option>",
        pool,
    )
    profiles = field_block(page, "mig_profile")
    assert '<option value="1g.10gb">1g.10gb</option>' in profiles
    assert (
        '<option value="3g.40gb" disabled>3g.40gb (not available: project alpha has no quota '
        "for 3g.40gb slices)</option>"
    ) in profiles


def test_errors_appear_next_to_their_fields_and_nothing_is_stored(personas, web_client_for):
    from jobs.models import Job

    client = web_client_for(personas.member)
    response = client.post(
        "/jobs/new/", form_data(gpus="9", image="", command="python 'unclosed", env="NOEQUALS")
    )
    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    assert "This field is required." in field_block(page, "image")
    assert "The command cannot be read" in field_block(page, "command")
    assert "Line 1 has no '=': write NAME=value." in field_block(page, "env")
    # The portal's own rules come back by their field too.
    response = client.post("/jobs/new/", form_data(gpus="9"))
    page = html.unescape(response.content.decode())
    block = field_block(page, "gpus")
    assert "has-error" in block
    assert "GPUs per pod must be 1 to 8 whole GPUs." in block
    assert not Job.objects.exists()


def test_feasibility_line_fits_borrows_queues_or_never(personas, web_client_for):
    lender(personas)
    client = web_client_for(personas.member)
    fits = check(client, gpus="2")
    assert 'data-feasibility="fits"' in fits
    assert "Fits now in pool h100: the project uses 0 of its 8 guaranteed GPUs." in fits
    usage(personas.project_a, in_use=7)
    borrows = check(client, gpus="2")
    assert "Fits now in pool h100 by borrowing 1 GPU" in borrows
    from jobs.models import QueueUsage

    QueueUsage.objects.update(in_use=10)
    queues = check(client, gpus="4")
    assert (
        "Will queue: it needs 4 GPUs; in pool h100 the project's 8 guaranteed GPUs are in use "
        "and 2 can be borrowed." in queues
    )
    never = check(client, kind="gang", gpus="8", replicas="2", pool="h100")
    assert "Can never run: This job needs 16 GPUs (2 pods × 8 GPUs) at once" in never
    # The image is still being typed: the line already says whether it fits.
    typing = check(client, image="", gpus="1")
    assert "Fits now in pool h100 by borrowing 1 GPU" in typing
    assert "This field is required" not in typing  # not filled in yet: no error shouted
    typo = check(client, image="Not An Image")
    assert "<strong>Container image:</strong> 'Not An Image' is not a valid image" in typo
    assert '<pre class="manifest">' not in typing  # no preview of an invalid request


def test_yaml_preview_is_exactly_what_reconcile_applies(personas, web_client_for):
    from jobs.manifests import build_job_manifests
    from jobs.models import Job
    from jobs.render import manifests_yaml
    from jobs.selectors import manifest_input_for_job

    client = web_client_for(personas.member)
    fields = {"name": "preview-1", "gpus": "2", "env": "EPOCHS=3", "cpu": "4", "memory": "32Gi"}
    preview = check(client, **fields)
    shown = re.search(r'<pre class="manifest"><code>(.*?)</code></pre>', preview, re.S).group(1)
    assert client.post("/jobs/new/", form_data(**fields)).status_code == 302
    job = Job.objects.get(name="preview-1")
    # The preview has no id yet (0); the job's manifests with that id are the same text.
    applied = manifests_yaml(build_job_manifests(manifest_input_for_job(job, job_id=0)))
    assert shown == applied
    assert "EPOCHS" in shown


def test_submit_again_prefills_the_form_from_a_past_job(personas, web_client_for, make_job):
    job = make_job(
        kind="gang", gpus=4, replicas=2, command=["torchrun", "a b.py"], env={"SEED": "1"}
    )
    page = web_client_for(personas.member).get(f"/jobs/new/?again={job.pk}").content.decode()
    assert 'data-kind="gang"' in page
    assert re.search(r'name="kind" value="gang"[^>]*checked', page)
    assert 'value="pytorch/pytorch:2.4.0"' in field_block(page, "image")
    assert "torchrun &#x27;a b.py&#x27;" in field_block(page, "command")
    assert "SEED=1" in field_block(page, "env")
    assert 'value="2"' in field_block(page, "replicas")
    assert 'value="4"' in field_block(page, "gpus")
    assert web_client_for(personas.outsider).get(f"/jobs/new/?again={job.pk}").status_code == 404
    detail = web_client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()
    assert f'href="/jobs/new/?again={job.pk}"' in detail


def test_save_as_template_then_start_from_it(personas, web_client_for):
    from jobs.models import JobTemplate

    client = web_client_for(personas.member)
    response = client.post(
        "/jobs/new/",
        form_data(gpus="2", name="ignored", template_name="nightly", save_template="1"),
    )
    template = JobTemplate.objects.get(project=personas.project_a, name="nightly")
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/new/?template={template.pk}"
    assert template.fields["gpus"] == 2
    assert "name" not in template.fields
    assert template.created_by == personas.member
    page = client.get(response["Location"]).content.decode()
    assert f'<option value="{template.pk}" selected>alpha / nightly</option>' in page
    assert 'value="2"' in field_block(page, "gpus")
    # A bad template name is said next to its field.
    bad = client.post("/jobs/new/", form_data(template_name="Bad Name", save_template="1"))
    assert bad.status_code == 400
    assert "is not a valid template name" in html.unescape(
        field_block(bad.content.decode(), "template_name")
    )


def test_viewer_gets_no_write_controls(personas, web_client_for, make_job):
    job = make_job(name="viewed")
    client = web_client_for(personas.viewer)
    listing = client.get("/jobs/").content.decode()
    assert "viewed" in listing
    assert "Submit a job" not in listing
    assert "/cancel/" not in listing
    detail = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "Cancel job" not in detail
    assert "Submit again" not in detail
    home = client.get("/").content.decode()
    assert "Submit a job" not in home
    form = client.get("/jobs/new/").content.decode()
    assert "You cannot submit jobs" in form
    assert 'id="submit-form"' not in form
    assert client.post("/jobs/new/", form_data()).status_code == 400


# --- job list --------------------------------------------------------------------------------


def test_list_filters_are_choices_and_chips_kept_in_the_url(personas, web_client_for, make_job):
    from jobs.services import job_transition

    queued = make_job(name="q-job")
    job_transition(queued, to="queued", expected_from="submitted", reason="Q", source="test")
    make_job(name="s-job", submitter=personas.admin)
    make_job(name="g-job", kind="gang", gpus=4, replicas=2)
    client = web_client_for(personas.member)
    page = client.get("/jobs/?project=alpha&state=queued&state=submitted&submitter=bob").content
    page = page.decode()
    assert '<option value="alpha" selected>Alpha (alpha)</option>' in page
    assert 'value="beta"' not in page  # only the user's projects are choices
    assert re.search(r'value="queued"[^>]*checked', page)
    assert re.search(r'value="submitted"[^>]*checked', page)
    assert not re.search(r'value="running"[^>]*checked', page)
    rows = page[page.index('id="job-rows"') :]
    assert "q-job" in rows
    assert "g-job" in rows
    assert "s-job" not in rows  # alice's
    # States are readable without colour: an icon and the word.
    assert re.search(
        r'class="badge state state-queued"><span class="icon" aria-hidden="true">⏳</span> Queued',
        rows,
    )
    # The gang's GPUs are its total.
    assert "2 × 4 = 8" in rows
    # The live refresh asks for the same filtered URL; the pager keeps the filters.
    assert (
        'hx-get="/jobs/?project=alpha&amp;state=queued&amp;state=submitted&amp;submitter=bob"'
        in page
    )
    only_gangs = client.get("/jobs/?kind=gang").content.decode()
    assert "g-job" in only_gangs
    assert "q-job" not in only_gangs
    empty = client.get("/jobs/?kind=mig").content.decode()
    assert "No jobs match these filters." in empty


def test_cancel_from_the_list_confirms_and_returns_to_the_list(personas, web_client_for, make_job):
    job = make_job(name="to-cancel")
    client = web_client_for(personas.member)
    page = client.get("/jobs/?kind=single").content.decode()
    form = page[page.index(f'action="/jobs/{job.pk}/cancel/"') :][:600]
    assert (
        'data-confirm="Cancel job to-cancel? Its pods are stopped and this cannot be undone."'
        in form
    )
    response = client.post(f"/jobs/{job.pk}/cancel/", {"next": "/jobs/?kind=single"})
    assert response.status_code == 302
    assert response["Location"] == "/jobs/?kind=single"
    job.refresh_from_db()
    assert job.state == "cancelled"
    # Somewhere else is not a place to go back to.
    other = make_job(name="other")
    response = client.post(f"/jobs/{other.pk}/cancel/", {"next": "https://evil.example/"})
    assert response["Location"] == f"/jobs/{other.pk}/"


def test_list_runs_the_same_queries_for_5_or_60_jobs(personas, web_client_for, make_job):
    from tests.factories import ProjectQuotaFactory

    ProjectQuotaFactory(
        project=personas.project_b, pool=personas.pool, resource="1g.10gb", nominal=1
    )
    client = web_client_for(personas.staff)
    for n in range(5):
        make_job(name=f"few-{n}", kind="gang" if n % 2 else "single", replicas=2 if n % 2 else 1)
    client.get("/jobs/")  # warm the session and content types
    with CaptureQueriesContext(connection) as few:
        assert client.get("/jobs/").status_code == 200
    for n in range(55):
        make_job(
            name=f"many-{n}",
            project=personas.project_b if n % 3 else personas.project_a,
            submitter=personas.outsider if n % 3 else personas.member,
        )
    with CaptureQueriesContext(connection) as many:
        page = client.get("/jobs/").content.decode()
    assert page.count('<tr id="job-') == 50
    assert len(many) == len(few), [q["sql"] for q in many]


# --- job page and home -----------------------------------------------------------------------


def test_job_page_order_and_folded_manifest(personas, web_client_for, make_job):
    from jobs.services import job_set_queue_info, job_transition

    job = make_job(name="waiting")
    job_transition(job, to="queued", expected_from="submitted", reason="Pending", source="test")
    job_set_queue_info(job=job, position=3, length=5, explanation="Waiting for 1 × H100 GPUs.")
    page = web_client_for(personas.member).get(f"/jobs/{job.pk}/").content.decode()
    order = [
        page.index('id="job-state"'),
        page.index("Position 3 of 5 in the queue"),
        page.index("Waiting for 1 × H100 GPUs."),
        page.index("data-gpu-metrics"),
        page.index(">Log<"),
        page.index(">Timeline<"),
        page.index(">Where it ran<"),
        page.index('<details class="manifest-fold">'),
    ]
    assert order == sorted(order)
    assert 'data-confirm="Cancel job waiting?' in page


def test_home_shows_bars_my_jobs_and_gpu_hours(personas, web_client_for, make_job):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import JobPod
    from jobs.services import job_transition
    from jobs.submission.page_selectors import week_start

    lender(personas)
    usage(personas.project_a, in_use=10)
    running = make_job(name="mine-running", gpus=2)
    job_transition(running, to="running", expected_from="submitted", reason="R", source="test")
    make_job(name="theirs", submitter=personas.admin)
    now = timezone.now()
    JobPod.objects.create(job=running, uid="u1", name="p", started_at=now - timedelta(minutes=90))
    page = web_client_for(personas.member).get("/").content.decode()
    section = page[page.index('id="project-alpha"') :]
    assert 'aria-label="10 in use, 8 guaranteed, 4 borrowable"' in section
    assert "bar-used borrowing" in section
    assert 'style="width: 83.3%"' in section  # 10 of a maximum of 12
    mine = page[page.index('id="my-jobs"') :]
    assert "mine-running" in mine
    assert "theirs" not in mine
    assert 'hx-trigger="sse:job throttle:750ms, sse:hello, live:poll"' in page
    hours = re.search(r'id="gpu-hours"><strong>([0-9.]+)</strong>', page).group(1)
    since = max(now - timedelta(minutes=90), week_start(timezone.localtime(now)))
    assert float(hours) == pytest.approx(2 * (now - since).total_seconds() / 3600, abs=0.1)
