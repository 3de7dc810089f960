"""Fixtures for job tests: a job factory on top of the shared personas."""

import pytest


@pytest.fixture
def make_job(personas):
    from jobs.models import Job

    counter = {"n": 0}

    def make(**overrides):
        counter["n"] += 1
        fields = {
            "project": personas.project_a,
            "submitter": personas.member,
            "name": f"job-{counter['n']}",
            "kind": "single",
            "image": "pytorch/pytorch:2.4.0",
            "command": ["python", "train.py"],
            "env": {},
            "gpus": 1,
            "replicas": 1,
            "cpu": "4",
            "memory": "16Gi",
            "priority": "normal",
            "max_runtime_minutes": 60,
            "backend": "kueue",
        }
        fields.update(overrides)
        return Job.objects.create(**fields)

    return make
