"""Resource quantities as exact integers (milli-units), parsed and printed the Kubernetes way.

Kueue and Volcano both do their quota arithmetic on exact quantities; we keep every amount as an
integer number of milli-units so that "500m" CPU, "36Gi" memory and "8" GPUs add up exactly.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
# Resources whose canonical printed form uses binary suffixes (as the API server prints them).
_BINARY_RESOURCES = {"memory", "ephemeral-storage", "storage"}


def to_milli(value: object) -> int:
    """Parse a quantity ("1", "500m", "36Gi", 2, 1.5) into integer milli-units (rounded up)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        return int((Decimal(str(value)) * 1000).to_integral_value(rounding="ROUND_CEILING"))
    text = str(value).strip()
    if not text:
        raise ValueError("empty quantity")
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            number = _decimal(text[: -len(suffix)], value)
            return int((number * factor * 1000).to_integral_value(rounding="ROUND_CEILING"))
    lowered = text.lower()
    if "e" in lowered and not text.endswith("E"):
        return int((_decimal(text, value) * 1000).to_integral_value(rounding="ROUND_CEILING"))
    suffix = text[-1] if text[-1] in "numkMGTPE" else ""
    number = _decimal(text[: len(text) - len(suffix)], value)
    scaled = number * _DECIMAL[suffix] * 1000
    return int(scaled.to_integral_value(rounding="ROUND_CEILING"))


def _decimal(text: str, original: object) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {original!r}") from exc


def format_milli(resource: str, milli: int) -> str:
    """Print milli-units in the canonical quantity form ("2", "500m", "36Gi")."""
    if milli % 1000:
        return f"{milli}m"
    value = milli // 1000
    if value == 0:
        return "0"
    if resource in _BINARY_RESOURCES:
        for suffix, factor in reversed(list(_BINARY.items())):
            if value % factor == 0:
                return f"{value // factor}{suffix}"
        for suffix in ("E", "P", "T", "G", "M", "k"):
            factor = int(_DECIMAL[suffix])
            if value % factor == 0:
                return f"{value // factor}{suffix}"
    return str(value)
    for suffix in ("E", "P", "T", "G", "M", "k"):
        factor = int(_DECIMAL[suffix])
        if value % factor == 0 and value >= factor and resource not in ("cpu",):
            if resource.startswith(("nvidia.com/", "pods")):
                break
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
