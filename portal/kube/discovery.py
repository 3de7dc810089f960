"""Which job backends the cluster can run: are Kueue's, Volcano's and KAI's CRDs served?

One discovery GET per API group/version, remembered for a short while per process, so a job
can be told "the cluster has no Volcano installed" instead of being retried in silence, and
/healthz?deep=1 can say which backends are usable.
"""

import threading
import time
from dataclasses import dataclass

from portal.kube import apply as kube
from portal.kube.client import settings_key

# backend → (display name, the (group/version, resource) pairs the portal uses)
BACKEND_RESOURCES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "kueue": (
        "Kueue",
        (
            ("kueue.x-k8s.io/v1beta2", "workloads"),
            ("kueue.x-k8s.io/v1beta2", "localqueues"),
            ("kueue.x-k8s.io/v1beta2", "clusterqueues"),
        ),
    ),
    "volcano": (
        "Volcano",
        (
            ("batch.volcano.sh/v1alpha1", "jobs"),
            ("scheduling.volcano.sh/v1beta1", "podgroups"),
            ("scheduling.volcano.sh/v1beta1", "queues"),
        ),
    ),
    "kai": (
        "KAI Scheduler",
        (
            ("scheduling.run.ai/v2", "queues"),
            ("scheduling.run.ai/v2alpha2", "podgroups"),
        ),
    ),
}
CACHE_SECONDS = 30.0

_lock = threading.Lock()
# (cluster settings, group/version) → (when asked, served resources or None)
_cache: dict[tuple[str, str], tuple[float, frozenset[str] | None]] = {}


@dataclass(frozen=True)
class BackendStatus:
    backend: str
    label: str
    missing: tuple[str, ...]  # "group/version resource" not served

    @property
    def installed(self) -> bool:
        return not self.missing

    @property
    def message(self) -> str:
        if self.installed:
            return f"{self.label} is installed"
        return f"the cluster has no {self.label} installed (not served: {', '.join(self.missing)})"


def _served(api_version: str, max_age: float) -> frozenset[str] | None:
    now = time.monotonic()
    key = (settings_key(), api_version)
    with _lock:
        hit = _cache.get(key)
    if hit is not None and now - hit[0] < max_age:
        return hit[1]
    resources = kube.api_resources(api_version)  # RetryableKubeError when unreachable
    with _lock:
        _cache[key] = (now, resources)
    return resources


def backend_status(backend: str, *, max_age: float = CACHE_SECONDS) -> BackendStatus:
    """Whether the cluster serves every resource the backend needs (max_age=0: ask now)."""
    label, needed = BACKEND_RESOURCES[backend]
    served_by_version = {v: _served(v, max_age) for v in dict.fromkeys(v for v, _ in needed)}
    missing = []
    for api_version, resource in needed:
        served = served_by_version[api_version]
        if served is None or resource not in served:
            missing.append(f"{api_version} {resource}")
    return BackendStatus(backend=backend, label=label, missing=tuple(missing))


def all_backends(*, max_age: float = CACHE_SECONDS) -> list[BackendStatus]:
    return [backend_status(name, max_age=max_age) for name in BACKEND_RESOURCES]


def forget() -> None:
    """Drop what was remembered (after a CRD is installed, or between tests)."""
    with _lock:
        _cache.clear()
