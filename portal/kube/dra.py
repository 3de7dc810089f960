"""Which device a DRA claim got (issue 26), read through the official client's ResourceV1Api.

For each pod of a job: the claim generated from its template (`status.resourceClaimStatuses`),
the claim's `status.allocation.devices.results` (driver, pool, device) and `reservedFor`, and the
device's `uuid` / `productName` / `profile` attributes from the driver's ResourceSlice of that
pool (the highest `pool.generation`). Read-only; kubernetes.client 34.1+ has ResourceV1Api.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client as k8s

from portal.kube.apply import classify
from portal.kube.client import get_api_client


@dataclass(frozen=True)
class AllocatedDevice:
    pod: str
    claim: str
    driver: str
    pool: str
    device: str
    uuid: str = ""
    product: str = ""
    profile: str = ""
    reserved_for: tuple[str, ...] = ()


def _attr(device, name: str) -> str:
    value = (device.attributes or {}).get(name)
    if value is None:
        return ""
    return str(value.string or value.version or value.int or "")


def _slice_devices(api: k8s.ResourceV1Api, driver: str, pool: str) -> dict[str, object]:
    newest: dict[str, object] = {}
    generation = -1
    for item in api.list_resource_slice().items:
        spec = item.spec
        if spec.driver != driver or spec.pool.name != pool:
            continue
        if spec.pool.generation > generation:
            generation, newest = spec.pool.generation, {}
        if spec.pool.generation == generation:
            newest.update({d.name: d for d in spec.devices or []})
    return newest


def allocated_devices(namespace: str, label_selector: str) -> list[AllocatedDevice]:
    """The devices allocated to the claims of the pods the selector matches (an empty list when
    none is allocated). Raises portal.kube.apply.KubeError when the cluster cannot be read."""
    try:
        return _allocated_devices(namespace, label_selector)
    except (k8s.ApiException, OSError) as exc:
        raise classify(exc) from exc


def _allocated_devices(namespace: str, label_selector: str) -> list[AllocatedDevice]:
    api_client = get_api_client()
    core = k8s.CoreV1Api(api_client)
    resource = k8s.ResourceV1Api(api_client)
    out: list[AllocatedDevice] = []
    slices: dict[tuple[str, str], dict[str, object]] = {}
    for pod in core.list_namespaced_pod(namespace, label_selector=label_selector).items:
        for status in (pod.status and pod.status.resource_claim_statuses) or []:
            if status.resource_claim_name:
                out.extend(
                    _claim_devices(
                        resource, namespace, status.resource_claim_name, pod.metadata.name, slices
                    )
                )
    return out


def claimed_gpu_uuids(namespace: str, claim_names: list[str]) -> list[str]:
    """The `uuid` attributes of the devices allocated to these claims, in claim order ([] while
    none is allocated). Raises portal.kube.apply.KubeError when the cluster cannot be read."""
    try:
        resource = k8s.ResourceV1Api(get_api_client())
        slices: dict[tuple[str, str], dict[str, object]] = {}
        return [
            device.uuid
            for name in claim_names
            for device in _claim_devices(resource, namespace, name, "", slices)
            if device.uuid
        ]
    except (k8s.ApiException, OSError) as exc:
        raise classify(exc) from exc


def _claim_devices(
    resource: k8s.ResourceV1Api,
    namespace: str,
    claim_name: str,
    pod_name: str,
    slices: dict[tuple[str, str], dict[str, object]],
) -> list[AllocatedDevice]:
    """The claim's allocated devices with their slice attributes (slices: read once per driver
    and pool, shared by the calls of one read)."""
    try:
        claim = resource.read_namespaced_resource_claim(claim_name, namespace)
    except k8s.ApiException as exc:
        if exc.status == 404:
            return []
        raise
    allocation = claim.status and claim.status.allocation
    if not allocation or not allocation.devices:
        return []
    reserved = tuple(r.name for r in (claim.status.reserved_for or []))
    out = []
    for result in allocation.devices.results or []:
        key = (result.driver, result.pool)
        if key not in slices:
            slices[key] = _slice_devices(resource, *key)
        device = slices[key].get(result.device)
        out.append(
            AllocatedDevice(
                pod=pod_name,
                claim=claim.metadata.name,
                driver=result.driver,
                pool=result.pool,
                device=result.device,
                uuid=_attr(device, "uuid") if device else "",
                product=_attr(device, "productName") if device else "",
                profile=_attr(device, "profile") if device else "",
                reserved_for=reserved,
            )
        )
    return out
