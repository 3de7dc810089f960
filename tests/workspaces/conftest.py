"""Workspace tests reuse the job suites' kubesim (`cluster`) and organisation (`org`)."""

import pytest

from tests.factories import ensure_workspace_kinds
from tests.jobs.conftest import cluster, org  # noqa: F401 - fixtures, used by name

JUPYTER = "jupyterlab"


@pytest.fixture(autouse=True)
def workspace_kinds(request):
    """The seeded kinds (a transactional test on the same worker may have flushed them)."""
    names = request.fixturenames
    if "transactional_db" in names or "db" in names:
        request.getfixturevalue("transactional_db" if "transactional_db" in names else "db")
        ensure_workspace_kinds()
