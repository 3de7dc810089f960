"""No page loads more than 150 KB of JavaScript and CSS together, gzip-compressed: the sum over
each page's linked static files (scripts and stylesheets), compressed as whitenoise serves them."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

BUDGET_BYTES = 150 * 1024
ASSET = re.compile(
    r'<script[^>]+src="(?P<js>/static/[^"]+)"|<link[^>]+rel="stylesheet"[^>]+href="(?P<css>/static/[^"]+)"'
)

pytestmark = pytest.mark.django_db


def linked_assets(html: str) -> list[str]:
    return sorted({m.group("js") or m.group("css") for m in ASSET.finditer(html)})


def gzip_size(url: str) -> int:
    from django.conf import settings
    from django.contrib.staticfiles import finders

    path = finders.find(url.removeprefix(settings.STATIC_URL).split("?")[0])
    assert path, f"{url} is linked but not found among the static files"
    return len(gzip.compress(Path(path).read_bytes(), compresslevel=9))


@pytest.fixture
def pages(personas, make_job_for_budget):
    job = make_job_for_budget()
    return {
        "home": "/",
        "project": "/projects/alpha/",
        "cluster": "/cluster/",
        "overview": "/overview/",
        "job list": "/jobs/",
        "submit": "/jobs/new/",
        "job": f"/jobs/{job.pk}/",
        "profile": "/profile/",
        "admin": "/admin/",
        "admin form": f"/admin/tenants/project/{personas.project_a.pk}/change/",
    }


@pytest.fixture
def make_job_for_budget(personas):
    from jobs.models import Job

    def make():
        return Job.objects.create(
            project=personas.project_a,
            submitter=personas.member,
            name="budget",
            kind="single",
            image="pytorch/pytorch:2.4.0",
            gpus=1,
            cpu="4",
            memory="16Gi",
            max_runtime_minutes=60,
            backend="kueue",
        )

    return make


def test_every_page_stays_within_the_js_and_css_budget(
    pages, personas, web_client_for, settings, capsys
):
    from portal.kube import nodes

    # The cluster page renders without a reachable cluster (the budget is about its assets).
    settings.KUBECONFIG = "/nonexistent/kubeconfig"
    nodes.forget()
    personas.staff.is_superuser = True
    personas.staff.save()
    client = web_client_for(personas.staff)
    totals = {}
    for name, url in pages.items():
        response = client.get(url)
        assert response.status_code == 200, (name, response.status_code)
        assets = linked_assets(response.content.decode())
        assert assets or name.startswith("admin"), f"{name}: no asset (stale regex?)"
        totals[name] = (sum(gzip_size(a) for a in assets), assets)
    with capsys.disabled():
        for name, (total, assets) in totals.items():
            print(f"\n  {name:10} {total / 1024:6.1f} KB gzip  {len(assets)} files")
    over = {n: t for n, (t, _) in totals.items() if t > BUDGET_BYTES}
    assert not over, f"pages over {BUDGET_BYTES} bytes of gzip JS+CSS: {over}"


def test_the_budget_check_sees_the_heaviest_page(personas, web_client_for):
    """The project page links the chart library: its total is clearly more than the base page's,
    so a regex that missed assets would show here."""
    client = web_client_for(personas.admin)
    project = linked_assets(client.get("/projects/alpha/").content.decode())
    home = linked_assets(client.get("/").content.decode())
    assert any("uPlot" in a for a in project)
    assert sum(map(gzip_size, project)) > sum(map(gzip_size, home)) > 10_000
