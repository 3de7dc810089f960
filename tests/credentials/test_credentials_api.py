"""Credentials through the API against kubesim: values go into the project's Secret and never
come back out (API answers for every role, the database, the logs)."""

import base64
import json
import logging

import pytest

from tests.credentials.conftest import decoded, read_secret

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

URL = "/api/v1/credentials/"
TOKEN = "hf_live_7Qx2mZk9PwE4"
OTHER = "gcp-key-3bN8vYt1LsR6"
NEW_TOKEN = "hf_rotated_Vb5Jq0Ua8n"
REGISTRY_TOKEN = "ghp_R3gistryT0kenZ91"


def _never_shows(content: bytes, *values: str) -> None:
    for value in values:
        assert value.encode() not in content
        assert base64.b64encode(value.encode()) not in content


def _db_dump() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM credentials_credential")
        return repr(cursor.fetchall())


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


@pytest.fixture
def hf(kube, api_client_for, logs):
    body = {
        "project": "alpha",
        "name": "hf",
        "kind": "secret",
        "values": {"token": TOKEN, "org": OTHER},
    }
    response = api_client_for(kube.admin).post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    _never_shows(response.content, TOKEN, OTHER)
    return response.json()


def test_admin_creates_a_secret_credential_whose_values_live_only_in_the_secret(kube, hf, logs):
    assert hf["keys"] == ["org", "token"]
    assert hf["secret_name"] == "gp-cred-hf"
    assert hf["created_by"] == "alice"
    secret = read_secret("gp-alpha", "gp-cred-hf")
    assert secret["type"] == "Opaque"
    assert decoded(secret) == {"org": OTHER, "token": TOKEN}
    labels = secret["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "gpu-portal"
    assert labels["gpu-portal.io/credential"] == "hf"
    assert labels["gpu-portal.io/project"] == "alpha"
    _never_shows(_db_dump().encode(), TOKEN, OTHER)
    _never_shows(logs.text.encode(), TOKEN, OTHER)


@pytest.mark.parametrize("who", ["viewer", "member", "admin", "staff"])
def test_everyone_in_the_project_sees_names_and_keys_never_values(kube, hf, api_client_for, who):
    client = api_client_for(kube.by_name(who))
    listing = client.get(URL, {"project": "alpha"})
    assert listing.status_code == 200
    (item,) = listing.json()["results"]
    assert item["name"] == "hf"
    assert item["keys"] == ["org", "token"]
    assert item["updated_by"] == "alice"
    detail = client.get(f"{URL}{hf['id']}/")
    assert detail.status_code == 200
    assert "values" not in detail.json()
    _never_shows(listing.content + detail.content, TOKEN, OTHER)


def test_another_tenant_neither_lists_nor_finds_it(kube, hf, api_client_for):
    client = api_client_for(kube.outsider)
    assert client.get(URL).json()["results"] == []
    assert client.get(f"{URL}{hf['id']}/").status_code == 404
    assert (
        client.patch(f"{URL}{hf['id']}/", {"values": {"token": "x"}}, format="json").status_code
        == 404
    )
    assert client.delete(f"{URL}{hf['id']}/").status_code == 404


@pytest.mark.parametrize("who", ["viewer", "member"])
def test_members_and_viewers_cannot_write(kube, hf, api_client_for, who):
    client = api_client_for(kube.by_name(who))
    body = {"project": "alpha", "name": "mine", "kind": "secret", "values": {"k": "v-123456"}}
    assert client.post(URL, body, format="json").status_code == 403
    patch = client.patch(f"{URL}{hf['id']}/", {"values": {"token": NEW_TOKEN}}, format="json")
    assert patch.status_code == 403
    assert client.delete(f"{URL}{hf['id']}/").status_code == 403
    assert decoded(read_secret("gp-alpha", "gp-cred-hf"))["token"] == TOKEN
    assert read_secret("gp-alpha", "gp-cred-mine") is None


def test_replacing_one_value_changes_the_secret_and_the_api_still_never_shows_it(
    kube, hf, api_client_for, logs
):
    admin = api_client_for(kube.admin)
    response = admin.patch(f"{URL}{hf['id']}/", {"values": {"token": NEW_TOKEN}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["keys"] == ["org", "token"]
    assert decoded(read_secret("gp-alpha", "gp-cred-hf")) == {"org": OTHER, "token": NEW_TOKEN}
    for who in ("viewer", "member", "admin"):
        client = api_client_for(kube.by_name(who))
        _never_shows(client.get(f"{URL}{hf['id']}/").content, NEW_TOKEN, TOKEN, OTHER)
    _never_shows(response.content, NEW_TOKEN, TOKEN, OTHER)
    _never_shows(_db_dump().encode(), NEW_TOKEN, TOKEN, OTHER)
    _never_shows(logs.text.encode(), NEW_TOKEN, TOKEN, OTHER)

    # PUT replaces the whole set: a key not given is removed.
    response = admin.put(f"{URL}{hf['id']}/", {"values": {"token": TOKEN}}, format="json")
    assert response.status_code == 200
    assert response.json()["keys"] == ["token"]
    assert decoded(read_secret("gp-alpha", "gp-cred-hf")) == {"token": TOKEN}


def test_a_registry_login_becomes_a_dockerconfigjson_secret(kube, api_client_for, logs):
    body = {
        "project": "alpha",
        "name": "ghcr",
        "kind": "registry",
        "server": "https://GHCR.io/",
        "username": "acme-bot",
        "token": REGISTRY_TOKEN,
    }
    response = api_client_for(kube.admin).post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["server"] == "ghcr.io"
    assert response.json()["keys"] == [".dockerconfigjson"]
    _never_shows(response.content, REGISTRY_TOKEN)
    assert b"acme-bot" not in response.content  # username is write-only too
    secret = read_secret("gp-alpha", "gp-cred-ghcr")
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(decoded(secret)[".dockerconfigjson"])
    entry = config["auths"]["ghcr.io"]
    assert (entry["username"], entry["password"]) == ("acme-bot", REGISTRY_TOKEN)
    assert base64.b64decode(entry["auth"]).decode() == f"acme-bot:{REGISTRY_TOKEN}"
    _never_shows(_db_dump().encode(), REGISTRY_TOKEN)
    _never_shows(logs.text.encode(), REGISTRY_TOKEN)


def test_delete_removes_the_portals_secret_only(kube, hf, api_client_for):
    from portal.kube import apply as kube_api

    admin = api_client_for(kube.admin)
    assert admin.delete(f"{URL}{hf['id']}/").status_code == 204
    assert read_secret("gp-alpha", "gp-cred-hf") is None
    assert admin.get(f"{URL}{hf['id']}/").status_code == 404

    # A Secret of that name the portal did not write is neither taken over nor deleted.
    foreign = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gp-cred-theirs", "namespace": "gp-alpha"},
        "type": "Opaque",
        "data": {"k": base64.b64encode(b"theirs").decode()},
    }
    kube_api.apply(foreign, field_manager="someone-else")
    body = {"project": "alpha", "name": "theirs", "kind": "secret", "values": {"k": "mine-123"}}
    response = admin.post(URL, body, format="json")
    assert response.status_code == 400
    assert "name" in response.json()["errors"]
    assert decoded(read_secret("gp-alpha", "gp-cred-theirs")) == {"k": "theirs"}


def test_delete_leaves_a_secret_that_lost_the_portals_labels(kube, hf, api_client_for):
    from portal.kube import apply as kube_api

    secret = read_secret("gp-alpha", "gp-cred-hf")
    relabelled = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "gp-cred-hf", "namespace": "gp-alpha", "labels": {"team": "x"}},
        "type": "Opaque",
        "data": secret["data"],
    }
    kube_api.delete("v1", "Secret", "gp-cred-hf", "gp-alpha")
    kube_api.apply(relabelled, field_manager="someone-else")
    assert api_client_for(kube.admin).delete(f"{URL}{hf['id']}/").status_code == 204
    assert read_secret("gp-alpha", "gp-cred-hf") is not None
    kube_api.delete("v1", "Secret", "gp-cred-hf", "gp-alpha")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad_Name", "kind": "secret", "values": {"k": "v"}}, "name"),
        ({"name": "empty", "kind": "secret", "values": {}}, "values"),
        ({"name": "badkey", "kind": "secret", "values": {"a/b": "v"}}, "values"),
        ({"name": "nokind", "kind": "vault", "values": {"k": "v"}}, "kind"),
        ({"name": "reg", "kind": "registry", "server": "ghcr.io", "username": "u"}, "token"),
        ({"name": "reg", "kind": "registry", "username": "u", "token": "t"}, "server"),
        (
            {
                "name": "reg",
                "kind": "registry",
                "server": "not a host",
                "username": "u",
                "token": "t",
            },
            "server",
        ),
        ({"name": "sec", "kind": "secret", "values": {"k": "v"}, "token": "t"}, "token"),
        ({"name": "sec", "kind": "secret", "values": {"k": "v"}, "plaintext": "t"}, "plaintext"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_not_quoting_the_value(
    kube, api_client_for, body, field
):
    response = api_client_for(kube.admin).post(URL, {"project": "alpha", **body}, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    for value in ("v", "t"):
        assert f"'{value}'" not in response.content.decode()


def test_no_cluster_is_a_503_and_nothing_is_stored(personas, api_client_for, settings, tmp_path):
    from credentials.models import Credential
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(tmp_path / "no-such-kubeconfig")
    reset_api_client()
    body = {"project": "alpha", "name": "hf", "kind": "secret", "values": {"token": TOKEN}}
    response = api_client_for(personas.admin).post(URL, body, format="json")
    assert response.status_code == 503
    assert response.json()["detail"]
    _never_shows(response.content, TOKEN)
    assert not Credential.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_partial_replacements_both_land(kube):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from credentials.models import Credential
    from credentials.services import credential_create, credential_replace

    credential_create(
        actor=kube.admin,
        project="alpha",
        name="pair",
        kind="secret",
        values={"a": "a-0", "b": "b-0"},
    )

    def replace(key):
        try:
            credential = Credential.objects.get(project__slug="alpha", name="pair")
            credential_replace(actor=kube.admin, credential=credential, values={key: f"{key}-1"})
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(replace, ["a", "b"]))
    assert decoded(read_secret("gp-alpha", "gp-cred-pair")) == {"a": "a-1", "b": "b-1"}
