"""Pure rules: registry names, image hosts, the Secret manifests, secret references."""

import base64
import json

import pytest

from credentials import manifests as M
from credentials.registry import image_registry, normalize_server
from jobs import secret_refs
from jobs.secret_refs import CredentialFacts


@pytest.mark.parametrize(
    ("text", "server"),
    [
        ("ghcr.io", "ghcr.io"),
        ("https://GHCR.io/", "ghcr.io"),
        ("https://index.docker.io/v1/", "docker.io"),
        ("registry-1.docker.io", "docker.io"),
        ("registry.example.com:5000", "registry.example.com:5000"),
        ("localhost:5000/path", "localhost:5000"),
        ("not a host", None),
        ("", None),
        ("exa_mple.com", None),
    ],
)
def test_normalize_server(text, server):
    assert normalize_server(text) == server


@pytest.mark.parametrize(
    ("image", "registry"),
    [
        ("busybox", "docker.io"),
        ("acme/train:1", "docker.io"),
        ("docker.io/acme/train", "docker.io"),
        ("index.docker.io/acme/train", "docker.io"),
        ("ghcr.io/acme/train:2", "ghcr.io"),
        ("registry.example.com:5000/team/img@sha256:" + "a" * 64, "registry.example.com:5000"),
        ("localhost/img", "localhost"),
        ("nvcr.io/nvidia/pytorch:24.08-py3", "nvcr.io"),
    ],
)
def test_image_registry_follows_the_docker_reference_rules(image, registry):
    assert image_registry(image) == registry


def test_pull_secrets_only_for_logins_of_the_images_registry():
    logins = [
        CredentialFacts(name="hub", kind="registry", server="docker.io"),
        CredentialFacts(name="ghcr", kind="registry", server="ghcr.io"),
        CredentialFacts(name="ghcr-ro", kind="registry", server="ghcr.io"),
        CredentialFacts(name="hf", kind="secret", keys=("token",)),
    ]
    assert secret_refs.pull_secrets_for("ghcr.io/acme/x:1", logins) == (
        "gp-cred-ghcr",
        "gp-cred-ghcr-ro",
    )
    assert secret_refs.pull_secrets_for("acme/private", logins) == ("gp-cred-hub",)
    assert secret_refs.pull_secrets_for("nvcr.io/nvidia/pytorch:24.08-py3", logins) == ()


def test_secret_manifests_carry_the_values_base64_and_the_portal_labels():
    opaque = M.opaque_secret(namespace="gp-a", project_slug="a", name="hf", values={"t": "v1"})
    assert opaque["metadata"]["name"] == "gp-cred-hf"
    assert opaque["type"] == "Opaque"
    assert opaque["data"] == {"t": base64.b64encode(b"v1").decode()}
    assert M.is_portal_secret(opaque, "a", "hf")
    assert not M.is_portal_secret(opaque, "b", "hf")
    assert not M.is_portal_secret({"metadata": {"name": "gp-cred-hf"}}, "a", "hf")
    hub = M.registry_secret(
        namespace="gp-a", project_slug="a", name="hub", server="docker.io", username="u", token="p"
    )
    config = json.loads(base64.b64decode(hub["data"][".dockerconfigjson"]))
    assert hub["type"] == "kubernetes.io/dockerconfigjson"
    assert (
        config["auths"]["https://index.docker.io/v1/"]["auth"] == base64.b64encode(b"u:p").decode()
    )


@pytest.mark.parametrize(
    ("name", "looks"),
    [
        ("HF_TOKEN", True),
        ("API_KEY", True),
        ("DB_PASSWORD", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("client_secret", True),
        ("TOKEN", True),
        ("EPOCHS", False),
        ("KEYBOARD_LAYOUT", False),
        ("TOKENIZER", False),
        ("MONKEY", False),
    ],
)
def test_looks_like_credential(name, looks):
    assert secret_refs.looks_like_credential(name) is looks


CREDS = {
    "hf": CredentialFacts(name="hf", kind="secret", keys=("token",)),
    "gcp": CredentialFacts(name="gcp", kind="secret", keys=("key.json",)),
    "ghcr": CredentialFacts(
        name="ghcr", kind="registry", keys=(".dockerconfigjson",), server="ghcr.io"
    ),
}


@pytest.mark.parametrize(
    ("env", "field", "words"),
    [
        ({"HF_TOKEN": {"secret": "nope", "key": "token"}}, "env.HF_TOKEN", "No credential 'nope'"),
        ({"HF_TOKEN": {"secret": "hf", "key": "tok"}}, "env.HF_TOKEN", "no key 'tok'"),
        ({"PULL": {"secret": "ghcr", "key": ".dockerconfigjson"}}, "env.PULL", "registry login"),
        ({"X": {"secret": "hf"}}, "env.X", "A reference is"),
        ({"X": {"secret": "hf", "key": "token", "extra": 1}}, "env.X", "A reference is"),
    ],
)
def test_env_reference_errors_name_the_variable(env, field, words):
    errors = secret_refs.check_env_refs(env, CREDS, "alpha")
    assert list(errors) == [field]
    assert words in errors[field][0]


def test_a_good_env_reference_and_plain_values_pass():
    env = {"HF_TOKEN": {"secret": "hf", "key": "token"}, "EPOCHS": "3"}
    assert secret_refs.check_env_refs(env, CREDS, "alpha") == {}
    plain, refs = secret_refs.resolve_env(env)
    assert plain == {"EPOCHS": "3"}
    assert refs == (secret_refs.SecretEnv("HF_TOKEN", "gp-cred-hf", "token"),)


@pytest.mark.parametrize(
    ("files", "field"),
    [
        ([{"secret": "gcp", "path": "etc/gcp"}], "secret_files[0].path"),
        ([{"secret": "gcp", "path": "/etc/gcp"}], "secret_files[0].path"),
        ([{"secret": "gcp", "path": "/proc/x"}], "secret_files[0].path"),
        ([{"secret": "gcp", "path": "/var/run/secrets/kubernetes.io/x"}], "secret_files[0].path"),
        ([{"secret": "gcp", "path": "/var/run/../etc"}], "secret_files[0].path"),
        ([{"secret": "gcp", "path": "/tmp"}], "secret_files[0].path"),
        ([{"secret": "gcp", "path": "/"}], "secret_files[0].path"),
        ([{"secret": "nope", "path": "/var/run/gcp"}], "secret_files[0].secret"),
        ([{"secret": "ghcr", "path": "/var/run/gcp"}], "secret_files[0].secret"),
        ([{"secret": "gcp"}], "secret_files[0]"),
        ("gcp", "secret_files"),
        (
            [
                {"secret": "gcp", "path": "/var/run/gcp"},
                {"secret": "hf", "path": "/var/run/gcp/hf"},
            ],
            "secret_files[1].path",
        ),
    ],
)
def test_secret_file_errors_name_the_item_and_field(files, field):
    errors = secret_refs.check_secret_files(files, CREDS, "alpha")
    assert field in errors, errors


def test_good_secret_files_pass_and_resolve_to_read_only_volumes():
    files = [{"secret": "gcp", "path": "/var/run/gcp"}, {"secret": "hf", "path": "/workspace/hf"}]
    assert secret_refs.check_secret_files(files, CREDS, "alpha") == {}
    assert secret_refs.resolve_files(files)[0] == secret_refs.SecretFile(
        "cred-gcp", "gp-cred-gcp", "/var/run/gcp"
    )
