import pytest
from django.db import connection


@pytest.mark.django_db
def test_suite_runs_on_postgresql():
    assert connection.vendor == "postgresql"
