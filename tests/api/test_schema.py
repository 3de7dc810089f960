"""The OpenAPI 3 schema validates without warnings and the docs page is served."""

from django.core.management import call_command


def test_schema_validates_without_warnings(tmp_path):
    # --fail-on-warn turns every generator warning into an error (SystemExit).
    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml")
    )
    schema = (tmp_path / "schema.yaml").read_text()
    for path in ("/api/v1/projects/{slug}/", "/api/v1/memberships/{id}/", "/api/v1/pools/"):
        assert f"{path}:" in schema


def test_schema_and_docs_are_served(client, db):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/memberships/" in paths
    assert set(paths["/api/v1/memberships/"]) == {"get", "post"}
    docs = client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content
    # Swagger UI comes from the sidecar package via our static files, not a CDN.
    assert b"cdn.jsdelivr" not in docs.content
    assert b"/static/drf_spectacular_sidecar/" in docs.content


def test_schema_documents_the_error_shape(client, db):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    error = schema["components"]["schemas"]["ApiError"]
    assert set(error["properties"]) == {"detail", "errors"}
    create = schema["paths"]["/api/v1/memberships/"]["post"]["responses"]
    assert {"201", "400", "401", "403"} <= set(create)
    ref = create["400"]["content"]["application/json"]["schema"]["$ref"]
    assert ref == "#/components/schemas/ApiError"
    detail = schema["paths"]["/api/v1/projects/{slug}/"]["get"]["responses"]
    assert "404" in detail
    assert "403" not in detail


def test_a_body_of_an_unknown_type_is_a_documented_415_in_the_error_shape(personas, api_client_for):
    """Found by the fuzz test: a PATCH whose body the API has no parser for answered 415, which
    the schema did not list."""
    client = api_client_for(personas.admin)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    patch = schema["paths"]["/api/v1/memberships/{id}/"]["patch"]["responses"]
    assert patch["415"]["content"]["application/json"]["schema"]["$ref"] == (
        "#/components/schemas/ApiError"
    )
    assert "415" not in schema["paths"]["/api/v1/memberships/{id}/"]["get"]["responses"]
    membership = personas.project_a.memberships.get(user=personas.member)
    response = client.generic(
        "PATCH", f"/api/v1/memberships/{membership.pk}/", b"role=admin", content_type="text/csv"
    )
    assert response.status_code == 415
    assert response.json() == {
        "detail": 'Unsupported media type "text/csv" in request.',
        "errors": {},
    }
    membership.refresh_from_db()
    assert membership.role != "admin"  # nothing stored changed
