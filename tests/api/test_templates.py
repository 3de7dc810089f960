"""Saved job templates through the API: validated like a submission, scoped to their project
(another tenant's template is a 404, never listed), and usable when submitting a job."""

import pytest

pytestmark = [pytest.mark.django_db]


def make_template(project, name="nightly", **fields):
    from jobs.models import JobTemplate

    base = {"kind": "single", "image": "busybox", "gpus": 2, "env": {"SEED": "1"}}
    return JobTemplate.objects.create(project=project, name=name, fields={**base, **fields})


def test_create_validates_the_fields_like_a_submission(personas, api_client_for):
    client = api_client_for(personas.member)
    body = {"project": "alpha", "name": "big", "fields": {"kind": "single", "image": "busybox"}}
    bad = client.post(
        "/api/v1/templates/",
        {**body, "fields": {"kind": "single", "image": "busybox", "gpus": 9, "podSpec": {}}},
        format="json",
    )
    assert bad.status_code == 400
    errors = bad.json()["errors"]
    assert errors["fields.gpus"] == ["GPUs per pod must be 1 to 8 whole GPUs."]
    assert "A template cannot keep 'podSpec'" in errors["fields.podSpec"][0]
    wrong_types = client.post(
        "/api/v1/templates/",
        {**body, "fields": {"kind": "single", "image": 5, "gpus": "2", "command": "python"}},
        format="json",
    )
    assert wrong_types.status_code == 400
    assert wrong_types.json()["errors"] == {
        "fields.image": ["Must be a string."],
        "fields.gpus": ["Must be a whole number."],
        "fields.command": ["Must be a list of strings."],
    }
    assert client.post("/api/v1/templates/", body, format="json").status_code == 201
    again = client.post("/api/v1/templates/", body, format="json")
    assert again.status_code == 400
    assert again.json()["errors"]["name"] == ["Project alpha already has a template named 'big'."]


def test_another_tenants_template_is_not_found_and_not_listed(personas, api_client_for):
    template = make_template(personas.project_a)
    outsider = api_client_for(personas.outsider)
    assert outsider.get(f"/api/v1/templates/{template.pk}/").status_code == 404
    assert outsider.delete(f"/api/v1/templates/{template.pk}/").status_code == 404
    assert outsider.get("/api/v1/templates/?project=alpha").json()["results"] == []
    viewer = api_client_for(personas.viewer)
    listed = viewer.get("/api/v1/templates/?project=alpha").json()["results"]
    assert [t["name"] for t in listed] == ["nightly"]
    assert viewer.patch(f"/api/v1/templates/{template.pk}/", {"name": "x"}).status_code == 403


def test_submit_with_a_template_explicit_fields_win(personas, api_client_for):
    make_template(personas.project_a)
    client = api_client_for(personas.member)
    response = client.post(
        "/api/v1/jobs/",
        {"project": "alpha", "template": "nightly", "gpus": 4, "name": "from-tpl"},
        format="json",
    )
    assert response.status_code == 201, response.content
    job = response.json()
    assert (job["kind"], job["image"], job["gpus"]) == ("single", "busybox", 4)
    assert job["env"] == {"SEED": "1"}


def test_submit_with_another_tenants_template_is_refused(personas, api_client_for):
    make_template(personas.project_b, name="theirs")
    client = api_client_for(personas.member)
    response = client.post(
        "/api/v1/jobs/", {"project": "beta", "template": "theirs"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"]["template"] == [
        "No template 'theirs' in project 'beta' that you can see."
    ]
    from jobs.models import Job

    assert not Job.objects.exists()
