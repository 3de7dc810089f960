"""The app's settings with their defaults (all PORTAL_METRICS_*; see
docs/operations/configuration.md)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class MetricsConfig:
    source: str  # "dcgm" (scrape the exporters) or "prometheus"
    prometheus_url: str
    period: float
    namespace: str
    label_selector: str
    port: int
    path: str
    access: str  # "proxy" (API server pod proxy) or "direct" (pod IP)
    concurrency: int
    timeout: float
    idle_threshold: float
    idle_warn_minutes: float
    retention_raw_days: float
    retention_minute_days: float
    retention_hour_days: float  # 0 = forever
    # Samples must span this long before a job is judged idle or busy (gpumetrics.idle).
    idle_min_minutes: float = 5.0


def config() -> MetricsConfig:
    get = lambda name, default: getattr(settings, name, default)  # noqa: E731
    in_cluster = bool(get("PORTAL_KUBE_IN_CLUSTER", False))
    return MetricsConfig(
        source=str(get("PORTAL_METRICS_SOURCE", "dcgm")),
        prometheus_url=str(get("PORTAL_METRICS_PROMETHEUS_URL", "")),
        period=float(get("PORTAL_METRICS_PERIOD_SECONDS", 15.0)),
        namespace=str(get("PORTAL_METRICS_NAMESPACE", "gpu-operator")),
        label_selector=str(get("PORTAL_METRICS_LABEL_SELECTOR", "app=nvidia-dcgm-exporter")),
        port=int(get("PORTAL_METRICS_PORT", 9400)),
        path=str(get("PORTAL_METRICS_PATH", "/metrics")),
        access=str(get("PORTAL_METRICS_ACCESS", "") or ("direct" if in_cluster else "proxy")),
        concurrency=int(get("PORTAL_METRICS_CONCURRENCY", 16)),
        timeout=float(get("PORTAL_METRICS_TIMEOUT_SECONDS", 5.0)),
        idle_threshold=float(get("PORTAL_METRICS_IDLE_THRESHOLD", 10.0)),
        idle_warn_minutes=float(get("PORTAL_METRICS_IDLE_WARN_MINUTES", 30.0)),
        idle_min_minutes=float(get("PORTAL_METRICS_IDLE_MIN_MINUTES", 5.0)),
        retention_raw_days=float(get("PORTAL_METRICS_RETENTION_RAW_DAYS", 7)),
        retention_minute_days=float(get("PORTAL_METRICS_RETENTION_MINUTE_DAYS", 90)),
        retention_hour_days=float(get("PORTAL_METRICS_RETENTION_HOUR_DAYS", 0)),
    )
