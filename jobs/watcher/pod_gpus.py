"""The pods of a job as the watcher records them, with the GPUs each holds: the device plugin's
annotation for whole GPUs, MIG slices and shares; KAI's reservation pod for a fraction (the
device plugin gave the GPU to the reservation pod); the allocated device of its claims for a DRA
pod (the kubelet names no GPU there; the device's `uuid` attribute in the driver's ResourceSlice
does). The cluster page's holders and a job's "where it ran" come from these records."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from jobs.status import PodRecord, dra_claim_names, pod_record, with_gpu_uuids, with_shared_gpu
from portal.kube import dra
from portal.kube.apply import KubeError

log = logging.getLogger(__name__)


def pod_records(
    namespace: str,
    pods: list[dict[str, Any]],
    *,
    kai_reservations: Callable[[], dict[str, tuple[str, str, str]]],
    previous: Mapping[str, PodRecord] | None = None,
) -> list[PodRecord]:
    """One record per pod, in the pods' order. kai_reservations is called (once) only when a
    fraction pod needs its GPU; a DRA pod's claims are read once it is on a node, unless
    `previous` (the records last written, by pod uid) already names its GPU: a claim's
    allocation does not change while its pod lives. A claim that cannot be read leaves the
    record without one: the next event of the pod tries again."""
    previous = previous or {}
    records = [pod_record(p) for p in pods]
    if any(r.gpu_group and not r.gpu_uuids for r in records):
        reservations = kai_reservations()
        records = [with_shared_gpu(r, reservations) for r in records]
    out = []
    for pod, record in zip(pods, records, strict=True):
        claims = dra_claim_names(pod)
        if claims and record.node and not record.gpu_uuids:
            known = previous.get(record.uid)
            if known is not None and known.gpu_uuids:
                out.append(with_gpu_uuids(record, known.gpu_uuids))
                continue
            try:
                record = with_gpu_uuids(record, dra.claimed_gpu_uuids(namespace, claims))
            except KubeError as exc:
                log.warning("pod %s: its claims cannot be read: %s", record.name, exc.message)
        out.append(record)
    return out
