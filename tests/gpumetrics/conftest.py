"""Fixtures for GPU metrics tests: a job factory, one simulated cluster for the package."""

import pytest
from kubernetes import client
from kubesim.testing import KubesimProcess


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


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    # opaque programs ("python train.py") run until deleted
    with KubesimProcess(
        speed=50,
        workdir=tmp_path_factory.mktemp("ks-metrics"),
        extra_args=["--default-duration", "1000000"],
    ) as server:
        yield server


@pytest.fixture
def kube(sim, settings):
    from portal.kube.client import reset_api_client
    from portal.kube.metrics import reset_scrape_clients

    settings.KUBECONFIG = str(sim.kubeconfig)
    settings.PORTAL_METRICS_PERIOD_SECONDS = 15
    reset_api_client()
    reset_scrape_clients()
    api = sim.api_client()
    yield client.CoreV1Api(api)
    api.close()
    reset_scrape_clients()
