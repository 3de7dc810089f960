"""One simulated cluster (the built-in default, at speed 100) shared by this package's tests."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubesim.testing import KubesimProcess

SPEED = 100.0


@pytest.fixture(scope="session")
def sim(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kubesim-cluster")
    # Opaque programs (`python train.py`) run until deleted here, not for the default simulated
    # minute (0.6 s of wall time at speed 100): the tests that look at a running trainer (its
    # DCGM profile, its graceful deletion) must not race its end on a busy machine.
    with KubesimProcess(
        speed=SPEED, workdir=workdir, extra_args=["--default-duration", "360000"]
    ) as server:
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
