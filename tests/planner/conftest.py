"""Fixtures of the planner tests: jobs placed in time, as the watcher would have recorded them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest


def make_job(
    personas,
    *,
    name: str,
    state: str,
    created: datetime,
    started: datetime | None = None,
    ended: datetime | None = None,
    gpus: int = 1,
    kind: str = "single",
    mig_profile: str = "",
    project=None,
    submitter=None,
    priority: str = "normal",
    max_runtime_minutes: int = 60,
    image: str = "nvcr.io/nvidia/pytorch:24.05-py3",
):
    """A job with its submission, start and end times set (the auto_now fields overwritten)."""
    from jobs.models import Job, JobEvent

    project = project or personas.project_a
    job = Job.objects.create(
        project=project,
        submitter=submitter or personas.member,
        name=name,
        kind=kind,
        image=image,
        gpus=0 if kind == "mig" else gpus,
        mig_profile=mig_profile,
        pool=personas.pool,
        eligible_pools=[personas.pool.slug],
        cpu="8",
        memory="64Gi",
        priority=priority,
        max_runtime_minutes=max_runtime_minutes,
        backend="kueue",
        state=state,
    )
    changed = ended or started or created
    Job.objects.filter(pk=job.pk).update(created_at=created, state_changed_at=changed)
    if started is not None:
        event = JobEvent.objects.create(
            job=job, from_state="queued", to_state="running", reason="Running", source="test"
        )
        JobEvent.objects.filter(pk=event.pk).update(created_at=started)
    job.refresh_from_db()
    return job


@pytest.fixture
def busy_alpha(personas):
    """Project alpha (8 GPUs guaranteed, alone in its department) runs an 8-GPU job for another
    55 minutes; the pool offers 1g.10gb slices and alpha has 7 of them."""
    from django.utils import timezone

    from quotas.models import ProjectQuota

    ProjectQuota.objects.create(
        project=personas.project_a, pool=personas.pool, resource="1g.10gb", nominal=7
    )
    now = timezone.now()
    running = make_job(
        personas,
        name="big-run",
        state="running",
        created=now - timedelta(minutes=6),
        started=now - timedelta(minutes=5),
        gpus=8,
        max_runtime_minutes=60,
    )
    return running
