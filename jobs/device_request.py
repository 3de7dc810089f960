"""Asking for a DRA device by its attributes (issue 26): validation and the claim template.

A job in a DRA-managed pool may say what GPU it needs instead of a count name:
``{"product_name": "NVIDIA H100 80GB HBM3", "architecture": "Hopper",
"min_compute_capability": "8.0", "min_memory": "40Gi"}``; a MIG job's profile comes from its
``mig_profile``. The portal writes one ResourceClaimTemplate per job with CEL selectors over the
attributes the NVIDIA DRA driver (v0.4.1) publishes; the pod references it. Pure functions.
"""

from __future__ import annotations

import re
from typing import Any

from quotas import sharing

# request key → (driver attribute or capacity, how it is compared)
KEYS = {
    "product_name": "productName",
    "architecture": "architecture",
    "min_compute_capability": "cudaComputeCapability",
    "min_memory": "memory",
}
# Everything the driver publishes on a device (attributes and capacities), for the messages.
PUBLISHED = (
    "type, uuid, productName, brand, architecture, cudaComputeCapability, driverVersion, "
    "cudaDriverVersion, parentUUID, profile; capacity memory"
)
CLAIM_NAME = "gpu"
_CC_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


def template_name(job_id: int) -> str:
    return f"gp-job-{job_id}-gpu"


def errors(
    request: object, *, pool_slug: str, gpu_model: str, dra_managed: bool
) -> list[tuple[str, str]]:
    """(field, message) for each problem of a device request in this pool."""
    if request in (None, {}):
        return []
    if not isinstance(request, dict):
        return [("device", 'A JSON object, e.g. {"min_memory": "40Gi"}.')]
    out: list[tuple[str, str]] = []
    if not dra_managed:
        out.append(
            (
                "device",
                f"Pool {pool_slug or '(any)'} is not DRA-managed: ask by count there "
                "(gpus or mig_profile), or choose a DRA-managed pool.",
            )
        )
        return out
    facts = sharing.gpu_facts(gpu_model)
    for key, value in request.items():
        field = f"device.{key}"
        if key not in KEYS:
            out.append(
                (
                    field,
                    f"The NVIDIA DRA driver publishes no attribute {key!r}; you may ask by "
                    f"{', '.join(KEYS)} (the driver publishes {PUBLISHED}).",
                )
            )
            continue
        if not isinstance(value, str) or not value.strip():
            out.append((field, "A non-empty string."))
            continue
        if key == "min_memory":
            wanted = sharing.parse_bytes(value)
            if wanted is None or wanted <= 0:
                out.append((field, f"{value!r} is not a memory size like 40Gi."))
                continue
            memory = sharing.gpu_memory_mib(gpu_model)
            if memory and wanted > memory * 2**20:
                out.append(
                    (
                        field,
                        f"can never run: the largest GPU in pool {pool_slug} has "
                        f"{sharing.gib(memory)} ({gpu_model}).",
                    )
                )
        elif key == "min_compute_capability":
            match = _CC_RE.match(value.strip())
            if not match:
                out.append((field, f"{value!r} is not a compute capability like 8.0."))
            elif facts and _cc(value) > _cc(facts.compute_capability):
                out.append(
                    (
                        field,
                        f"can never run: the GPUs in pool {pool_slug} have compute capability "
                        f"{facts.compute_capability}.",
                    )
                )
        elif key == "product_name" and facts and value != facts.product_name:
            out.append(
                (field, f"can never run: pool {pool_slug} has {facts.product_name!r} GPUs only.")
            )
        elif key == "architecture" and facts and value.lower() != facts.architecture.lower():
            out.append(
                (field, f"can never run: pool {pool_slug} has {facts.architecture} GPUs only.")
            )
    return out


def _cc(text: str) -> tuple[int, int, int]:
    match = _CC_RE.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a compute capability")
    return (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def selectors(request: dict[str, str], *, mig_profile: str = "") -> list[str]:
    """The CEL selectors of the claim, in a fixed order."""
    out = []
    attr = "device.attributes['gpu.nvidia.com']"
    if request.get("product_name"):
        out.append(f"{attr}.productName == {_quote(request['product_name'])}")
    if request.get("architecture"):
        out.append(f"{attr}.architecture == {_quote(request['architecture'])}")
    if request.get("min_compute_capability"):
        version = ".".join(str(n) for n in _cc(request["min_compute_capability"]))
        out.append(f"{attr}.cudaComputeCapability.compareTo(semver('{version}')) >= 0")
    if request.get("min_memory"):
        out.append(
            "device.capacity['gpu.nvidia.com'].memory.compareTo("
            f"quantity({_quote(request['min_memory'])})) >= 0"
        )
    if mig_profile:
        out.append(f"{attr}.profile == {_quote(mig_profile)}")
    return out


def claim_template(
    *,
    job_id: int,
    namespace: str,
    labels: dict[str, str],
    request: dict[str, str],
    mig_profile: str,
    sharing_config: list[dict],
    count: int = 1,
) -> dict[str, Any]:
    """The job's ResourceClaimTemplate (resource.k8s.io/v1): `count` devices per pod."""
    exactly: dict[str, Any] = {
        "deviceClassName": sharing.DRA_MIG_CLASS if mig_profile else sharing.DRA_GPU_CLASS,
        "count": 1 if mig_profile else max(1, count),
    }
    expressions = selectors(request, mig_profile=mig_profile)
    if expressions:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    devices: dict[str, Any] = {"requests": [{"name": CLAIM_NAME, "exactly": exactly}]}
    if sharing_config:
        devices["config"] = sharing_config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(job_id), "namespace": namespace, "labels": labels},
        "spec": {"metadata": {"labels": labels}, "spec": {"devices": devices}},
    }
