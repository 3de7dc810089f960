"""Logins, failed logins and logouts are recorded; the admin shows the trail read-only and its
own actions become admin.* rows; the retention task is the only deletion path."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from audit.services import record
from audit.tasks import purge_expired_events


def test_login_failed_login_and_logout_are_recorded(personas):
    client = Client(REMOTE_ADDR="192.0.2.10")
    client.post("/accounts/login/", {"username": "bob", "password": "wrong"})
    failed = AuditEvent.objects.get(action="auth.login_failed")
    assert failed.actor is None
    assert (failed.target_type, failed.target_repr) == ("auth.user", "bob")
    assert failed.source == "web"
    assert failed.ip == "192.0.2.10"
    assert failed.request_id
    assert "wrong" not in str(failed.changes) + failed.detail

    personas.member.set_password("right-password-1")
    personas.member.save()
    client.post("/accounts/login/", {"username": "bob", "password": "right-password-1"})
    login = AuditEvent.objects.get(action="auth.login")
    assert (login.actor, login.source) == (personas.member, "web")
    client.post("/accounts/logout/")
    assert AuditEvent.objects.get(action="auth.logout").actor == personas.member


def test_admin_lists_with_filters_and_is_read_only(personas):
    event = record("quota.change", actor=personas.staff, target=personas.project_a)
    client = Client()
    client.force_login(personas.staff)  # staff without model permissions still read it
    listing = client.get("/admin/audit/auditevent/?action=quota.change&source__exact=system")
    assert listing.status_code == 200
    assert b"quota.change" in listing.content
    for filter_name in (b"By action", b"By source", b"By project", b"By actor", b"By created"):
        assert filter_name in listing.content
    page = client.get(f"/admin/audit/auditevent/{event.pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert client.get("/admin/audit/auditevent/add/").status_code == 403
    assert (
        client.post(f"/admin/audit/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_superuser_cannot_delete_either(personas):
    event = record("job.cancel")
    boss = type(personas.staff).objects.create_superuser("root", "root@example.org", "pw-123456")
    client = Client()
    client.force_login(boss)
    assert client.get(f"/admin/audit/auditevent/{event.pk}/delete/").status_code == 403
    listing = client.get("/admin/audit/auditevent/")
    assert b"delete_selected" not in listing.content


def test_admin_actions_become_admin_rows(personas):
    boss = type(personas.staff).objects.create_superuser("root", "root@example.org", "pw-123456")
    client = Client()
    client.force_login(boss)
    url = f"/admin/tenants/department/{personas.project_a.department.pk}/change/"
    form = {"slug": "research", "name": "Research Lab", "description": ""}
    # The inlines' management forms, as the page renders them (no inline rows changed).
    page = client.get(url).content.decode()
    for name, value in re.findall(
        r'name="([^"]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"'
        r'[^>]*value="(\d*)"',
        page,
    ):
        form[name] = value
    response = client.post(url, form)
    assert response.status_code == 302, response.content[:2000]
    row = AuditEvent.objects.get(action="admin.change")
    assert row.actor == boss
    assert row.source == "admin"
    assert row.target_type == "tenants.department"
    assert "Name" in row.detail


@pytest.mark.parametrize(("days", "left"), [(400, {"new", "399"}), (0, {"new", "399", "401"})])
def test_retention_task_deletes_only_older_rows(personas, settings, days, left):
    settings.PORTAL_AUDIT_RETENTION_DAYS = days
    for label, age in (("new", 0), ("399", 399), ("401", 401)):
        row = record("job.submit", detail=label)
        AuditEvent.objects.filter(pk=row.pk).update(created_at=timezone.now() - timedelta(days=age))
    purge_expired_events()
    assert set(AuditEvent.objects.values_list("detail", flat=True)) == left


def test_retention_runs_daily_on_beat(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["audit-retention"]
    assert entry["task"] == purge_expired_events.name
