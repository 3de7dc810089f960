"""record(): what one audit row holds, where its source and request id come from, and that it
shares the fate of the write it records without ever breaking it."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.context import audit_context, source_for_request
from audit.models import AuditEvent
from audit.services import REDACTED, clean_changes, diff, record


@pytest.mark.parametrize(
    ("path", "agent", "source"),
    [
        ("/jobs/new/", "Mozilla/5.0", "web"),
        ("/api/v1/jobs/", "python-requests/2.32", "api"),
        ("/api/v1/jobs/", "gpuportal-cli/0.4.0", "cli"),
        ("/jobs/new/", "gpuportal-cli/0.4.0", "web"),
        ("/admin/quotas/projectquota/1/change/", "Mozilla/5.0", "admin"),
        ("/accounts/sso/callback/", "Mozilla/5.0", "sso"),
    ],
)
def test_source_of_a_request(path, agent, source):
    assert source_for_request(path, agent) == source


def test_outside_a_request_the_row_says_system(personas):
    event = record("quota.change", target=personas.project_a, changes={"nominal": [8, 4]})
    assert event.source == "system"
    assert event.actor is None
    assert event.actor_username == ""
    assert event.request_id == ""
    assert event.ip is None
    assert event.project == personas.project_a
    assert event.project_slug == "alpha"
    assert event.target_type == "tenants.project"
    assert event.target_id == str(personas.project_a.pk)
    assert event.changes == {"nominal": [8, 4]}


def test_context_gives_source_request_id_and_address(personas):
    with audit_context(source="cli", request_id="req-1", ip="10.0.0.7"):
        event = record("job.cancel", actor=personas.member, target=("jobs.job", 812, "train"))
    event.refresh_from_db()
    assert (event.source, event.request_id, event.ip) == ("cli", "req-1", "10.0.0.7")
    assert (event.actor, event.actor_username) == (personas.member, "bob")
    assert (event.target_type, event.target_id, event.target_repr) == ("jobs.job", "812", "train")


def test_explicit_source_wins_over_the_context(personas):
    with audit_context(source="web"):
        assert record("membership.add", source="sso").source == "sso"


def _write_that_fails(actor) -> None:
    with transaction.atomic():
        record("job.submit", actor=actor)
        raise RuntimeError("the write failed")


def test_a_rolled_back_write_leaves_no_row(personas):
    with pytest.raises(RuntimeError):
        _write_that_fails(personas.member)
    assert not AuditEvent.objects.filter(action="job.submit").exists()


def test_a_failing_record_does_not_break_the_write(personas):
    with transaction.atomic():
        personas.project_a.name = "Alpha 2"
        personas.project_a.save()
        # An IP that PostgreSQL refuses: the insert fails inside its savepoint only.
        with audit_context(ip="not-an-ip"):
            assert record("project.change", target=personas.project_a) is None
        personas.project_a.refresh_from_db()  # the transaction is still usable
    assert personas.project_a.name == "Alpha 2"
    assert not AuditEvent.objects.filter(action="project.change").exists()


def test_secret_values_are_never_stored(personas):
    changes = {
        "keys": [["a"], ["a", "b"]],
        "values": {"a": "hunter2"},
        "password": ["x", "y"],
        "token": "abc",
        "client_secret": "s3cr3t",
        "metadata": "kept",
    }
    event = record("credential.replace", changes=changes)
    assert event.changes == {
        "keys": [["a"], ["a", "b"]],
        "values": REDACTED,
        "password": REDACTED,
        "token": REDACTED,
        "client_secret": REDACTED,
        "metadata": "kept",
    }
    assert "hunter2" not in str(AuditEvent.objects.values_list("changes", flat=True)[0])


def test_changes_are_made_json(personas):
    assert clean_changes({"pool": [personas.pool, None], "when": {1, 2}}) == {
        "pool": ["h100", None],
        "when": [1, 2],
    }
    assert diff({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == {"b": [2, 3], "c": [None, 4]}


def test_rows_are_never_changed_or_deleted_one_by_one(personas):
    event = record("auth.login", actor=personas.member)
    event.detail = "edited"
    with pytest.raises(ValueError, match="never changed"):
        event.save()
    with pytest.raises(ValueError, match="retention"):
        event.delete()
    assert AuditEvent.objects.get(pk=event.pk).detail == ""


def test_actor_defaults_to_the_requests_user_and_survives_deletion(personas):
    class FakeRequest:
        user = personas.member

    with audit_context(request=FakeRequest()):
        event = record("job.submit")
    assert event.actor == personas.member
    personas.member.delete()
    event = AuditEvent.objects.get(pk=event.pk)
    assert event.actor is None
    assert event.actor_username == "bob"
