"""Env values may be credentials: viewers see the names only, members and admins the values.

Covers the API (list, detail, manifest as YAML and JSON), the job page, and the messages the
cluster sends back (which can quote a value) before they become a state message or an event.
"""

import pytest
import yaml

JOBS = "/api/v1/jobs/"
SECRET = "s3cret-token-value"


@pytest.fixture
def job_with_env(db, personas, api_client_for):
    body = {
        "project": "alpha",
        "kind": "single",
        "image": "busybox",
        "env": {"API_TOKEN": SECRET, "EPOCHS": "3"},
    }
    response = api_client_for(personas.member).post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["env"] == {"API_TOKEN": SECRET, "EPOCHS": "3"}  # the submitter
    return response.json()["id"]


def test_viewer_sees_env_names_without_values_in_the_api(personas, api_client_for, job_with_env):
    viewer = api_client_for(personas.viewer)
    detail = viewer.get(f"{JOBS}{job_with_env}/")
    assert detail.status_code == 200
    assert detail.json()["env"] == {"API_TOKEN": None, "EPOCHS": None}
    (listed,) = viewer.get(JOBS).json()["results"]
    assert listed["env"] == {"API_TOKEN": None, "EPOCHS": None}
    for query in ({}, {"format": "json"}):
        manifest = viewer.get(f"{JOBS}{job_with_env}/manifest/", query)
        assert manifest.status_code == 200
        assert SECRET.encode() not in manifest.content
        assert b"API_TOKEN" in manifest.content
        assert b"(hidden)" in manifest.content


@pytest.mark.parametrize("who", ["member", "admin", "staff"])
def test_members_admins_and_staff_see_the_values(personas, api_client_for, job_with_env, who):
    client = api_client_for(personas.by_name(who))
    assert client.get(f"{JOBS}{job_with_env}/").json()["env"]["API_TOKEN"] == SECRET
    docs = list(yaml.safe_load_all(client.get(f"{JOBS}{job_with_env}/manifest/").content))
    env = docs[-1]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "API_TOKEN", "value": SECRET} in env


def test_job_page_hides_values_from_a_viewer(personas, web_client_for, job_with_env):
    page = web_client_for(personas.viewer).get(f"/jobs/{job_with_env}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert SECRET not in html
    assert "API_TOKEN" in html
    assert "shown to members of the project only" in html


def test_job_page_shows_values_to_a_member(personas, web_client_for, job_with_env):
    html = web_client_for(personas.member).get(f"/jobs/{job_with_env}/").content.decode()
    assert f"API_TOKEN={SECRET}" in html


def test_a_rejection_quoting_an_env_value_is_scrubbed():
    from jobs.redact import HIDDEN, redact_text

    env = {"API_TOKEN": SECRET, "SHORT": "ab"}
    message = (
        f'Job.batch "gp-job-1" is invalid: spec.template.spec.containers[0].env[0].value: '
        f'Invalid value: "{SECRET}"; env[1].value: Invalid value: "ab"'
    )
    scrubbed = redact_text(message, env)
    assert SECRET not in scrubbed
    assert '"ab"' not in scrubbed
    assert scrubbed.count(HIDDEN) == 2
    assert "spec.template" in scrubbed  # the rest of the message survives
