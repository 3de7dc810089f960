"""Workspace tests reuse the job suites' kubesim (`cluster`) and organisation (`org`)."""

from tests.jobs.conftest import cluster, org  # noqa: F401 - fixtures, used by name

JUPYTER = "jupyterlab"
