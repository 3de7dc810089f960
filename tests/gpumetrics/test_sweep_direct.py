"""The concurrent sweep by pod IP (in-cluster access) against local HTTP servers: a slow and a
dead exporter cost only themselves; the healthy ones are read within the timeout."""

import threading
import time
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpumetrics.conf import MetricsConfig
from gpumetrics.sources import scrape_exporters
from portal.kube.metrics import ExporterPod

A100 = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "dcgm"
    / "a100-whole-gpu-plus-mig-1g.5gb-instance_nvidia-docs.prom"
).read_bytes()

CFG = MetricsConfig(
    source="dcgm",
    prometheus_url="",
    period=15,
    namespace="gpu-operator",
    label_selector="app=nvidia-dcgm-exporter",
    port=0,
    path="/metrics",
    access="direct",
    concurrency=4,
    timeout=1.0,
    idle_threshold=10,
    idle_warn_minutes=30,
    retention_raw_days=7,
    retention_minute_days=90,
    retention_hour_days=0,
)


def serve(delay: float, host: str = "127.0.0.1", port: int = 0):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            time.sleep(delay)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(A100)
            except OSError:
                pass  # the client gave up (the slow exporter)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def exporters():
    """A healthy and a slow exporter on one port at two pod IPs (loopback addresses)."""
    good = serve(0.0, "127.0.0.2")
    slow = serve(5.0, "127.0.0.3", good.server_address[1])
    yield good, slow
    for server in (good, slow):
        server.shutdown()
        server.server_close()


def test_slow_and_dead_exporters_do_not_hold_up_the_sweep(exporters):
    good, _slow = exporters
    cfg = replace(CFG, port=good.server_address[1])
    pods = [
        ExporterPod("gpu-operator", "good", "n1", "127.0.0.2", True),
        ExporterPod("gpu-operator", "slow", "n2", "127.0.0.3", True),
        ExporterPod("gpu-operator", "dead", "n3", "127.0.0.4", True),  # nothing listens
    ]
    started = time.monotonic()
    result = scrape_exporters(cfg, pods)
    elapsed = time.monotonic() - started
    outcomes = {t.pod: t for t in result.targets}
    assert elapsed < 2 * cfg.timeout + 1.5  # bounded by the timeout, not the slow server
    assert outcomes["good"].ok
    assert outcomes["good"].samples == result.readings.samples > 0
    assert len(result.readings.devices) == 2
    assert not outcomes["slow"].ok
    assert "timed out" in outcomes["slow"].error.lower()
    assert not outcomes["dead"].ok


def test_not_ready_exporters_are_counted_not_scraped():
    result = scrape_exporters(CFG, [ExporterPod("gpu-operator", "p", "n", "", False)])
    (outcome,) = result.targets
    assert (outcome.ok, outcome.error) == (False, "pod not ready")


def test_one_sweep_runs_scrapes_concurrently():
    # four targets of 0.6 s each, four at once: about 0.6 s, not 2.4
    slow_ok = serve(0.6)
    try:
        cfg = replace(CFG, port=slow_ok.server_address[1], timeout=3.0)
        pods = [ExporterPod("gpu-operator", f"p{i}", f"n{i}", "127.0.0.1", True) for i in range(4)]
        started = time.monotonic()
        result = scrape_exporters(cfg, pods)
        elapsed = time.monotonic() - started
    finally:
        slow_ok.shutdown()
        slow_ok.server_close()
    assert all(t.ok for t in result.targets)
    assert elapsed < 4 * 0.6
