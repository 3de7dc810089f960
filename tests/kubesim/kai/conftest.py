"""KAI tests share one kubesim per module (kubesim_module, with the module's KUBESIM_OPTIONS);
each test works in its own namespace and node pool."""

from __future__ import annotations

import itertools
import uuid

import pytest
from kubernetes import client

_names = itertools.count()


@pytest.fixture
def api(kubesim_module):
    api_client = kubesim_module.api_client()
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def namespace(api):
    name = f"kai-{next(_names)}-{uuid.uuid4().hex[:5]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(api).delete_namespace(name)
