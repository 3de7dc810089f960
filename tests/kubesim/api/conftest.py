import uuid

import pytest
from kubernetes import client


@pytest.fixture
def core(kube_client):
    return client.CoreV1Api(kube_client)


@pytest.fixture
def batch(kube_client):
    return client.BatchV1Api(kube_client)


@pytest.fixture
def custom(kube_client):
    return client.CustomObjectsApi(kube_client)


@pytest.fixture
def namespace(core):
    """A namespace of the test's own on the session server."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    return name
