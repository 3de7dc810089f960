"""The volumes suites use the reconcile suites' kubesim (`cluster`, per module) and `org`."""

from tests.jobs.conftest import cluster, make_job, org  # noqa: F401  (fixtures, used by name)
