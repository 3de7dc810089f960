"""The configured Kubernetes ApiClient: kubeconfig or in-cluster, paced by a token bucket.

In-cluster (PORTAL_KUBE_IN_CLUSTER) the pod's service account token and the cluster's CA are read
from files, the token again every minute (kubelet rotates projected tokens), as the official
client's in-cluster loader does. PORTAL_KUBE_TOKEN_FILE, PORTAL_KUBE_CA_FILE and PORTAL_KUBE_HOST
replace the pod's paths and the KUBERNETES_SERVICE_HOST/PORT variables, so the same code path runs
outside a pod (the tests run it against kubesim with a ServiceAccount's token).

The official client has no client-side rate limiter, so every request made through the client
returned here first takes a token from a per-process bucket (default 20 requests/s, bursts of 40,
like client-go). PORTAL_KUBE_QPS=0 switches pacing off. Each worker process paces itself; with W
worker processes the cluster sees at most W × QPS.
"""

import os
import threading
import time
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config import incluster_config

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
            "PORTAL_KUBE_HOST",
            "PORTAL_KUBE_TOKEN_FILE",
            "PORTAL_KUBE_CA_FILE",
            "PORTAL_KUBE_QPS",
            "PORTAL_KUBE_BURST",
            "PORTAL_KUBE_POOL_SIZE",
        )
    )


def _service_environ(host: str) -> dict[str, str]:
    """KUBERNETES_SERVICE_HOST/PORT as the in-cluster loader reads them, from PORTAL_KUBE_HOST
    ("https://host:port", "host:port" or "[v6]:port"); the pod's own variables when empty."""
    if not host:
        return dict(os.environ)
    parsed = urlsplit(host if "://" in host else f"https://{host}")
    if parsed.scheme != "https" or not parsed.hostname:
        raise ImproperlyConfigured(
            f"PORTAL_KUBE_HOST must be https://HOST[:PORT] (the API server), not {host!r}"
        )
    return {
        incluster_config.SERVICE_HOST_ENV_NAME: parsed.hostname,
        incluster_config.SERVICE_PORT_ENV_NAME: str(parsed.port or 443),
    }


def load_in_cluster(configuration: k8s.Configuration) -> None:
    """The service account's token and CA from their files (the pod's, or the overrides)."""
    loader = incluster_config.InClusterConfigLoader(
        token_filename=getattr(settings, "PORTAL_KUBE_TOKEN_FILE", "")
        or incluster_config.SERVICE_TOKEN_FILENAME,
        cert_filename=getattr(settings, "PORTAL_KUBE_CA_FILE", "")
        or incluster_config.SERVICE_CERT_FILENAME,
        environ=_service_environ(getattr(settings, "PORTAL_KUBE_HOST", "")),
    )
    loader.load_and_set(configuration)


def build_api_client(*, paced: bool = True) -> PacedApiClient:
    """A new client from settings: in-cluster config or the kubeconfig file; `paced=False`
    leaves out the rate limiter."""
    configuration = k8s.Configuration()
    if getattr(settings, "PORTAL_KUBE_IN_CLUSTER", False):
        load_in_cluster(configuration)
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
