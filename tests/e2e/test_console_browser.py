"""The console in a real browser (Debian's chromium, headless, through Playwright) against the
portal under uvicorn, a Celery worker with beat, Redis and kubesim:

- axe-core (vendored, tests/e2e/vendor/) finds no serious or critical WCAG 2.1 A/AA violation
  on the home, project, cluster, overview, job list and submit pages;
- the cluster and project pages fit a phone's width (no sideways scrolling of the page);
- an admin raises a quota in the Django admin and the job that waited for it starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.asgi_server import session_cookie, start_asgi_server
from tests.e2e.conftest import screenshot, wait_for
from tests.e2e.test_watcher_e2e import watcher_factory  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).parent / "vendor" / "axe-core-4.14.1.min.js"
IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
PHONE = {"width": 390, "height": 844}
# kubesim runs 100× faster than real time: a job must sleep (and be allowed to run) for days of
# simulated time to still hold its GPUs minutes later.
LONG = ["sh", "-c", "sleep 1000000"]
MAX_RUNTIME = 10080


@pytest.fixture(autouse=True)
def clean_cluster(e2e_kubesim, settings):
    """kubesim lives for the module: remove the jobs an earlier test left so quota is free."""
    from portal.kube import apply as kube
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(e2e_kubesim.kubeconfig)
    reset_api_client()
    for obj in kube.list_owned("batch/v1", "Job"):
        kube.delete_object(obj)
    wait_for(lambda: not kube.list_owned("v1", "Pod"), timeout=90, what="earlier tests' pods to go")


@pytest.fixture
def watcher(watcher_factory):  # noqa: F811
    """`manage.py watch_cluster`: it records the pods (node, GPU UUIDs) the cluster page shows."""
    return watcher_factory("console", lease_seconds=30)


@pytest.fixture
def console_server(tmp_path, worker_factory, e2e_kubesim, e2e_redis_url, watcher):
    """uvicorn reading kubesim (the cluster page lists its nodes), a worker with beat and the
    cluster watcher."""
    worker_factory(beat_seconds=1)
    server = start_asgi_server(
        tmp_path,
        PORTAL_PUBSUB_URL=e2e_redis_url,
        CELERY_BROKER_URL=e2e_redis_url,
        KUBECONFIG=str(e2e_kubesim.kubeconfig),
    )
    yield server
    server.stop()


@pytest.fixture
def open_page(browser, console_server):
    contexts = []

    def open_as(user, viewport=None):
        context = browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
        name, value = next(iter(session_cookie(user).items()))
        context.add_cookies([{"name": name, "value": value, "url": console_server.url}])
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(30_000)
        return page

    yield open_as
    for context in contexts:
        context.close()


def submit_job(user, project: str, **fields) -> dict:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    body = {
        "project": project,
        "kind": "single",
        "gpus": 1,
        "image": IMAGE,
        "max_runtime_minutes": MAX_RUNTIME,
        **fields,
    }
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def job_state(job_id: int) -> str:
    from jobs.models import Job

    return Job.objects.get(pk=job_id).state


def pod_uuids(job_id: int) -> list[str]:
    from jobs.models import JobPod

    return [
        u
        for uuids in JobPod.objects.filter(job_id=job_id).values_list("gpu_uuids", flat=True)
        for u in uuids
    ]


SETTLED = """() => !document.querySelector('.htmx-request, .htmx-settling, .htmx-swapping')
    && [...document.querySelectorAll('main *')].every(e => getComputedStyle(e).opacity === '1')"""


def serious_violations(page) -> list[str]:
    # A live page re-fetches its rows when its event stream says hello; while a request is in
    # flight htmx dims them (not what a reader sees once settled), so wait for that to end.
    page.wait_for_function(SETTLED)
    page.add_script_tag(path=str(AXE))
    result = page.evaluate(
        """async () => {
            const r = await axe.run(document, {
                runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']},
            });
            return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
        }"""
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes']}"
        for v in result
        if v["impact"] in ("serious", "critical")
    ]


def fits_width(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_console_pages_pass_axe_and_fit_a_phone(e2e_org, console_server, open_page):
    from tests.factories import UserFactory

    bob, oscar = e2e_org["bob"], e2e_org["oscar"]
    staff = UserFactory(username="sam", is_staff=True, is_superuser=True)
    mine = submit_job(bob, "alpha", name="alpha-train", command=LONG)
    submit_job(oscar, "beta", name="beta-train", command=LONG)
    wait_for(lambda: job_state(mine["id"]) == "running", timeout=180, what="alpha-train running")
    wait_for(lambda: pod_uuids(mine["id"]), timeout=60, what="the watcher recording its GPU")

    base = console_server.url
    pages = {
        "home": (bob, "/"),
        "project": (bob, "/projects/alpha/"),
        "cluster": (bob, "/cluster/"),
        "overview": (staff, "/overview/"),
        "job list": (bob, "/jobs/"),
        "submit": (bob, "/jobs/new/"),
    }
    found = {}
    for name, (user, path) in pages.items():
        page = open_page(user)
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        found[name] = serious_violations(page)
        if name == "cluster":
            # bob's job is a link; oscar's shows only as another project
            page.locator(".gpu.held a", has_text="alpha/alpha-train").first.wait_for()
            assert page.locator(".foreign", has_text="another project").count() >= 1
            assert page.locator("text=beta-train").count() == 0
            screenshot(page, "cluster-page")
        if name in ("project", "overview"):
            screenshot(page, f"{name}-page")
    assert not any(found.values()), "\n".join(f"{n}: {v}" for n, v in found.items() if v)

    for user, path in (
        (bob, "/cluster/"),
        (bob, "/projects/alpha/"),
        (bob, "/"),
        (staff, "/overview/"),
    ):
        phone = open_page(user, viewport=PHONE)
        phone.goto(base + path)
        phone.wait_for_load_state("networkidle")
        assert fits_width(phone), f"{path} scrolls sideways at {PHONE['width']} px"
    screenshot(phone, "home-phone")


def test_admin_raises_a_quota_and_the_waiting_job_starts(e2e_org, console_server, open_page):
    """beta has 4 guaranteed GPUs and a department of its own: a 4-GPU job fills them, so a
    1-GPU job waits for quota; raising beta's quota to 5 in the admin lets it start."""
    from quotas.models import ProjectQuota
    from tests.factories import UserFactory

    oscar = e2e_org["oscar"]
    staff = UserFactory(username="sam", is_staff=True, is_superuser=True)
    hog = submit_job(oscar, "beta", name="hog", gpus=4, command=LONG)
    wait_for(lambda: job_state(hog["id"]) == "running", timeout=180, what="the 4-GPU job running")
    late = submit_job(oscar, "beta", name="late", gpus=1, command=LONG)
    wait_for(lambda: job_state(late["id"]) == "queued", timeout=180, what="the 1-GPU job queued")

    quota = ProjectQuota.objects.get(project=e2e_org["beta"], resource="gpu")
    page = open_page(staff)
    page.goto(f"{console_server.url}/admin/quotas/projectquota/{quota.pk}/change/")
    page.fill("#id_nominal", "5")
    page.click("input[name=_save]")
    page.locator(".messagelist", has_text="was changed successfully").wait_for()
    quota.refresh_from_db()
    assert quota.nominal == 5

    wait_for(
        lambda: job_state(late["id"]) in ("admitted", "running"),
        timeout=180,
        what="the waiting job admitted after the quota raise",
    )
    wait_for(
        lambda: job_state(late["id"]) == "running", timeout=180, what="the waiting job running"
    )
    assert job_state(hog["id"]) == "running"
