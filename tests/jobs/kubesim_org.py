"""Helpers shared by the reconcile suites (the `cluster` and `org` fixtures are in conftest)."""

import time

H100 = "NVIDIA-H100-80GB-HBM3"


def submit(org, **data):
    from jobs.services import job_submit

    body = {"image": "nvcr.io/nvidia/pytorch:24.08-py3", "command": ["python", "train.py"]}
    body.update(data)
    return job_submit(actor=org["user"], project=org["project"], data=body).job


def reconcile_until(job, states, timeout=60.0):
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile

    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        job_reconcile(job_id=job.pk)
        state = Job.objects.get(pk=job.pk).state
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in states:
            return seen
        time.sleep(0.2)
    stored = Job.objects.get(pk=job.pk)
    raise AssertionError(
        f"job {job.pk} stuck; states seen: {seen}; last: {stored.state_reason}: "
        f"{stored.state_message[:500]}"
    )


def count_owned(kind, api_version, namespace, job_id):
    from portal.kube import apply as kube

    return len(
        kube.list_owned(
            api_version, kind, namespace=namespace, selector=f"gpu-portal.io/job-id={job_id}"
        )
    )
