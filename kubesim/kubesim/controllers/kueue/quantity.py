"""Resource quantities as exact integers (milli-units), parsed and printed the Kubernetes way.

Kueue and Volcano both do their quota arithmetic on exact quantities; we keep every amount as an
integer number of milli-units so that "500m" CPU, "36Gi" memory and "8" GPUs add up exactly.
"""

from __future__ import annotations

import math
from functools import lru_cache

from kubesim.api.quantity import Quantity

# Resources whose canonical printed form uses binary suffixes (as the API server prints them).
_BINARY_RESOURCES = {"memory", "ephemeral-storage", "storage"}
_BINARY_SUFFIXES = [("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20)]
_BINARY_SUFFIXES.append(("Ki", 2**10))
_DECIMAL_SUFFIXES = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6)]
_DECIMAL_SUFFIXES.append(("k", 10**3))


def to_milli(value: object) -> int:
    """Parse a quantity ("1", "500m", "36Gi", 2, 1.5) into integer milli-units (rounded up)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return _text_to_milli(value.strip())
    return math.ceil(Quantity.parse(value).value * 1000)


@lru_cache(maxsize=4096)
def _text_to_milli(text: str) -> int:
    # The same few strings ("1", "8", "64Gi") recur in every pod: parse each once.
    return math.ceil(Quantity.parse(text).value * 1000)


def format_milli(resource: str, milli: int) -> str:
    """Print milli-units in the canonical quantity form ("2", "500m", "36Gi")."""
    if milli % 1000:
        return f"{milli}m"
    value = milli // 1000
    if value == 0:
        return "0"
    if resource in _BINARY_RESOURCES:
        for suffix, factor in _BINARY_SUFFIXES + _DECIMAL_SUFFIXES:
            if value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)


def requests_of_pod_spec(pod_spec: dict) -> dict[str, int]:
    """Effective per-pod requests: max(sum of containers, each init container), limits as requests.

    Kubernetes (and Kueue) use a container's limit as its request when only the limit is set.
    """
    total: dict[str, int] = {}
    for container in pod_spec.get("containers") or []:
        for name, amount in _container_requests(container).items():
            total[name] = total.get(name, 0) + amount
    for container in pod_spec.get("initContainers") or []:
        for name, amount in _container_requests(container).items():
            if amount > total.get(name, 0):
                total[name] = amount
    for name, amount in (pod_spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + to_milli(amount)
    return total


def _container_requests(container: dict) -> dict[str, int]:
    resources = container.get("resources") or {}
    requests = {k: to_milli(v) for k, v in (resources.get("requests") or {}).items()}
    for name, amount in (resources.get("limits") or {}).items():
        requests.setdefault(name, to_milli(amount))
    return requests
