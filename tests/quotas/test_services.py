"""Quota services: updates, deletes, and that concurrent writes cannot break a department cap."""

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from quotas import services
from quotas.models import DepartmentQuota, ProjectQuota


def test_pool_update_changes_only_known_fields(org):
    services.pool_update(actor=None, pool=org.a100, node_count=3, name="A100 bigger")
    org.a100.refresh_from_db()
    assert (org.a100.node_count, org.a100.name, org.a100.total_gpus) == (3, "A100 bigger", 24)
    with pytest.raises(TypeError, match="cannot change slug"):
        services.pool_update(actor=None, pool=org.a100, slug="renamed")


def test_department_quota_set_updates_and_delete_removes(org):
    services.department_quota_set(actor=None, department=org.research, pool=org.h100, limit=10)
    services.department_quota_set(actor=None, department=org.research, pool=org.h100, limit=12)
    assert list(DepartmentQuota.objects.values_list("limit", flat=True)) == [12]
    assert services.department_quota_delete(actor=None, department=org.research, pool=org.h100)
    assert not services.department_quota_delete(actor=None, department=org.research, pool=org.h100)


def _a_session_waits_for_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_concurrent_quota_writes_cannot_together_exceed_a_department_cap(org):
    """Each write fits alone (8 ≤ 12) but not both; the cap row lock serialises them."""
    services.department_quota_set(actor=None, department=org.research, pool=org.h100, limit=12)
    first_written = threading.Event()
    release_first = threading.Event()
    outcome: dict[str, object] = {}

    def first() -> None:
        try:
            with transaction.atomic():
                services.quota_set(actor=None, project=org.vision, pool=org.h100, nominal=8)
                first_written.set()
                release_first.wait(120)  # held until the test has seen the second wait
        finally:
            connection.close()

    def second() -> None:
        try:
            services.quota_set(actor=None, project=org.nlp, pool=org.h100, nominal=8)
            outcome["second"] = "saved"
        except ValidationError as exc:
            outcome["second"] = exc.message_dict["nominal"][0]
        finally:
            connection.close()

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_written.wait(10)
    t2 = threading.Thread(target=second)
    t2.start()
    # The second write is now waiting for the cap's row lock (PostgreSQL says so), not done.
    deadline = time.monotonic() + 60
    while not _a_session_waits_for_a_lock():
        assert time.monotonic() < deadline, "the second write never waited for the lock"
        time.sleep(0.05)
    assert "second" not in outcome
    release_first.set()
    t1.join(10)
    t2.join(10)
    assert outcome["second"] == (
        "Department research caps GPUs in pool h100 at 12 and its other projects hold 8: "
        "this quota needs 8, at most 4 is allowed."
    )
    assert list(ProjectQuota.objects.values_list("project__slug", "nominal")) == [("vision", 8)]
