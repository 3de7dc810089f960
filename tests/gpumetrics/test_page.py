"""The job page carries the GPU charts (uPlot, vendored) fed by the metrics API."""

import hashlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.django_db

VENDOR = Path(__file__).resolve().parents[2] / "static" / "vendor"


def test_job_page_has_the_metrics_charts(make_job, personas, web_client_for):
    job = make_job()
    page = web_client_for(personas.member).get(f"/jobs/{job.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f'data-gpu-metrics="/api/v1/jobs/{job.pk}/metrics/?series=' in html
    assert 'data-refresh="15"' in html  # a live job's charts refresh
    assert "vendor/uPlot-1.6.32.iife.min.js" in html
    script = web_client_for(personas.member).get("/static/vendor/uPlot-1.6.32.iife.min.js")
    assert script.status_code == 200


def test_vendored_uplot_matches_the_recorded_checksum():
    readme = (VENDOR / "README.md").read_text()
    for name in ("uPlot-1.6.32.iife.min.js", "uPlot-1.6.32.min.css"):
        digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
        assert f"`{name}`" in readme
        assert digest in readme
