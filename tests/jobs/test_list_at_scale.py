"""The job list at scale: ?cursor= keyset pages, counts estimated above a cap and shown as
"about N", and a query count that does not depend on what the page holds."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def _same_second(jobs, moment):
    """Give jobs one created_at (bulk submissions tie): the order must fall back to id."""
    from jobs.models import Job

    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(created_at=moment)


def test_cursor_walks_every_job_once_newest_first_even_with_ties(
    personas, api_client_for, make_job
):
    jobs = [make_job(name=f"c{i}") for i in range(7)]
    moment = timezone.now() - timedelta(hours=1)
    _same_second(jobs[1:5], moment)  # four jobs in the same microsecond
    client = api_client_for(personas.member)
    expected = client.get(URL + "?page_size=100").json()["results"]

    seen, url, pages = [], URL + "?cursor=&page_size=2", 0
    while url:
        body = client.get(url).json()
        assert set(body) == {"next", "previous", "results"}  # no count to pay for
        seen += [row["id"] for row in body["results"]]
        url, pages = body["next"], pages + 1
        if pages == 2:
            make_job(name="late")  # arrives mid-walk: newer than the cursor, so not repeated
    assert seen == [row["id"] for row in expected]
    assert pages == 4


def test_cursor_keeps_filters_and_refuses_bad_input(personas, api_client_for, make_job):
    for i in range(3):
        make_job(name=f"s{i}")
    gang = make_job(name="g", kind="gang", replicas=2)
    client = api_client_for(personas.member)
    body = client.get(URL + "?cursor=&kind=gang").json()
    assert [r["id"] for r in body["results"]] == [gang.pk]
    assert body["next"] is None

    first = client.get(URL + "?cursor=&page_size=1").json()
    assert "kind" not in first["next"]
    assert "cursor=" in first["next"]

    bad = client.get(URL + "?cursor=not-a-cursor")
    assert bad.status_code == 400
    assert "cursor" in bad.json()["errors"]
    both = client.get(URL + "?cursor=&page=2")
    assert both.status_code == 400
    assert "cursor" in both.json()["errors"]


def test_a_count_above_the_cap_is_an_estimate_and_the_last_page_makes_it_exact(
    personas, api_client_for, make_job, settings
):
    settings.PORTAL_EXACT_COUNT_CAP = 5
    for i in range(12):
        make_job(name=f"e{i}")
    client = api_client_for(personas.member)

    first = client.get(URL + "?page_size=5").json()
    assert first["count_is_estimate"] is True
    assert first["count"] > 5  # at least more than the cap it counted up to
    assert len(first["results"]) == 5
    assert first["next"]

    last = client.get(URL + "?page_size=5&page=3").json()
    assert [last["count"], last["count_is_estimate"], last["next"]] == [12, False, None]
    assert len(last["results"]) == 2
    by_name = client.get(URL + "?page_size=5&page=last").json()
    assert by_name["count"] == 12
    assert len(by_name["results"]) == 2

    past = client.get(URL + "?page_size=5&page=4")
    assert past.status_code == 400
    assert "page" in past.json()["errors"]

    settings.PORTAL_EXACT_COUNT_CAP = 10_000
    exact = client.get(URL + "?page_size=5").json()
    assert [exact["count"], exact["count_is_estimate"]] == [12, False]


def test_the_html_list_shows_an_estimate_as_about_n(
    personas, web_client_for, make_job, settings, monkeypatch
):
    from jobs.submission import views

    monkeypatch.setattr(views, "PAGE_SIZE", 5)
    settings.PORTAL_EXACT_COUNT_CAP = 5
    for i in range(12):
        make_job(name=f"h{i}")
    client = web_client_for(personas.member)

    page = client.get("/jobs/").content.decode()
    assert "Page 1 of about" in page
    assert "jobs</span>" in page
    assert "· about" in page

    last = client.get("/jobs/?page=3").content.decode()
    assert "Page 3 of 3 · 12 jobs" in last  # the last page knows the exact total

    settings.PORTAL_EXACT_COUNT_CAP = 10_000
    exact = client.get("/jobs/").content.decode()
    assert "Page 1 of 3 · 12 jobs" in exact
    assert "about" not in exact.split("Page 1 of")[1].split("</span>")[0]


def test_the_html_list_never_runs_an_unbounded_count(personas, web_client_for, make_job, settings):
    settings.PORTAL_EXACT_COUNT_CAP = 5
    for i in range(8):
        make_job(name=f"n{i}")
    with CaptureQueriesContext(connection) as captured:
        assert web_client_for(personas.member).get("/jobs/").status_code == 200
    counts = [q["sql"] for q in captured.captured_queries if "COUNT(" in q["sql"].upper()]
    assert counts, "the list counts (up to the cap)"
    assert all("LIMIT 6" in sql for sql in counts), counts


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_the_api_lists_query_count_is_the_same_for_one_job_or_many_projects(
    personas, api_client_for, make_job
):
    from tests.factories import MembershipFactory, ProjectFactory

    # The member writes in alpha and reads in three more projects: a page mixing projects
    # used to ask for the role once per project.
    others = [
        ProjectFactory(slug=f"more-{i}", department=personas.project_a.department) for i in range(3)
    ]
    for project in others:
        MembershipFactory(user=personas.member, project=project, role="viewer")
    client = api_client_for(personas.member)
    make_job(name="only")
    one = {url: _queries(client, url) for url in (URL, URL + "?cursor=", URL + "?kind=single")}

    for i in range(20):
        make_job(name=f"m{i}", project=others[i % 3], env={"TOKEN": "secret"})
    many = {url: _queries(client, url) for url in one}
    assert many == one

    # And the env values follow each project's role: hidden where the member only views.
    rows = client.get(URL + "?page_size=100").json()["results"]
    assert {r["project"]: r["env"] for r in rows if r["project"] != "alpha"} == {
        p.slug: {"TOKEN": None} for p in others
    }


def test_filters_keep_to_the_job_rows_and_answer_what_they_name(
    personas, api_client_for, make_job, web_client_for
):
    """Every filter narrows without DISTINCT (which sorts every match at a million jobs) and
    finds jobs by project slug and submitter username; unknown names find nothing."""
    make_job(name="mine-failed", state="failed", submitter=personas.member)
    make_job(name="other-running", state="running", submitter=personas.admin)
    make_job(name="in-beta", state="failed", project=personas.project_b)
    client = api_client_for(personas.member)

    def names(query: str) -> set[str]:
        with CaptureQueriesContext(connection) as captured:
            body = client.get(f"{URL}?{query}").json()
        assert not [q for q in captured.captured_queries if "DISTINCT" in q["sql"]], query
        return {row["name"] for row in body["results"]}

    assert names("state=failed") == {"mine-failed"}  # beta is another tenant's
    assert names("state=failed&state=running") == {"mine-failed", "other-running"}
    assert names(f"submitter={personas.member.username}") == {"mine-failed"}
    assert names("project=alpha&state=running") == {"other-running"}
    assert names("project=beta") == set()
    assert names("submitter=nobody-by-this-name") == set()
    page = web_client_for(personas.member).get("/jobs/?state=failed").content.decode()
    assert "mine-failed" in page
    assert "other-running" not in page
