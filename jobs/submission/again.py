"""Submit again": the request that repeats a stored job. One mapping for the form's pre-fill,
the planner's "submit this instead" and the API's and CLI's resubmit."""

from __future__ import annotations

from typing import Any

from jobs.models import Job, JobKind


def fields_of_job(job: Job) -> dict[str, Any]:
    """The request that would submit this job again (without its name)."""
    fields: dict[str, Any] = {
        "project": job.project.slug,
        "kind": job.kind,
        "image": job.image,
        "command": list(job.command or []),
        "env": dict(job.env or {}),
        "pool": job.pool.slug if job.pool_id else "",
        "cpu": job.cpu,
        "memory": job.memory,
        "priority": job.priority,
        "max_runtime_minutes": job.max_runtime_minutes,
        "mounts": [{"volume": m["volume"]} for m in job.mounts or [] if "volume" in m],
        "shm_size": job.shm_size,
        "termination_grace_seconds": job.termination_grace_seconds,
        "secret_files": list(job.secret_files or []),
    }
    if job.kind == JobKind.MIG:
        fields["mig_profile"] = job.mig_profile
    elif job.gpu_fraction is not None:
        fields["gpu_fraction"] = float(job.gpu_fraction)
    elif job.gpu_memory is not None:
        fields["gpu_memory"] = job.gpu_memory
    else:
        fields["gpus"] = job.gpus
    if job.kind == JobKind.GANG:
        fields.update(replicas=job.replicas, backend=job.backend)
    if job.device_request:
        fields["device"] = dict(job.device_request)
    return fields
