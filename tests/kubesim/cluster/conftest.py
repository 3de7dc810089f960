"""One simulated cluster (the built-in default, at speed 100) shared by this package's tests."""

from __future__ import annotations

import pytest
from kubernetes import client

from kubesim.testing import KubesimProcess

SPEED = 100.0


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kubesim-cluster")
    with KubesimProcess(speed=SPEED, workdir=workdir) as server:
        yield server


@pytest.fixture(scope="session")
def api_client(sim):
    api = sim.api_client()
    yield api
    api.close()


@pytest.fixture(scope="session")
def core(api_client):
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client):
    return client.BatchV1Api(api_client)


@pytest.fixture
def namespace(core, request):
    """A fresh namespace per test, named after it."""
    name = "t-" + request.node.name.lower().replace("_", "-")[:50].strip("-")
    core.create_namespace({"metadata": {"name": name}})
    return name
