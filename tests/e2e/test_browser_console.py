"""The researcher's console in a real browser (Playwright, Debian's chromium, headless) against
the portal under an ASGI server, a Celery worker with beat, the cluster watcher and kubesim.

Forms are filled in and submitted as a person would; every wait is for something on the page
(no sleeps), with generous timeouts for a loaded machine."""

import re

import pytest

from tests.e2e.conftest import screenshot, wait_for
from tests.e2e.test_jobs_e2e import sync_quotas_and_wait
from tests.e2e.test_watcher_e2e import watcher_factory  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
LONG = 180_000  # ms: under load a job can take a while to go through the whole stack


@pytest.fixture(autouse=True)
def _fast_metrics(monkeypatch):
    """Scrape dcgm-exporter every 2 s in the worker (set before the worker reads its env)."""
    monkeypatch.setenv("PORTAL_METRICS_PERIOD_SECONDS", "2")
    monkeypatch.setenv("PORTAL_METRICS_MAINTAIN_SECONDS", "3")


@pytest.fixture
def console(e2e_org, portal_server, page_for, watcher_factory):  # noqa: F811
    watcher_factory(lease_seconds=30)
    sync_quotas_and_wait(e2e_org)
    return e2e_org


def api_submit(user, **fields):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    body = {"project": "alpha", "kind": "single", "gpus": 1, "image": IMAGE, **fields}
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def fill_common(page, *, name: str, command: str) -> None:
    page.fill("#id_name", name)
    page.fill("#id_image", IMAGE)
    page.fill("#id_command", command)


def open_preview(page) -> None:
    """Open the manifest preview under the form. The panel is rendered again after the form's
    last input (debounced) and when a field loses focus, which closes a preview opened just
    before: open it until it shows."""
    manifest = page.locator("#submit-check pre.manifest", has_text="nvidia.com/gpu")
    summary = page.locator("#submit-check summary", has_text="Preview")

    def shown() -> bool:
        if manifest.is_visible():
            return True
        if summary.is_visible() and page.locator("#submit-check details[open]").count() == 0:
            summary.click()
        return False

    wait_for(shown, timeout=60, interval=0.5, what="the manifest preview to show")


def submit_form(page) -> int:
    page.click("#submit-form button.primary")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"), timeout=60_000)
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def test_submit_single_mig_and_gang_jobs_through_the_form(console, portal_server, page_for):
    bob = console["bob"]
    page = page_for(bob)
    page.goto(portal_server.url + "/jobs/new/")
    # The kind switch: MIG and gang fields are hidden for a single-GPU job.
    assert page.is_visible("#id_gpus")
    assert not page.is_visible("#id_mig_profile")
    assert not page.is_visible("#id_replicas")
    fill_common(page, name="form-single", command='sh -c "echo step one; sleep 20"')
    page.locator("#submit-check .feasibility", has_text="Fits now in pool h100").wait_for()
    open_preview(page)
    screenshot(page, "submit-form")
    single = submit_form(page)
    page.evaluate("window.__notReloaded = true")
    page.locator("#job-state .badge", has_text="Succeeded").wait_for(timeout=LONG)
    assert page.evaluate("window.__notReloaded === true")

    listing = page_for(bob)
    listing.goto(portal_server.url + "/jobs/")
    listing.locator(f"#job-{single} .badge", has_text="Succeeded").wait_for()

    # A MIG slice: the switch shows the profile and hides the GPU count.
    page.goto(portal_server.url + "/jobs/new/")
    page.check("input[name=kind][value=mig]")
    assert page.is_visible("#id_mig_profile")
    assert not page.is_visible("#id_gpus")
    fill_common(page, name="form-mig", command='sh -c "echo on a slice; sleep 5"')
    page.select_option("#id_mig_profile", "1g.10gb")
    page.locator("#submit-check .feasibility", has_text="1g.10gb").wait_for()
    mig = submit_form(page)
    page.locator("dd", has_text="one 1g.10gb MIG slice").wait_for()

    # A gang of two pods.
    page.goto(portal_server.url + "/jobs/new/")
    page.check("input[name=kind][value=gang]")
    assert page.is_visible("#id_replicas")
    fill_common(page, name="form-gang", command='sh -c "echo rank up; sleep 5"')
    page.fill("#id_replicas", "2")
    page.fill("#id_gpus", "2")
    page.locator("#submit-check .feasibility", has_text="Fits now").wait_for()
    gang = submit_form(page)
    page.locator("dd", has_text="2 pods × 2 = 4 GPUs").wait_for()

    for job_id in (mig, gang):
        listing.locator(f"#job-{job_id} .badge", has_text="Succeeded").wait_for(timeout=LONG)
    assert listing.locator(f"#job-{gang} td.num").inner_text() == "2 × 2 = 4"
    screenshot(listing, "job-list")


def test_queue_position_failed_log_running_chart_and_cancel_from_the_list(
    console, portal_server, page_for
):
    bob = console["bob"]
    # Two 8-GPU jobs use the project's 16 guaranteed GPUs; a third must wait.
    # A job that fails at once (submitted first: the big ones then take all the quota).
    failing = api_submit(
        bob,
        name="crasher",
        command=["sh", "-c", "echo loading shards; echo CUDA error: out of memory; exit 3"],
    )
    big = [
        api_submit(bob, name=f"big-{n}", gpus=8, command=["sh", "-c", "sleep 360000"])
        for n in range(2)
    ]
    page = page_for(bob)
    page.goto(f"{portal_server.url}/jobs/{big[1]['id']}/")
    page.locator("#job-state .badge", has_text="Running").wait_for(timeout=LONG)
    waiting = api_submit(bob, name="waiter", gpus=8, command=["sh", "-c", "sleep 10"])

    # The running job's GPU charts, and where it runs (pod, node, GPU UUIDs).
    page.locator(".gpu-charts .uplot").first.wait_for(timeout=LONG)
    page.locator("#job-history table.pods code.uuid").first.wait_for(timeout=LONG)
    screenshot(page, "job-page-running")

    # The waiting job says where it stands and why.
    queued = page_for(bob)
    queued.goto(f"{portal_server.url}/jobs/{waiting['id']}/")
    queued.locator("#job-state .queue-position", has_text="Position 1").wait_for(timeout=LONG)
    explanation = queued.locator("#job-state .explanation").inner_text()
    assert "Waiting for" in explanation

    # The failed job's log lines.
    failed = page_for(bob)
    failed.goto(f"{portal_server.url}/jobs/{failing['id']}/")
    failed.locator("#job-state .badge", has_text="Failed").wait_for(timeout=LONG)

    def log_shown() -> bool:
        # The kept last lines, or the live tail (loaded after the page): whichever is there.
        failed.reload()
        failed.locator("pre.logs, #job-log").first.wait_for()
        return failed.get_by_text("CUDA error: out of memory").count() > 0

    wait_for(log_shown, timeout=120, interval=2, what="the failed job's log lines")

    # Cancel the waiting job from the list: the browser asks first.
    listing = page_for(bob)
    # The list re-fetches its rows once its event stream says hello (or, without a stream, on
    # its 5 s poll): a click while the rows are being replaced lands on a form that is gone.
    listing.add_init_script(
        "document.addEventListener('htmx:afterSettle', () => { window.rowsSettled = true; });"
    )
    listing.goto(portal_server.url + "/jobs/?state=queued")
    row = listing.locator(f"#job-{waiting['id']}")
    row.wait_for()
    listing.wait_for_function(
        "() => window.rowsSettled && !document.querySelector('.htmx-request, .htmx-swapping')"
    )
    asked = []

    def answer(dialog):
        asked.append(dialog.message)
        dialog.accept()

    listing.once("dialog", answer)
    row.get_by_role("button", name="Cancel job waiter").click()
    listing.get_by_text("Job waiter cancelled").wait_for()
    assert asked == ["Cancel job waiter? Its pods are stopped and this cannot be undone."]
    from jobs.models import Job

    assert wait_for(lambda: Job.objects.get(pk=waiting["id"]).state == "cancelled")
    for job in big:  # leave the quota free for the next test
        listing.goto(f"{portal_server.url}/jobs/{job['id']}/")
        listing.once("dialog", lambda dialog: dialog.accept())
        listing.click("button.danger")
        listing.get_by_text(f"Job {job['name']} cancelled").wait_for()

    home = page_for(bob)
    home.goto(portal_server.url + "/")
    home.locator("#project-alpha .quota-bar").first.wait_for()
    screenshot(home, "home")


def test_a_viewer_finds_no_write_control(console, portal_server, page_for):
    from tests.factories import MembershipFactory, UserFactory

    vera = UserFactory(username="vera")
    MembershipFactory(user=vera, project=console["alpha"], role="viewer")
    job = api_submit(console["bob"], name="seen", command=["sh", "-c", "sleep 2"])
    page = page_for(vera)
    for path, shows in (("/", "Alpha"), ("/jobs/", "seen"), (f"/jobs/{job['id']}/", "seen")):
        page.goto(portal_server.url + path)
        page.get_by_text(shows).first.wait_for()
        assert page.locator("text=Submit a job").count() == 0, path
        assert page.locator("button.danger").count() == 0, path
        assert page.locator("text=Submit again").count() == 0, path
    page.goto(portal_server.url + "/jobs/new/")
    page.get_by_text("You cannot submit jobs").wait_for()
    assert page.locator("#submit-form").count() == 0

    # At phone width the pages fit the screen (wide tables scroll inside their box).
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/", "/jobs/", f"/jobs/{job['id']}/"):
        page.goto(portal_server.url + path)
        page.locator("main h1").wait_for()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
    screenshot(page, "job-page-phone")
