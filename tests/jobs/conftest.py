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


@pytest.fixture(autouse=True)
def _in_memory_broker():
    """Tasks enqueued on commit by transactional tests go to an in-process broker, never to the
    demo's filesystem broker directory (tests/e2e points the app at Redis instead)."""
    from portal.celery import app

    saved = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = "memory://"
    app.conf.broker_transport_options = {}
    app._pool = None
    app.amqp._producer_pool = None
    yield
    app.conf.broker_url, app.conf.broker_transport_options = saved
    app._pool = None
    app.amqp._producer_pool = None
