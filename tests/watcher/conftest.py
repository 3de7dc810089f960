from tests.jobs.conftest import make_job  # noqa: F401 - the job factory fixture
