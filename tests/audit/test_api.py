"""GET /api/v1/audit/: who reads which rows, the filters, CSV."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from audit.context import audit_context
from audit.models import AuditEvent
from audit.services import record


@pytest.fixture
def api_client_for(db):
    """Clients authenticated without a login (a login would add auth.login rows)."""
    from rest_framework.test import APIClient

    def make(user) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return make


@pytest.fixture
def trail(personas):
    """Rows in alpha, in beta and without a project, from different sources and times."""
    with audit_context(source="web", request_id="r-web"):
        record(
            "job.submit",
            actor=personas.member,
            target=("jobs.job", 1, "train-1"),
            project=personas.project_a,
        )
    with audit_context(source="cli", request_id="r-cli"):
        record(
            "job.cancel",
            actor=personas.member,
            target=("jobs.job", 1, "train-1"),
            project=personas.project_a,
            changes={"state": ["running", "cancelled"]},
        )
    record(
        "quota.change",
        actor=personas.staff,
        target=personas.project_b,
        changes={"nominal": [2, 4]},
        source="admin",
    )
    record("auth.login", actor=personas.member, source="web")
    old = record(
        "membership.add",
        actor=personas.admin,
        project=personas.project_a,
        target=("tenants.membership", 9, "victor in alpha"),
        source="api",
    )
    AuditEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))


def _actions(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["action"] for row in response.json()["results"]]


def test_staff_read_every_row_newest_first(trail, personas, api_client_for):
    actions = _actions(api_client_for(personas.staff).get("/api/v1/audit/?page_size=500"))
    assert actions[:3] == ["auth.login", "quota.change", "job.cancel"]
    assert {"job.submit", "membership.add"} <= set(actions)


def test_a_project_admin_reads_only_projects_they_administer(trail, personas, api_client_for):
    actions = _actions(api_client_for(personas.admin).get("/api/v1/audit/"))
    assert actions == ["job.cancel", "job.submit", "membership.add"]
    assert _actions(api_client_for(personas.outsider).get("/api/v1/audit/")) == ["quota.change"]


@pytest.mark.parametrize("persona", ["viewer", "member"])
def test_members_and_viewers_read_nothing(trail, personas, api_client_for, persona):
    assert _actions(api_client_for(personas.by_name(persona)).get("/api/v1/audit/")) == []


@pytest.mark.parametrize(
    ("persona", "project"),
    [
        ("viewer", "beta"),
        ("member", "beta"),
        ("viewer", "alpha"),
        ("outsider", "alpha"),
        ("admin", "no-such-project"),
    ],
)
def test_another_projects_trail_is_a_404(trail, personas, api_client_for, persona, project):
    client = api_client_for(personas.by_name(persona))
    response = client.get(f"/api/v1/audit/?project={project}")
    assert response.status_code == 404
    assert project in response.json()["detail"]
    as_csv = client.get(f"/api/v1/audit/?project={project}&format=csv")
    assert as_csv.status_code == 404
    assert project in as_csv.json()["detail"]


def test_another_projects_row_is_a_404(trail, personas, api_client_for):
    row = AuditEvent.objects.get(action="quota.change")
    assert api_client_for(personas.admin).get(f"/api/v1/audit/{row.pk}/").status_code == 404
    response = api_client_for(personas.outsider).get(f"/api/v1/audit/{row.pk}/")
    assert response.json()["changes"] == {"nominal": [2, 4]}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("action=job.cancel", ["job.cancel"]),
        ("action=job.*", ["job.cancel", "job.submit"]),
        ("action=job.submit,membership.add", ["job.submit", "membership.add"]),
        ("actor=bob", ["auth.login", "job.cancel", "job.submit"]),
        ("project=alpha", ["job.cancel", "job.submit", "membership.add"]),
        ("source=cli", ["job.cancel"]),
        ("source=web&source=admin", ["auth.login", "quota.change", "job.submit"]),
        ("target=jobs.job:1", ["job.cancel", "job.submit"]),
        ("target=job:1", ["job.cancel", "job.submit"]),
        ("target=tenants.membership", ["membership.add"]),
    ],
)
def test_filters(trail, personas, api_client_for, query, expected):
    response = api_client_for(personas.staff).get(f"/api/v1/audit/?{query}")
    assert _actions(response) == expected


def test_time_window(trail, personas, api_client_for):
    client = api_client_for(personas.staff)
    cut = (timezone.now() - timedelta(days=1)).isoformat()
    older = _actions(client.get("/api/v1/audit/", {"until": cut}))
    assert older == ["membership.add"]
    assert "membership.add" not in _actions(client.get("/api/v1/audit/", {"since": cut}))
    today = timezone.now().date().isoformat()
    assert "membership.add" not in _actions(client.get("/api/v1/audit/", {"since": today}))
    assert _actions(client.get("/api/v1/audit/", {"until": "2000-01-01"})) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("since=yesterday", "since"),
        ("until=2026-13-45", "until"),
        ("source=email", "source"),
    ],
)
def test_bad_filters_are_a_400_naming_the_field(personas, api_client_for, query, field):
    response = api_client_for(personas.staff).get(f"/api/v1/audit/?{query}")
    assert response.status_code == 400
    assert field in response.json()["errors"]


def _csv_rows(response) -> list[dict]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


def test_csv_by_format_parameter_and_by_accept_header(trail, personas, api_client_for):
    client = api_client_for(personas.admin)
    rows = _csv_rows(client.get("/api/v1/audit/?format=csv&action=job.cancel"))
    assert len(rows) == 1
    assert rows[0]["actor"] == "bob"
    assert rows[0]["source"] == "cli"
    assert rows[0]["request_id"] == "r-cli"
    assert rows[0]["project"] == "alpha"
    assert rows[0]["changes"] == '{"state": ["running", "cancelled"]}'
    by_header = _csv_rows(client.get("/api/v1/audit/", HTTP_ACCEPT="text/csv"))
    assert [r["action"] for r in by_header] == ["job.cancel", "job.submit", "membership.add"]


def test_csv_quotes_formulas(personas, api_client_for):
    record("project.change", target=("tenants.project", 1, '=HYPERLINK("x")'), source="api")
    client = api_client_for(personas.staff)
    rows = _csv_rows(client.get("/api/v1/audit/?format=csv&action=project.change"))
    assert rows[0]["target_repr"].startswith("'=")


def test_writes_are_not_allowed(trail, personas, api_client_for):
    client = api_client_for(personas.staff)
    row = AuditEvent.objects.first()
    assert client.post("/api/v1/audit/", {}, format="json").status_code == 405
    assert client.delete(f"/api/v1/audit/{row.pk}/").status_code == 405
    assert client.patch(f"/api/v1/audit/{row.pk}/", {}, format="json").status_code == 405
