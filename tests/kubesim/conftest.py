"""kubesim fixtures for the kubesim test packages (see kubesim/pytest_plugin.py)."""

from kubesim.pytest_plugin import (  # noqa: F401 - fixtures
    kube_client,
    kubesim,
    kubesim_api,
    kubesim_factory,
    kubesim_fresh,
)
