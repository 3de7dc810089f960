"""Bad input answers a 400 (or 404/413) in the API's JSON error shape, never a 500 or HTML.

Each case here answered a 500, an HTML page or a 201 before (issue 8, "Bad input").
"""

import json

import pytest

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"


def _post_raw(client, url: str, body: str | bytes):
    return client.generic("POST", url, body, content_type="application/json")


def _assert_error_shape(response, status: int) -> dict:
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"detail", "errors"}
    assert isinstance(body["detail"], str)
    assert body["detail"]
    return body


JOB = {"project": "alpha", "kind": "single", "image": "busybox"}


@pytest.mark.parametrize(
    ("field", "body"),
    [
        ("kind", {**JOB, "kind": "\ud800"}),
        ("priority", {**JOB, "priority": "\ud800"}),
        ("backend", {**JOB, "kind": "gang", "backend": "x\udfff"}),
        ("image", {**JOB, "image": "busy\ud800box"}),
        ("env.A", {**JOB, "env": {"A": "\ud800"}}),
        ("env.\\ud800", {**JOB, "env": {"\ud800": "1"}}),
        ("\\ud800x", {**JOB, "\ud800x": 1}),
        ("command.1", {**JOB, "command": ["a", "\ud800"]}),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(personas, api_client_for, field, body):
    # json.dumps writes the surrogate as the escape "\ud800", exactly what a client sends.
    response = _post_raw(api_client_for(personas.viewer), JOBS, json.dumps(body))
    errors = _assert_error_shape(response, 400)["errors"]
    assert list(errors) == [field]
    assert "surrogate" in errors[field][0]


def test_a_lone_surrogate_in_a_membership_role_is_a_400(personas, api_client_for):
    body = json.dumps({"project": "alpha", "user": "oscar", "role": "\ud800"})
    response = _post_raw(api_client_for(personas.admin), "/api/v1/memberships/", body)
    assert _assert_error_shape(response, 400)["errors"].keys() == {"role"}


@pytest.mark.parametrize("field", ["user", "project"])
def test_a_nul_byte_in_a_membership_is_a_400_naming_the_field(personas, api_client_for, field):
    body = {"project": "alpha", "user": "oscar", "role": "viewer"}
    body[field] = "a\u0000b"
    response = _post_raw(api_client_for(personas.admin), "/api/v1/memberships/", json.dumps(body))
    errors = _assert_error_shape(response, 400)["errors"]
    assert list(errors) == [field]
    assert "NUL" in errors[field][0]


def test_a_nul_byte_in_a_form_body_is_a_400(personas, api_client_for):
    client = api_client_for(personas.admin)
    response = client.post(
        "/api/v1/memberships/", {"project": "alpha", "user": "a\x00b", "role": "viewer"}
    )
    assert list(_assert_error_shape(response, 400)["errors"]) == ["user"]


def test_json_nested_past_the_parser_is_a_400(personas, api_client_for):
    body = "[" * 100_000 + "]" * 100_000  # 200 KB; the stdlib parser recurses per level
    response = _post_raw(api_client_for(personas.member), JOBS, body)
    assert "nested too deeply" in _assert_error_shape(response, 400)["detail"]


def test_json_nested_1000_levels_is_a_400(personas, api_client_for):
    body = '{"project": "alpha", "env": ' + "[" * 1000 + "]" * 1000 + "}"  # ~2 KB
    response = _post_raw(api_client_for(personas.member), JOBS, body)
    assert _assert_error_shape(response, 400)["detail"].startswith(("env", "JSON parse error"))


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("cpu", "100000", "This job needs 100000 CPU, but project alpha has available at most 64"),
        ("cpu", "1E", "needs 1000000000000000000 CPU"),
        ("cpu", "0.0000001", "finer than 1m"),
        ("cpu", "1.0005", "finer than 1m"),
        ("memory", "8Ei", "This job needs 8Ei, but project alpha has available at most 512Gi"),
        ("memory", "1", "below 16Mi"),
        ("memory", "1m", "not a whole number of bytes"),
        ("memory", "999999999999999E", "needs"),
    ],
)
def test_cpu_and_memory_are_bounded_by_what_a_cluster_queue_covers(
    personas, api_client_for, field, value, fragment
):
    body = {"project": "alpha", "kind": "single", "image": "busybox", "gpus": 1, field: value}
    response = api_client_for(personas.member).post(JOBS, body, format="json")
    errors = _assert_error_shape(response, 400)["errors"]
    assert list(errors) == [field]
    assert fragment in errors[field][0], errors


def test_a_gang_is_bounded_by_the_pools_share_as_a_whole(personas, api_client_for):
    # The h100 pool: 4 nodes × 8 GPUs × 8 CPU per GPU = 64 CPU per pod, 256 for a job.
    body = {"project": "alpha", "kind": "gang", "image": "busybox", "gpus": 1, "replicas": 8}
    client = api_client_for(personas.member)
    fits = client.post(JOBS, {**body, "cpu": "32", "name": "fits"}, format="json")
    assert fits.status_code == 201, fits.json()
    too_much = client.post(JOBS, {**body, "cpu": "40"}, format="json")
    message = _assert_error_shape(too_much, 400)["errors"]["cpu"][0]
    assert "needs 320 CPU (8 pods × 40)" in message
    assert "256 for the whole job in pool h100" in message


def test_cpu_and_memory_within_the_share_are_accepted(personas, api_client_for):
    body = {"project": "alpha", "kind": "single", "image": "busybox", "gpus": 1}
    response = api_client_for(personas.member).post(
        JOBS, {**body, "cpu": "500m", "memory": "512Gi"}, format="json"
    )
    assert response.status_code == 201, response.json()


def test_a_body_over_the_upload_limit_is_a_json_413(personas, api_client_for, settings):
    body = json.dumps({"project": "alpha", "kind": "single", "image": "a" * (5 * 2**20)})
    response = _post_raw(api_client_for(personas.member), JOBS, body)
    assert "larger than" in _assert_error_shape(response, 413)["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/jobs/1.5/",
        "/api/v1/jobs/1/nothing-here/",
        "/api/v1/no-such-collection/",
        "/api/v1/projects/alpha/extra/segments/",
    ],
)
def test_an_unrouted_api_url_is_a_json_404(personas, api_client_for, url):
    _assert_error_shape(api_client_for(personas.member).get(url), 404)


def test_html_pages_keep_their_html_404(personas, web_client_for):
    response = web_client_for(personas.member).get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"page": 0}, "page"),
        ({"page": -1}, "page"),
        ({"page": "x"}, "page"),
        ({"page": 7}, "page"),
        ({"page_size": "null"}, "page_size"),
        ({"page_size": 0}, "page_size"),
        ({"page_size": "1" * 5000}, "page_size"),
    ],
)
def test_bad_pagination_is_a_400_naming_the_parameter(personas, api_client_for, query, field):
    response = api_client_for(personas.member).get(JOBS, query)
    assert list(_assert_error_shape(response, 400)["errors"]) == [field]


def test_page_last_and_a_large_page_size_still_work(personas, api_client_for):
    client = api_client_for(personas.member)
    assert client.get(JOBS, {"page": "last"}).status_code == 200
    assert client.get(JOBS, {"page_size": 100000}).status_code == 200  # capped at 500


def test_manifest_as_json_is_a_list_and_yaml_by_default(personas, api_client_for):
    client = api_client_for(personas.member)
    created = client.post(
        JOBS, {"project": "alpha", "kind": "single", "image": "busybox"}, format="json"
    ).json()
    as_json = client.get(f"{JOBS}{created['id']}/manifest/", {"format": "json"})
    assert as_json["Content-Type"].startswith("application/json")
    assert isinstance(as_json.json(), list)
    as_yaml = client.get(f"{JOBS}{created['id']}/manifest/")
    assert as_yaml["Content-Type"].startswith("application/yaml")


def test_schema_documents_cancel_404_409_and_both_manifest_formats(api_client):
    import yaml

    schema = yaml.safe_load(api_client.get("/api/schema/").content)
    cancel = schema["paths"]["/api/v1/jobs/{id}/cancel/"]["post"]["responses"]
    assert {"200", "404", "409"} <= set(cancel)
    manifest = schema["paths"]["/api/v1/jobs/{id}/manifest/"]["get"]
    assert set(manifest["responses"]["200"]["content"]) == {"application/yaml", "application/json"}
    listing = schema["paths"]["/api/v1/jobs/"]["get"]["responses"]
    assert "400" in listing


@pytest.mark.parametrize("query", [{}, {"format": "yaml"}, {"format": "nonsense"}])
def test_manifest_errors_are_json_whatever_the_format(personas, api_client_for, query):
    response = api_client_for(personas.member).get(f"{JOBS}999999/manifest/", query)
    _assert_error_shape(response, 404)
