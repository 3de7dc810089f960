"""Dynamic Resource Allocation with a simulated NVIDIA DRA driver (issue 26).

- The driver (dra-driver-nvidia-gpu v0.4.1, `gpu.nvidia.com`) publishes one ResourceSlice per
  node whose cluster pool sets `gpu.dra: true`: pool name = node name, devices `gpu-<minor>` and
  `gpu-<minor>-mig-<profile w/o dots>-<GI profile id>-<placement start>` with the attribute and
  capacity names the driver uses (`type`, `uuid`, `productName`, `brand`, `architecture`,
  `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`, MIG `parentUUID`/`profile`,
  `resource.kubernetes.io/pciBusID`; capacity `memory`, MIG `multiprocessors`).
- The chart's DeviceClasses `gpu.nvidia.com` and `mig.nvidia.com` are installed on every cluster
  with GPU nodes.
- The resourceclaim controller's part: a pod's `resourceClaimTemplateName` becomes a claim named
  `<pod>-<claim>-<5 chars>`, owned by the pod and annotated with the pod claim name; the pod's
  `status.resourceClaimStatuses` records it.
- The scheduler's part (called by kubesim.controllers.scheduler): a node fits when every claim
  can get devices of its slices whose DeviceClass and request CEL selectors all hold and that no
  other claim holds; then `status.allocation` (results driver/pool/device, nodeSelector) and
  `status.reservedFor` are written. Otherwise the node's reason is "cannot allocate all claims".
- When the pod ends or is deleted its reservation goes; a claim reserved for nobody is
  deallocated, and a claim generated for a pod is deleted with it.
"""

from __future__ import annotations

import contextlib
import hashlib

from kubesim.api import cel
from kubesim.api.errors import ApiError
from kubesim.clock import rfc3339
from kubesim.cluster import Cluster, NodeSpec, ensure
from kubesim.controllers.context import follow

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
STANDARD = "resource.kubernetes.io"
CANNOT_ALLOCATE = "cannot allocate all claims"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_SEMVER_KEY = "__kubesim_semver__"

DEVICE_CLASSES = {
    "gpu.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
    "device.attributes['gpu.nvidia.com'].type == 'gpu'",
    "mig.nvidia.com": "device.driver == 'gpu.nvidia.com' && "
    "device.attributes['gpu.nvidia.com'].type == 'mig'",
}


# -- CEL: the Kubernetes semver library on top of kubesim's CEL (quantities already there) -------
def _semver(text) -> dict:
    parts = str(text).split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"invalid semver {text!r}")
    return {_SEMVER_KEY: ".".join(str(int(p)) for p in parts)}


def _version_tuple(value) -> tuple[int, ...] | None:
    if isinstance(value, dict) and _SEMVER_KEY in value:
        return tuple(int(p) for p in value[_SEMVER_KEY].split("."))
    return None


def _compare(a, b) -> int:
    va, vb = _version_tuple(a), _version_tuple(b)
    if va is not None and vb is not None:
        return (va > vb) - (va < vb)
    return cel._compare_to(a, b)


FUNCTIONS = dict(cel.FUNCTIONS)
FUNCTIONS.update(
    {
        "semver": _semver,
        "compareTo": _compare,
        "isGreaterThan": lambda a, b: _compare(a, b) > 0,
        "isLessThan": lambda a, b: _compare(a, b) < 0,
    }
)


def _cel_value(value: dict):
    """A ResourceSlice attribute ({string|int|bool|version}) as a CEL value."""
    if "version" in value:
        return _semver(value["version"])
    for key in ("string", "int", "bool"):
        if key in value:
            return value[key]
    return None


def cel_device(driver: str, device: dict) -> dict:
    """The `device` variable of a selector: driver, attributes and capacity by domain."""
    attributes: dict[str, dict] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[short] = _cel_value(value)
    capacity: dict[str, dict] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[short] = cel._quantity(str(value.get("value")))
    return {"driver": driver, "attributes": attributes, "capacity": capacity}


def selector_matches(expression: str, device: dict) -> bool:
    """True when the CEL selector holds; a runtime error (a missing attribute) is no match."""
    program, error = cel.compile_expression(expression)
    if program is None:
        raise ValueError(error or "invalid CEL")
    try:
        return cel.evaluate(program, {"device": device}, FUNCTIONS) is True
    except cel.CelEvaluationError:
        return False


# -- what the driver publishes ------------------------------------------------------------------
def _slice_devices(cluster: Cluster, spec: NodeSpec) -> list[dict]:
    driver_version = cluster.driver_version
    dv = ([*driver_version.split("."), "0", "0"])[:3]
    cuda = ([*cluster.cuda_version.split("."), "0", "0"])[:3]
    devices = []
    for gpu in spec.gpus:
        model = gpu.model
        common = {
            "productName": {"string": model.nvml_name},
            "brand": {"string": "Nvidia" if "Tesla" not in model.nvml_name else "Tesla"},
            "architecture": {"string": model.family.replace("-", " ").title()},
            "cudaComputeCapability": {"version": f"{model.compute_major}.{model.compute_minor}.0"},
            "driverVersion": {"version": ".".join(str(int(x)) for x in dv)},
            "cudaDriverVersion": {"version": ".".join(str(int(x)) for x in cuda)},
            f"{STANDARD}/pciBusID": {"string": gpu.pci_bus_id.lower()[4:]},
            f"{STANDARD}/pcieRoot": {"string": "pci0000:00"},
        }
        if not gpu.mig_enabled:
            devices.append(
                {
                    "name": f"gpu-{gpu.index}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": gpu.uuid},
                        **common,
                    },
                    "capacity": {"memory": {"value": f"{model.memory_mib}Mi"}},
                }
            )
            continue
        for inst in gpu.instances:
            profile = inst.profile
            devices.append(
                {
                    "name": (
                        f"gpu-{gpu.index}-mig-{profile.name.replace('.', '').replace('+', '-')}"
                        f"-{profile.gi_profile_id}-{inst.placement_start}"
                    ),
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": inst.uuid},
                        "parentUUID": {"string": gpu.uuid},
                        "profile": {"string": profile.name},
                        **common,
                    },
                    "capacity": {
                        "memory": {"value": f"{profile.memory_mib}Mi"},
                        "multiprocessors": {"value": str(profile.multiprocessors)},
                    },
                }
            )
    return devices


def slice_name(node_name: str) -> str:
    digest = hashlib.sha256(node_name.encode()).hexdigest()[:5]
    return f"{node_name}-gpu.nvidia.com-{digest}"


def install(ctx) -> None:
    store = ctx.store
    cluster: Cluster = ctx.cluster
    if not cluster.gpu_nodes():
        return
    for name, expression in DEVICE_CLASSES.items():
        spec: dict = {"selectors": [{"cel": {"expression": expression}}]}
        if name == "gpu.nvidia.com":
            spec["extendedResourceName"] = "nvidia.com/gpu"
        ensure(
            store,
            {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec},
        )
    for node in cluster.gpu_nodes():
        if not node.dra:
            continue
        ensure(
            store,
            {
                "apiVersion": API,
                "kind": "ResourceSlice",
                "metadata": {"name": slice_name(node.name)},
                "spec": {
                    "driver": DRIVER,
                    "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": node.name,
                    "devices": _slice_devices(cluster, node),
                },
            },
            field_manager="gpu.nvidia.com",
        )


# -- claims -------------------------------------------------------------------------------------
def _claim_refs(pod: dict) -> list[dict]:
    return list((pod.get("spec") or {}).get("resourceClaims") or [])


def has_claims(pod: dict) -> bool:
    return bool(_claim_refs(pod))


def _generated_name(pod: dict, claim: str) -> str:
    meta = pod["metadata"]
    digest = hashlib.sha256(f"{meta.get('uid')}/{claim}".encode()).hexdigest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    suffix = "".join(alphabet[int(digest[i : i + 2], 16) % len(alphabet)] for i in range(0, 10, 2))
    return f"{meta['name'][:40]}-{claim[:10]}-{suffix}"


def pod_claims(store, pod: dict) -> tuple[list[dict], str | None]:
    """The claims a pod uses (generating those from templates), or a problem message."""
    meta = pod["metadata"]
    namespace = meta.get("namespace") or ""
    statuses = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    claims: list[dict] = []
    new_statuses = []
    for ref in _claim_refs(pod):
        name = ref.get("name", "")
        if ref.get("resourceClaimName"):
            claim = store.try_get(API, "ResourceClaim", namespace, ref["resourceClaimName"])
            if claim is None:
                return [], f'resourceclaim "{ref["resourceClaimName"]}" not found'
            claims.append(claim)
            continue
        template_name = ref.get("resourceClaimTemplateName")
        claim_name = statuses.get(name) or _generated_name(pod, name)
        claim = store.try_get(API, "ResourceClaim", namespace, claim_name)
        if claim is None:
            template = store.try_get(API, "ResourceClaimTemplate", namespace, template_name)
            if template is None:
                return [], f'resourceclaimtemplate "{template_name}" not found'
            tspec = template.get("spec") or {}
            claim = store.create(
                {
                    "apiVersion": API,
                    "kind": "ResourceClaim",
                    "metadata": {
                        "name": claim_name,
                        "namespace": namespace,
                        "labels": dict((tspec.get("metadata") or {}).get("labels") or {}),
                        "annotations": {POD_CLAIM_ANNOTATION: name},
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": meta["name"],
                                "uid": meta.get("uid", ""),
                                "controller": True,
                                "blockOwnerDeletion": True,
                            }
                        ],
                    },
                    "spec": tspec.get("spec") or {},
                },
                namespace=namespace,
                field_manager="resourceclaim-controller",
            )
        new_statuses.append({"name": name, "resourceClaimName": claim_name})
        claims.append(claim)
    if new_statuses and statuses != {s["name"]: s["resourceClaimName"] for s in new_statuses}:
        with contextlib.suppress(ApiError):
            store.patch(
                "v1",
                "Pod",
                namespace,
                meta["name"],
                {"status": {"resourceClaimStatuses": new_statuses}},
                subresource="status",
                field_manager="resourceclaim-controller",
            )
    return claims, None


def _slices(store) -> list[dict]:
    return store.list(API, "ResourceSlice")


def _allocated(store) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of every allocated claim."""
    out = set()
    for claim in store.list(API, "ResourceClaim"):
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or []:
            out.add((r.get("driver"), r.get("pool"), r.get("device")))
    return out


def _class_selectors(store, class_name: str) -> list[str] | None:
    device_class = store.try_get(API, "DeviceClass", None, class_name)
    if device_class is None:
        return None
    return [
        (s.get("cel") or {}).get("expression", "")
        for s in (device_class.get("spec") or {}).get("selectors") or []
    ]


def plan_for_node(
    store, claims: list[dict], node_name: str, taken: set | None = None
) -> list[tuple[dict, list[dict]]] | None:
    """Devices for every unallocated claim on this node: [(claim, results)], or None."""
    taken = set(_allocated(store) if taken is None else taken)
    candidates = [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d)
        for s in _slices(store)
        if (s.get("spec") or {}).get("nodeName") == node_name
        for d in s["spec"].get("devices") or []
    ]
    plan = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation:
            selector = allocation.get("nodeSelector") or {}
            nodes = [
                v
                for term in selector.get("nodeSelectorTerms") or []
                for f in term.get("matchFields") or []
                for v in f.get("values") or []
            ]
            if nodes and node_name not in nodes:
                return None
            continue
        results = []
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly") or {}
            class_selectors = _class_selectors(store, exactly.get("deviceClassName", ""))
            if class_selectors is None:
                return None
            expressions = class_selectors + [
                (s.get("cel") or {}).get("expression", "") for s in exactly.get("selectors") or []
            ]
            count = int(exactly.get("count") or 1)
            chosen = []
            for driver, pool, device in candidates:
                key = (driver, pool, device["name"])
                if key in taken:
                    continue
                view = cel_device(driver, device)
                if all(selector_matches(e, view) for e in expressions):
                    chosen.append(key)
                    taken.add(key)
                    if len(chosen) == count:
                        break
            if len(chosen) < count:
                return None
            results += [
                {"request": request.get("name"), "driver": d, "pool": p, "device": n}
                for d, p, n in chosen
            ]
        plan.append((claim, results))
    return plan


def allocate(store, plan: list[tuple[dict, list[dict]]], pod: dict, node_name: str) -> None:
    """Write the allocation and the pod's reservation, as kube-scheduler's DRA plugin does."""
    meta = pod["metadata"]
    consumer = {"resource": "pods", "name": meta["name"], "uid": meta.get("uid", "")}
    now = rfc3339(store.clock.now())
    for claim, results in plan:
        status = dict(claim.get("status") or {})
        status["allocation"] = {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            },
            "allocationTimestamp": now,
        }
        _write_status(store, claim, status, consumer)


def reserve(store, claims: list[dict], pod: dict) -> None:
    meta = pod["metadata"]
    consumer = {"resource": "pods", "name": meta["name"], "uid": meta.get("uid", "")}
    for claim in claims:
        current = store.try_get(
            API, "ResourceClaim", claim["metadata"].get("namespace"), claim["metadata"]["name"]
        )
        if current is not None and (current.get("status") or {}).get("allocation"):
            _write_status(store, current, dict(current.get("status") or {}), consumer)


def _write_status(store, claim: dict, status: dict, consumer: dict) -> None:
    reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != consumer["uid"]]
    status["reservedFor"] = [*reserved, consumer]
    meta = claim["metadata"]
    store.patch(
        API,
        "ResourceClaim",
        meta.get("namespace"),
        meta["name"],
        {"status": status},
        subresource="status",
        field_manager="kube-scheduler",
    )


def release(store, pod: dict, *, deleted: bool) -> None:
    """Drop the pod's reservations; deallocate claims nobody uses; delete its generated claims."""
    meta = pod["metadata"]
    namespace = meta.get("namespace")
    uid = meta.get("uid", "")
    for claim in store.list(API, "ResourceClaim", namespace):
        cmeta = claim["metadata"]
        owned = any(o.get("uid") == uid for o in cmeta.get("ownerReferences") or [])
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        if not owned and not any(r.get("uid") == uid for r in reserved):
            continue
        left = [r for r in reserved if r.get("uid") != uid]
        try:
            if left != reserved or (not left and status.get("allocation")):
                new_status = {k: v for k, v in status.items() if k not in ("reservedFor",)}
                if left:
                    new_status["reservedFor"] = left
                else:
                    new_status.pop("allocation", None)
                store.update(
                    {**claim, "status": new_status},
                    subresource="status",
                )
            if owned and deleted:
                store.delete(API, "ResourceClaim", namespace, cmeta["name"])
        except ApiError:
            continue


def _terminal(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def start(ctx) -> None:
    install(ctx)
    store = ctx.store

    def on_pod(event_type: str, pod: dict) -> None:
        if not has_claims(pod):
            return
        if event_type == "DELETED" or _terminal(pod):
            release(store, pod, deleted=event_type == "DELETED")

    ctx.spawn(follow(store, "v1", "Pod", on_pod), "dra-claims")
