"""Pending advice in a real browser: a job that would queue is offered a MIG slice that starts
now; the user takes it (ticking the cancel box) and the new job starts within seconds, on the
whole stack (ASGI server, Celery worker, the cluster watcher, kubesim)."""

import re

import pytest

from tests.e2e.conftest import screenshot, wait_for
from tests.e2e.test_jobs_e2e import sync_quotas_and_wait
from tests.e2e.test_watcher_e2e import watcher_factory  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
LONG = 180_000  # ms


def api_submit(user, **fields) -> int:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    body = {"project": "alpha", "kind": "single", "image": IMAGE, **fields}
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def states(ids) -> dict[int, str]:
    from jobs.models import Job

    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))


def test_advice_a_slice_starts_now_and_taking_it_submits_it(
    e2e_org,
    portal_server,
    page_for,
    watcher_factory,  # noqa: F811
):
    watcher_factory(lease_seconds=30)
    sync_quotas_and_wait(e2e_org)
    bob = e2e_org["bob"]
    # Alpha's 16 guaranteed GPUs are busy for a long while (its department lends nothing).
    busy = [
        api_submit(bob, name=f"busy-{i}", gpus=8, command=["sleep", "100000"]) for i in range(2)
    ]
    wait_for(
        lambda: set(states(busy).values()) == {"running"},
        timeout=120,
        what="the two 8-GPU jobs to run",
    )
    waiting = api_submit(bob, name="waiting", gpus=1, command=["sleep", "600"])

    page = page_for(bob)
    page.goto(f"{portal_server.url}/jobs/{waiting}/")
    page.locator("#planner .forecast", has_text="Forecast: likely to start in").wait_for()
    offer = page.locator("#planner li", has_text="a 1g.10gb MIG slice: starts now")
    offer.wait_for()
    screenshot(page, "pending-advice")
    offer.locator("a", has_text="Submit this instead").click()

    page.wait_for_url(re.compile(r"/jobs/new/\?"))
    assert page.is_checked("input[name=kind][value=mig]")
    assert page.input_value("#id_mig_profile") == "1g.10gb"
    page.fill("#id_name", "waiting-slice")
    page.locator("#submit-check .forecast", has_text="starts now").wait_for(timeout=60_000)
    page.check("input[name=cancel_replaced]")
    page.click("#submit-form button.primary")
    page.wait_for_url(re.compile(r"/jobs/\d+/$"), timeout=60_000)
    page.locator("#job-state .badge", has_text="Running").wait_for(timeout=LONG)
    page.locator("dd", has_text="one 1g.10gb MIG slice").wait_for()
    assert states([waiting])[waiting] == "cancelled"

    from jobs.models import Job
    from jobs.services import job_cancel

    for job in Job.objects.filter(pk__in=busy):
        job_cancel(actor=bob, job=job)
