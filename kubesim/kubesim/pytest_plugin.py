"""pytest fixtures that start kubesim processes (list "kubesim.pytest_plugin" in pytest_plugins).

- `kubesim_api`: one server per test session with the vendored CRDs and no simulated cluster
  (API machinery only);
- `kubesim`: one server per test session with the vendored CRDs and the simulated cluster;
- `kubesim_factory`: start servers with any options inside one test (stopped after it);
- `kubesim_fresh`: a server of its own for one test (vendored CRDs, no cluster);
- `kubesim_rbac`: one server per test session that enforces RBAC (`--rbac`; vendored CRDs, no
  cluster); its admin kubeconfig is allowed everything, other users only what their roles grant;
- `kubesim_module`: one server per test module, started with the module's `KUBESIM_OPTIONS`
  (KubesimProcess keyword arguments such as `cluster=` and `speed=`);
- `kube_client`: a kubernetes.client.ApiClient for `kubesim_api`.
"""

from __future__ import annotations

import os

import pytest

from kubesim.testing import KubesimProcess


def _speed() -> float:
    return float(os.environ.get("KUBESIM_TEST_SPEED", "1"))


@pytest.fixture(scope="session")
def kubesim_api(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kubesim-api")
    with KubesimProcess(no_cluster=True, workdir=workdir) as server:
        yield server


@pytest.fixture(scope="session")
def kubesim(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kubesim")
    with KubesimProcess(speed=_speed(), workdir=workdir) as server:
        yield server


@pytest.fixture(scope="session")
def kubesim_rbac(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("kubesim-rbac")
    with KubesimProcess(no_cluster=True, rbac=True, workdir=workdir) as server:
        yield server


@pytest.fixture
def kubesim_factory(tmp_path):
    started: list[KubesimProcess] = []

    def start(**kwargs) -> KubesimProcess:
        kwargs.setdefault("workdir", tmp_path / f"kubesim-{len(started)}")
        server = KubesimProcess(**kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def kubesim_fresh(kubesim_factory):
    return kubesim_factory(no_cluster=True)


@pytest.fixture(scope="module")
def kubesim_module(request, tmp_path_factory):
    options = dict(getattr(request.module, "KUBESIM_OPTIONS", {}))
    options.setdefault("workdir", tmp_path_factory.mktemp("kubesim-module"))
    with KubesimProcess(**options) as server:
        yield server


@pytest.fixture
def kube_client(kubesim_api):
    api_client = kubesim_api.api_client()
    yield api_client
    api_client.close()
