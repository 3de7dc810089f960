"""The concurrent sweep by pod IP (in-cluster access) against local HTTP servers: a slow and a
dead exporter cost only themselves; the healthy ones are read within the timeout."""

import contextlib
import threading
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


def serve(before_answer=lambda: None, host: str = "127.0.0.1", port: int = 0):
    """An exporter serving the A100 sample; each request first runs `before_answer` (to hold
    the answer back); one whose hook raises is answered 500."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            try:
                before_answer()
            except Exception:
                with contextlib.suppress(OSError):  # the client may have given up
                    self.send_error(500)
                return
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
    """A healthy exporter and one that does not answer until the test is over, on one port at
    two pod IPs (loopback addresses)."""
    over = threading.Event()
    good = serve(host="127.0.0.2")
    slow = serve(lambda: over.wait(120), "127.0.0.3", good.server_address[1])
    yield good, slow
    over.set()
    for server in (good, slow):
        server.shutdown()
        server.server_close()


def test_slow_and_dead_exporters_do_not_hold_up_the_sweep(exporters):
    good, _slow = exporters
    cfg = replace(CFG, port=good.server_address[1], timeout=5.0)
    pods = [
        ExporterPod("gpu-operator", "good", "n1", "127.0.0.2", True),
        ExporterPod("gpu-operator", "slow", "n2", "127.0.0.3", True),
        ExporterPod("gpu-operator", "dead", "n3", "127.0.0.4", True),  # nothing listens
    ]
    # The slow exporter answers only once the test is over: a sweep that waited for it would
    # not return before then, and would find it ok.
    result = scrape_exporters(cfg, pods)
    outcomes = {t.pod: t for t in result.targets}
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
    # Each of the four exporters answers only once all four requests are in flight at the same
    # time: a sweep scraping one after another would see its first request time out.
    all_in_flight = threading.Barrier(4)
    exporter = serve(lambda: all_in_flight.wait(timeout=60))
    try:
        cfg = replace(CFG, port=exporter.server_address[1], timeout=30.0)
        pods = [ExporterPod("gpu-operator", f"p{i}", f"n{i}", "127.0.0.1", True) for i in range(4)]
        result = scrape_exporters(cfg, pods)
    finally:
        all_in_flight.abort()
        exporter.shutdown()
        exporter.server_close()
    assert [t.error for t in result.targets if not t.ok] == []
    assert len(result.targets) == 4
