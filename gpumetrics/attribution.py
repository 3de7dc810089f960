"""Which portal job each device reading belongs to, and the isolation check. Pure functions.

Attribution is by pod: dcgm-exporter labels a device held by a pod with that pod's `namespace`
and `pod`, and every pod of a portal job has a deterministic name derived from the job id
(jobs.manifests.object_name: `gp-job-<id>` plus the Job/vcjob controller's suffix) in the
project's namespace. A reading is a job's only if both the name and the namespace match the job;
a MIG instance is identified by its parent GPU's UUID and its GPU instance id.

KAI GPU fractions (issue 25): a shared GPU is held, for the device plugin and therefore for the
exporter, by KAI's reservation pod (namespace kai-resource-reservation), not by the jobs. Its
readings go to every portal job whose fraction pod KAI put on that GPU (found by the pod's
runai-gpu-group label and the reservation's GPU UUID, see jobs.status.with_shared_gpu). The
exporter does not split a GPU between them, so each gets the whole GPU's reading; the isolation
check stays quiet about jobs sharing a GPU by design, and still warns when a whole GPU of one
job shows up in another job.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from gpumetrics.parsing import DeviceKey, DeviceReading
from gpumetrics.series import UTIL

_POD_NAME = re.compile(r"^gp-job-(\d+)(?:-|$)")
KAI_RESERVATION_NAMESPACE = "kai-resource-reservation"


def job_id_from_pod(pod: str) -> int | None:
    """The portal job id encoded in a pod name, or None for any other pod."""
    match = _POD_NAME.match(pod or "")
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class JobFacts:
    """What attribution needs to know about a portal job."""

    job_id: int
    namespace: str
    devices_expected: int  # GPUs (or MIG instances) the job asked for, over all its pods


@dataclass
class NodeTotal:
    """Readings of devices no portal job holds, summed per node (for the cluster view)."""

    devices: int = 0
    util_sum: float = 0.0
    held_by_others: int = 0  # held by a pod that is not a portal job's


@dataclass
class Attribution:
    by_job: dict[int, list[DeviceReading]] = field(default_factory=dict)
    # (job id, GPU UUID) of readings a job gets through a shared (KAI fraction) GPU → its share.
    shared: dict[tuple[int, str], float] = field(default_factory=dict)
    unattributed: dict[str, NodeTotal] = field(default_factory=dict)
    warnings: dict[int, list[str]] = field(default_factory=dict)

    def warn(self, job_id: int, message: str) -> None:
        self.warnings.setdefault(job_id, []).append(message)


def attribute(
    devices: dict[DeviceKey, DeviceReading] | list[DeviceReading],
    jobs: dict[int, JobFacts],
    shared: dict[str, dict[int, float]] | None = None,
) -> Attribution:
    """Split readings into per-job lists and per-node totals of everything else; raise the
    isolation warnings (more devices than asked for, one device in two jobs). ``shared``: GPU
    UUID → {job id: share} of the GPUs KAI shares between fraction jobs."""
    readings = devices.values() if isinstance(devices, dict) else devices
    shared = shared or {}
    out = Attribution()
    holders: dict[tuple[str, str], set[int]] = defaultdict(set)
    sharers: dict[str, set[int]] = defaultdict(set)
    for reading in readings:
        if reading.namespace == KAI_RESERVATION_NAMESPACE and shared.get(reading.key.uuid):
            for job_id, share in sorted(shared[reading.key.uuid].items()):
                out.by_job.setdefault(job_id, []).append(reading)
                out.shared[(job_id, reading.key.uuid)] = share
                sharers[reading.key.uuid].add(job_id)
            continue
        job_id = job_id_from_pod(reading.pod)
        facts = jobs.get(job_id) if job_id is not None else None
        if facts is None or reading.namespace != facts.namespace:
            total = out.unattributed.setdefault(reading.key.node, NodeTotal())
            total.devices += 1
            total.util_sum += reading.fields.get(UTIL, 0.0)
            total.held_by_others += bool(reading.pod)
            continue
        out.by_job.setdefault(facts.job_id, []).append(reading)
        holders[(reading.key.uuid, reading.key.gi_id)].add(facts.job_id)
    for job_id, held in out.by_job.items():
        if job_id not in jobs:
            continue  # a fraction job: its one shared GPU, by design
        expected = jobs[job_id].devices_expected
        distinct = {(r.key.uuid, r.key.gi_id) for r in held}
        if len(distinct) > expected:
            out.warn(
                job_id,
                f"isolation check: the job asked for {expected} GPU device(s) but shows up on "
                f"{len(distinct)}: " + ", ".join(sorted(str(r.key) for r in held)),
            )
    for (uuid, gi_id), job_ids in holders.items():
        job_ids = job_ids | (sharers.get(uuid, set()) if not gi_id else set())
        if len(job_ids) > 1:
            device = f"{uuid}/gi{gi_id}" if gi_id else uuid
            for job_id in sorted(job_ids):
                others = ", ".join(str(j) for j in sorted(job_ids - {job_id}))
                out.warn(
                    job_id,
                    f"isolation check: GPU {device} shows up in this job and in job(s) {others} "
                    "at the same time",
                )
    return out
