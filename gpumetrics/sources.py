"""Where readings come from: a concurrent sweep over the dcgm-exporter pods, or Prometheus.

Both return the same ParseResult (per-device readings), so attribution and storage never know
which source was used.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from gpumetrics.conf import MetricsConfig
from gpumetrics.parsing import ParseResult, parse_scrape, readings_from_vectors
from gpumetrics.series import WANTED_FIELDS
from portal.kube import metrics as kube_metrics

log = logging.getLogger(__name__)


@dataclass
class TargetOutcome:
    pod: str
    node: str
    ok: bool
    seconds: float
    error: str = ""
    samples: int = 0
    skipped_lines: int = 0


@dataclass
class SweepResult:
    readings: ParseResult
    targets: list[TargetOutcome] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(not t.ok for t in self.targets)


def _fetch(pod: kube_metrics.ExporterPod, cfg: MetricsConfig) -> str:
    if cfg.access == "direct":
        return kube_metrics.scrape_direct(pod, port=cfg.port, path=cfg.path, timeout=cfg.timeout)
    return kube_metrics.scrape_via_proxy(
        pod, port=cfg.port, path=cfg.path, timeout=cfg.timeout, pool_size=cfg.concurrency
    )


def scrape_exporters(
    cfg: MetricsConfig, pods: list[kube_metrics.ExporterPod], *, skip: frozenset[str] = frozenset()
) -> SweepResult:
    """Scrape every ready exporter pod concurrently (at most cfg.concurrency at once, each
    bounded by cfg.timeout); one slow or dead exporter costs only its own result."""
    result = SweepResult(readings=ParseResult())
    targets = [p for p in pods if p.ready and p.name not in skip]
    for pod in pods:
        if not pod.ready:
            result.targets.append(TargetOutcome(pod.name, pod.node, False, 0.0, "pod not ready"))
    if not targets:
        return result

    def one(pod: kube_metrics.ExporterPod) -> tuple[str, float]:
        started = time.monotonic()
        return _fetch(pod, cfg), time.monotonic() - started

    pool = ThreadPoolExecutor(max_workers=max(1, min(cfg.concurrency, len(targets))))
    try:
        futures = {pool.submit(one, pod): pod for pod in targets}
        # The socket timeout bounds each request; this deadline bounds the sweep even if a
        # server trickles bytes forever.
        _done, not_done = wait(futures, timeout=cfg.timeout * 2 + 1)
        for future, pod in futures.items():
            if future in not_done:
                future.cancel()
                result.targets.append(
                    TargetOutcome(pod.name, pod.node, False, cfg.timeout, "timed out")
                )
                continue
            try:
                text, seconds = future.result()
            except Exception as exc:  # any failure of one target is that target's outcome
                message = getattr(exc, "message", None) or f"{exc.__class__.__name__}: {exc}"
                result.targets.append(TargetOutcome(pod.name, pod.node, False, 0.0, message))
                continue
            before_samples = result.readings.samples
            before_skipped = result.readings.skipped_lines
            parse_scrape(text, result.readings)
            result.targets.append(
                TargetOutcome(
                    pod.name,
                    pod.node,
                    True,
                    seconds,
                    samples=result.readings.samples - before_samples,
                    skipped_lines=result.readings.skipped_lines - before_skipped,
                )
            )
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    for target in result.targets:
        if not target.ok:
            log.warning(
                "dcgm-exporter %s (%s) scrape failed: %s", target.pod, target.node, target.error
            )
    return result


def prometheus_query_url(base_url: str) -> str:
    names = "|".join(sorted(WANTED_FIELDS))
    query = urllib.parse.urlencode({"query": f'{{__name__=~"{names}"}}'})
    return f"{base_url.rstrip('/')}/api/v1/query?{query}"


def read_prometheus(cfg: MetricsConfig) -> SweepResult:
    """The latest value of each wanted DCGM series from Prometheus' HTTP API (instant query)."""
    if not cfg.prometheus_url:
        raise ValueError("PORTAL_METRICS_SOURCE=prometheus needs PORTAL_METRICS_PROMETHEUS_URL")
    started = time.monotonic()
    result = SweepResult(readings=ParseResult())
    try:
        # The URL is the operator's PORTAL_METRICS_PROMETHEUS_URL setting, not user input.
        request = urllib.request.Request(  # noqa: S310
            prometheus_query_url(cfg.prometheus_url), headers={"Accept": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=cfg.timeout) as response:  # noqa: S310
            body = json.loads(response.read())
        if body.get("status") != "success":
            raise ValueError(f"Prometheus answered {body.get('errorType')}: {body.get('error')}")
        vectors = []
        for item in body["data"]["result"]:
            value = item.get("value") or [None, "NaN"]
            try:
                number = float(value[1])
            except (TypeError, ValueError):
                result.readings.note(f"unparsable value {value!r}")
                continue
            vectors.append((item.get("metric") or {}, number))
        readings_from_vectors(vectors, result.readings)
    except Exception as exc:  # the source as a whole failed; counted like a failed target
        log.warning("Prometheus query failed: %s", exc)
        result.targets.append(
            TargetOutcome("prometheus", "", False, time.monotonic() - started, str(exc))
        )
        return result
    result.targets.append(
        TargetOutcome(
            "prometheus", "", True, time.monotonic() - started, samples=result.readings.samples
        )
    )
    return result
