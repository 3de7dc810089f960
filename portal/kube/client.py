"""The configured Kubernetes ApiClient: kubeconfig or in-cluster, paced by a token bucket.

The official client has no client-side rate limiter, so every request made through the client
returned here first takes a token from a per-process bucket (default 20 requests/s, bursts of 40,
like client-go). PORTAL_KUBE_QPS=0 switches pacing off. Each worker process paces itself; with W
worker processes the cluster sees at most W × QPS.
"""

import os
import threading
import time

from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config

DEFAULT_QPS = 20.0
DEFAULT_BURST = 40
DEFAULT_TIMEOUT_SECONDS = 30


class TokenBucket:
    """Classic token bucket: `rate` tokens per second up to `burst`; acquire() blocks."""

    def __init__(self, rate: float, burst: int, clock=time.monotonic, sleep=time.sleep):
        self.rate = float(rate)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, waiting if needed; returns the seconds waited."""
        if self.rate <= 0:
            return 0.0
        waited = 0.0
        while True:
            with self._lock:
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= 1 - 1e-9:  # tolerate float rounding of the refill
                    self._tokens = max(0.0, self._tokens - 1)
                    return waited
                delay = (1 - self._tokens) / self.rate
            self._sleep(delay)
            waited += delay


class PacedApiClient(k8s.ApiClient):
    """An ApiClient whose every HTTP request first waits for the rate limiter."""

    def __init__(self, *args, bucket: TokenBucket | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.bucket = bucket

    def request(self, *args, **kwargs):
        if self.bucket is not None:
            self.bucket.acquire()
        if kwargs.get("_request_timeout") is None:
            kwargs["_request_timeout"] = DEFAULT_TIMEOUT_SECONDS
        return super().request(*args, **kwargs)


_lock = threading.Lock()
_cached: tuple[int, str, PacedApiClient] | None = None


def settings_key() -> str:
    """Identifies the configured cluster (caches of cluster facts are keyed by it)."""
    return "|".join(
        str(getattr(settings, name, ""))
        for name in (
            "KUBECONFIG",
            "PORTAL_KUBE_IN_CLUSTER",
            "PORTAL_KUBE_QPS",
            "PORTAL_KUBE_BURST",
            "PORTAL_KUBE_POOL_SIZE",
        )
    )


def build_api_client(*, paced: bool = True) -> PacedApiClient:
    """A new client from settings: in-cluster config or the kubeconfig file; `paced=False`
    leaves out the rate limiter."""
    configuration = k8s.Configuration()
    if getattr(settings, "PORTAL_KUBE_IN_CLUSTER", False):
        k8s_config.load_incluster_config(client_configuration=configuration)
    else:
        k8s_config.load_kube_config(
            config_file=str(settings.KUBECONFIG), client_configuration=configuration
        )
    # The cluster watcher holds one streaming connection per watched collection.
    configuration.connection_pool_maxsize = int(getattr(settings, "PORTAL_KUBE_POOL_SIZE", 8))
    qps = float(getattr(settings, "PORTAL_KUBE_QPS", DEFAULT_QPS))
    burst = int(getattr(settings, "PORTAL_KUBE_BURST", DEFAULT_BURST))
    bucket = TokenBucket(qps, burst) if qps > 0 and paced else None
    return PacedApiClient(configuration=configuration, bucket=bucket)


def get_api_client() -> PacedApiClient:
    """The process's shared client (one rate limiter per process; rebuilt after a fork or when
    the kube settings change, e.g. in tests)."""
    global _cached
    key = settings_key()
    with _lock:
        if _cached is None or _cached[0] != os.getpid() or _cached[1] != key:
            _cached = (os.getpid(), key, build_api_client())
        return _cached[2]


_lease_cached: tuple[int, str, PacedApiClient] | None = None


def get_lease_client() -> PacedApiClient:
    """The process's client for leader election, apart from the shared one: a Lease renewal must
    never queue behind the process's own reads in the rate limiter or the connection pool (as
    client-go's leader election is usually given a client of its own). Two calls per renewal
    period, so it needs no pacing."""
    global _lease_cached
    key = settings_key()
    with _lock:
        if _lease_cached is None or _lease_cached[0] != os.getpid() or _lease_cached[1] != key:
            _lease_cached = (os.getpid(), key, build_api_client(paced=False))
        return _lease_cached[2]


def reset_api_client() -> None:
    global _cached, _lease_cached
    with _lock:
        _cached = None
        _lease_cached = None
