"""Sample jobs for `make demo`: a few of each kind, so a newcomer sees jobs queue and run."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from jobs.models import Job
from jobs.services import job_submit

# (submitter, project, request). Commands kubesim does not recognise as a shell script run for its
# default duration (60 s) and log training progress; the scripts run as written.
SAMPLE_JOBS: list[tuple[str, str, dict[str, Any]]] = [
    (
        "vision-member",
        "vision",
        {
            "name": "resnet50-baseline",
            "kind": "single",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["python", "train.py", "--model", "resnet50"],
            "gpus": 1,
            "pool": "h100",
        },
    ),
    (
        "vision-member",
        "vision",
        {
            "name": "notebook-slice",
            "kind": "mig",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["sh", "-c", "echo warming up; sleep 45; echo finished"],
            "mig_profile": "1g.10gb",
            "pool": "h100",
        },
    ),
    (
        "nlp-member",
        "nlp",
        {
            "name": "llm-pretrain",
            "kind": "gang",
            "backend": "kueue",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["torchrun", "pretrain.py"],
            "gpus": 8,
            "replicas": 2,
            "pool": "h100",
        },
    ),
    (
        "speech-member",
        "speech",
        {
            "name": "asr-conformer-ddp",
            "kind": "gang",
            "backend": "volcano",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["torchrun", "train_asr.py"],
            "gpus": 4,
            "replicas": 2,
            "pool": "a100",
        },
    ),
    (
        # More than the research department has left while llm-pretrain runs: it queues.
        "vision-member",
        "vision",
        {
            "name": "vit-large-sweep",
            "kind": "single",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["python", "sweep.py"],
            "gpus": 8,
            "pool": "h100",
            "priority": "low",
        },
    ),
    # Issue 25: two notebooks on half a GPU each; KAI Scheduler puts them on the same L40S.
    *[
        (
            "vision-member",
            "vision",
            {
                "name": f"notebook-half-{letter}",
                "kind": "single",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["python", "notebook.py"],
                "gpu_fraction": 0.5,
                "pool": "l40s-kai",
            },
        )
        for letter in ("a", "b")
    ],
]


def submit_demo_jobs() -> int:
    """Submit the sample jobs once (when the portal has no job yet); returns how many."""
    if Job.objects.exists():
        return 0
    users = get_user_model().objects.in_bulk(
        [username for username, _, _ in SAMPLE_JOBS], field_name="username"
    )
    submitted = 0
    for username, project, request in SAMPLE_JOBS:
        job_submit(actor=users[username], project=project, data=request, source="demo")
        submitted += 1
    return submitted
