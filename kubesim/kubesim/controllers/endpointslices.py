"""discovery.k8s.io/v1 EndpointSlices for Services, as the EndpointSlice controller keeps them:
one slice `<service>-<hash>` per Service with endpoints (labels `kubernetes.io/service-name` and
`endpointslice.kubernetes.io/managed-by`), derived here from the Endpoints object the endpoints
controller writes (same addresses, readiness, target pods and ports)."""

from __future__ import annotations

import contextlib
import hashlib

from kubesim.api import errors

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "endpointslice-controller.k8s.io"


def slice_name(service: str) -> str:
    return f"{service[:57]}-{hashlib.sha1(service.encode(), usedforsecurity=False).hexdigest()[:5]}"


def slice_for(endpoints: dict) -> dict:
    meta = endpoints["metadata"]
    items: list[dict] = []
    ports: list[dict] = []
    for subset in endpoints.get("subsets") or []:
        for ready, key in ((True, "addresses"), (False, "notReadyAddresses")):
            for address in subset.get(key) or []:
                endpoint: dict = {
                    "addresses": [address.get("ip")],
                    "conditions": {"ready": ready, "serving": ready, "terminating": False},
                }
                if address.get("nodeName"):
                    endpoint["nodeName"] = address["nodeName"]
                if address.get("hostname"):
                    endpoint["hostname"] = address["hostname"]
                if address.get("targetRef"):
                    endpoint["targetRef"] = address["targetRef"]
                items.append(endpoint)
        for port in subset.get("ports") or []:
            if port not in ports:
                ports.append(port)
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name(meta["name"]),
            "namespace": meta.get("namespace"),
            "labels": {
                **(meta.get("labels") or {}),
                SERVICE_NAME_LABEL: meta["name"],
                MANAGED_BY_LABEL: MANAGED_BY,
            },
        },
        "addressType": "IPv4",
        "endpoints": items,
        "ports": ports,
    }


def install(ctx) -> None:
    store = ctx.store

    def written(event_type: str, rtype, obj: dict, old: dict | None) -> None:
        if (rtype.group, rtype.kind) != ("", "Endpoints"):
            return
        namespace = obj["metadata"].get("namespace")
        name = slice_name(obj["metadata"]["name"])
        with contextlib.suppress(errors.ApiError):
            if event_type == "DELETED":
                store.delete("discovery.k8s.io/v1", "EndpointSlice", namespace, name)
                return
            wanted = slice_for(obj)
            service = store.try_get("v1", "Service", namespace, obj["metadata"]["name"])
            if service is not None:
                wanted["metadata"]["ownerReferences"] = [
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "name": service["metadata"]["name"],
                        "uid": service["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
            current = store.try_get("discovery.k8s.io/v1", "EndpointSlice", namespace, name)
            if current is None:
                store.create(wanted, namespace=namespace)
            elif (current.get("endpoints"), current.get("ports")) != (
                wanted["endpoints"],
                wanted["ports"],
            ):
                store.patch(
                    "discovery.k8s.io/v1",
                    "EndpointSlice",
                    namespace,
                    name,
                    {"endpoints": wanted["endpoints"], "ports": wanted["ports"]},
                )

    store.add_write_listener(written)
