"""The governance tests share the job suites' kubesim (`cluster`, one per module) and synced
organisation (`org`)."""

from tests.jobs.conftest import cluster, make_job, org  # noqa: F401
