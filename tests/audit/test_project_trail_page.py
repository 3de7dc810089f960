"""The project page shows its audit trail to the project's admins and staff, paged; members and
viewers do not see it, and another project's rows never appear."""

from __future__ import annotations

import pytest

from audit.services import record


@pytest.fixture
def rows(personas):
    for n in range(30):
        record(
            "job.cancel",
            actor=personas.member,
            target=("jobs.job", n, f"alpha-job-{n}"),
            project=personas.project_a,
            changes={"state": ["running", "cancelled"]},
            source="web",
        )
    record(
        "job.cancel",
        actor=personas.outsider,
        target=("jobs.job", 99, "beta-secret-job"),
        project=personas.project_b,
        source="api",
    )


def test_an_admin_reads_the_trail_newest_first_in_pages(rows, personas, web_client_for):
    client = web_client_for(personas.admin)
    first = client.get("/projects/alpha/").content.decode()
    assert 'id="audit-trail"' in first
    assert "alpha-job-29" in first
    assert "alpha-job-5" in first
    assert "alpha-job-4" not in first
    assert "running → cancelled" in first
    assert "beta-secret-job" not in first
    second = client.get("/projects/alpha/?trail_page=2").content.decode()
    assert "alpha-job-4" in second
    assert "alpha-job-29" not in second
    # A page number that is not one shows the first page, not an error.
    assert client.get("/projects/alpha/?trail_page=x").status_code == 200


@pytest.mark.parametrize("persona", ["member", "viewer"])
def test_members_and_viewers_do_not_see_it(rows, personas, web_client_for, persona):
    page = web_client_for(getattr(personas, persona)).get("/projects/alpha/")
    assert page.status_code == 200
    assert 'id="audit-trail"' not in page.content.decode()


def test_staff_see_it(rows, personas, web_client_for):
    page = web_client_for(personas.staff).get("/projects/beta/").content.decode()
    assert "beta-secret-job" in page
    assert "alpha-job" not in page
