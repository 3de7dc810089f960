"""The portal's own Prometheus metrics, gathered from every process and served at /metrics.

The figures come from different processes (the watcher counts events and lag, workers time
reconciles, the web process serves the page), so each process adds to a few Redis hashes and the
/metrics view reads them back. Writes are buffered in memory and flushed once a second from a
daemon thread, so instrumenting a hot path costs a dict update, never a network round trip.
Without Redis (the demo) each process keeps its figures to itself and /metrics shows the web
process's own only.

Metric names (all prefixed gpuportal_):
- watch_events_total{kind}                 cluster events the watcher processed
- watch_lag_seconds                         last event's delay: processed time - write time
- watch_lag_seconds_bucket/_sum/_count      the same as a histogram
- watcher_leader{identity}                  1 while that watcher holds the Lease (expires)
- reconcile_duration_seconds_bucket/...     reconcile task durations, by outcome
- reconcile_failures_total{reason}          reconciles that ended in an error
- task_queue_depth{queue}                   messages waiting in the Celery queue (Redis)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator

from django.conf import settings
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

log = logging.getLogger(__name__)

PREFIX = "gpuportal_"
COUNTERS_KEY = "portal:metrics:counters"
GAUGES_KEY = "portal:metrics:gauges"
FLUSH_SECONDS = 1.0
DEFAULT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
CELERY_QUEUES = ("celery",)

HELP = {
    "watch_events_total": ("counter", "Cluster watch events the watcher processed."),
    "watch_lag_seconds": ("histogram", "Delay from the API server's write to the portal's."),
    "watch_lag_last_seconds": ("gauge", "The lag of the last processed event."),
    "watcher_leader": ("gauge", "1 while this watcher identity holds the leader Lease."),
    "reconcile_duration_seconds": ("histogram", "Duration of reconcile tasks."),
    "reconcile_failures_total": ("counter", "Reconcile tasks that ended in an error."),
    "task_queue_depth": ("gauge", "Messages waiting in the Celery queue."),
}


def _key(name: str, labels: dict[str, str] | None) -> str:
    """'name|k=v,k=v' (labels sorted): one hash field per series."""
    if not labels:
        return name + "|"
    return name + "|" + ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _parse_key(field: str) -> tuple[str, dict[str, str]]:
    name, _, rest = field.partition("|")
    labels = dict(pair.split("=", 1) for pair in rest.split(",") if "=" in pair)
    return name, labels


class _Recorder:
    """In-memory deltas, flushed to Redis by a daemon thread (or kept here without Redis)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pending: dict[str, float] = defaultdict(float)
        self.gauges: dict[str, tuple[float, float | None]] = {}  # field -> (value, expires at)
        self.local: dict[str, float] = defaultdict(float)  # without Redis: the running totals
        self.thread: threading.Thread | None = None

    def add(self, field: str, amount: float) -> None:
        with self.lock:
            self.pending[field] += amount
            self._ensure_thread()

    def set(self, field: str, value: float, ttl: float | None) -> None:
        with self.lock:
            self.gauges[field] = (value, time.time() + ttl if ttl else None)
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            self.thread = threading.Thread(target=self._loop, name="metrics-flush", daemon=True)
            self.thread.start()

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_SECONDS)
            self.flush()

    def flush(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, defaultdict(float)
            gauges = dict(self.gauges)
        client = _redis()
        if client is None:
            with self.lock:
                for field, amount in pending.items():
                    self.local[field] += amount
            return
        try:
            pipe = client.pipeline(transaction=False)
            for field, amount in pending.items():
                pipe.hincrbyfloat(COUNTERS_KEY, field, amount)
            for field, (value, expires) in gauges.items():
                pipe.hset(GAUGES_KEY, field, f"{value}|{expires or ''}")
            pipe.execute()
        except Exception:  # metrics must never break the work they measure
            log.debug("could not flush metrics", exc_info=True)
            with self.lock:
                for field, amount in pending.items():
                    self.pending[field] += amount


_recorder = _Recorder()


def _redis():
    url = getattr(settings, "PORTAL_PUBSUB_URL", "")
    if not url:
        return None
    from portal import pubsub

    return pubsub.redis_client()


# --- what instrumented code calls ---------------------------------------------------------


def count(name: str, amount: float = 1.0, **labels: str) -> None:
    _recorder.add(_key(name, labels), amount)


def observe(name: str, value: float, buckets: Iterable[float] = DEFAULT_BUCKETS, **labels) -> None:
    """One observation of a histogram (cumulative buckets, sum and count)."""
    for bound in buckets:
        if value <= bound:
            _recorder.add(_key(name + "_bucket", {**labels, "le": repr(float(bound))}), 1)
    _recorder.add(_key(name + "_bucket", {**labels, "le": "+Inf"}), 1)
    _recorder.add(_key(name + "_sum", labels), value)
    _recorder.add(_key(name + "_count", labels), 1)


def gauge(name: str, value: float, ttl: float | None = None, **labels: str) -> None:
    """Set a gauge; with ttl it disappears unless set again in time (a leader that died)."""
    _recorder.set(_key(name, labels), value, ttl)


def flush() -> None:
    """Write buffered figures now (tests, and processes about to exit)."""
    _recorder.flush()


# --- what /metrics reads ------------------------------------------------------------------


def _read_stored() -> tuple[dict[str, float], dict[str, float]]:
    client = _redis()
    now = time.time()
    if client is None:
        _recorder.flush()
        with _recorder.lock:
            counters = dict(_recorder.local)
            gauges = {f: v for f, (v, exp) in _recorder.gauges.items() if not exp or exp > now}
        return counters, gauges
    counters = {_text(f): float(v) for f, v in client.hgetall(COUNTERS_KEY).items()}
    gauges: dict[str, float] = {}
    for field, raw in client.hgetall(GAUGES_KEY).items():
        value, _, expires = _text(raw).partition("|")
        if expires and float(expires) < now:
            continue
        gauges[_text(field)] = float(value)
    return counters, gauges


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _queue_depths() -> dict[str, int]:
    broker = getattr(settings, "CELERY_BROKER_URL", "")
    if not broker.startswith("redis"):
        return {}
    import redis

    client = redis.Redis.from_url(broker, socket_timeout=2, socket_connect_timeout=2)
    try:
        return {queue: int(client.llen(queue)) for queue in CELERY_QUEUES}
    finally:
        client.close()


def collect() -> Iterator[Metric]:
    """Every metric family, built from the stored figures (a prometheus_client collector)."""
    counters, gauges = _read_stored()
    families: dict[str, Metric] = {}

    def family(base: str) -> Metric:
        if base not in families:
            kind, doc = HELP.get(base, ("gauge", base))
            full = PREFIX + base
            if kind == "counter":
                families[base] = CounterMetricFamily(full.removesuffix("_total"), doc, labels=None)
            elif kind == "histogram":
                families[base] = _HistogramBuilder(full, doc)
            else:
                families[base] = GaugeMetricFamily(full, doc, labels=None)
        return families[base]

    for field, value in sorted(counters.items()):
        name, labels = _parse_key(field)
        for suffix in ("_bucket", "_sum", "_count"):
            if (
                name.endswith(suffix)
                and HELP.get(name.removesuffix(suffix), ("",))[0] == "histogram"
            ):
                family(name.removesuffix(suffix)).add(suffix, labels, value)
                break
        else:
            family(name).add_sample(PREFIX + name, labels, value)
    for field, value in sorted(gauges.items()):
        name, labels = _parse_key(field)
        family(name).add_sample(PREFIX + name, labels, value)
    try:
        depths = _queue_depths()
    except Exception:
        log.debug("could not read the Celery queue depth", exc_info=True)
        depths = {}
    for queue, depth in depths.items():
        family("task_queue_depth").add_sample(PREFIX + "task_queue_depth", {"queue": queue}, depth)
    for built in families.values():
        yield built.build() if isinstance(built, _HistogramBuilder) else built


class _HistogramBuilder:
    """Collects bucket/sum/count samples per label set, then builds one HistogramMetricFamily."""

    def __init__(self, name: str, doc: str):
        self.name, self.doc = name, doc
        self.series: dict[tuple, dict] = defaultdict(lambda: {"buckets": {}, "sum": 0.0})

    def add(self, suffix: str, labels: dict[str, str], value: float) -> None:
        le = labels.pop("le", None)
        entry = self.series[tuple(sorted(labels.items()))]
        if suffix == "_bucket" and le is not None:
            entry["buckets"][le] = value
        elif suffix == "_sum":
            entry["sum"] = value

    def build(self) -> HistogramMetricFamily:
        label_names = sorted({k for key in self.series for k, _ in key})
        family = HistogramMetricFamily(self.name, self.doc, labels=label_names)
        for key, entry in self.series.items():
            labels = dict(key)
            buckets = sorted(
                entry["buckets"].items(),
                key=lambda item: float("inf") if item[0] == "+Inf" else float(item[0]),
            )
            family.add_metric(
                [labels.get(n, "") for n in label_names], buckets, sum_value=entry["sum"]
            )
        return family


# --- the view -------------------------------------------------------------------------------


def metrics_allowed(request) -> bool:
    """A bearer token when PORTAL_METRICS_TOKEN is set; otherwise loopback callers and staff."""
    import hmac

    token = getattr(settings, "PORTAL_METRICS_TOKEN", "")
    if token:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())
    if request.META.get("REMOTE_ADDR") in ("127.0.0.1", "::1"):
        return True
    user = getattr(request, "user", None)
    return bool(user and user.is_authenticated and user.is_staff)


def metrics_view(request):
    from django.http import HttpResponse
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
    from prometheus_client.registry import CollectorRegistry

    if not metrics_allowed(request):
        return HttpResponse(
            "Metrics need the bearer token (PORTAL_METRICS_TOKEN) or a staff login.\n",
            status=403,
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


class _Collector:
    def collect(self) -> Iterator[Metric]:
        return collect()
