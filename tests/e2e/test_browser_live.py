"""A researcher watches a job move on the job list and on the job page, without reloading."""

import pytest

from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"


def submit_job(user, **fields):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    body = {"project": "alpha", "kind": "single", "gpus": 1, "image": IMAGE, **fields}
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def mark_page(page) -> None:
    """A marker that a reload or navigation would wipe out."""
    page.evaluate("window.__notReloaded = true")


def still_same_page(page) -> bool:
    return page.evaluate("window.__notReloaded === true")


def test_job_state_changes_appear_on_the_list_and_the_job_page_without_reload(
    e2e_org, portal_server, page_for
):
    bob = e2e_org["bob"]
    list_page = page_for(bob)
    list_page.goto(portal_server.url + "/jobs/")
    list_page.wait_for_selector("text=No jobs yet")
    mark_page(list_page)

    job = submit_job(bob, name="live-one", command=["sh", "-c", "echo step; sleep 40"])
    row = list_page.locator("#job-rows tr", has_text="live-one")
    row.wait_for()  # the new job appears on the open list
    detail = page_for(bob)
    detail.goto(f"{portal_server.url}/jobs/{job['id']}/")
    mark_page(detail)

    row.locator(".badge", has_text="Succeeded").wait_for(timeout=120_000)
    detail.locator("#job-state > p .badge", has_text="Succeeded").wait_for(timeout=30_000)
    assert still_same_page(list_page)
    assert still_same_page(detail)
    screenshot(list_page, "job-list")
    screenshot(detail, "job-page")
