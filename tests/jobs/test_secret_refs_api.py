"""Secret references in job requests: each bad one is a 400 naming the field; plain values that
look like credentials are accepted with a warning. (Credential rows made directly: validation
only needs their names and keys; tests/credentials writes real Secrets.)"""

import pytest

JOBS = "/api/v1/jobs/"


@pytest.fixture
def creds(personas):
    from credentials.models import Credential

    Credential.objects.create(project=personas.project_a, name="hf", kind="secret", keys=["token"])
    Credential.objects.create(
        project=personas.project_a, name="gcp", kind="secret", keys=["key.json"]
    )
    Credential.objects.create(
        project=personas.project_a,
        name="ghcr",
        kind="registry",
        keys=[".dockerconfigjson"],
        server="ghcr.io",
    )
    # Another tenant's credential is not one of this project's.
    Credential.objects.create(
        project=personas.project_b, name="beta-hf", kind="secret", keys=["token"]
    )


def _post(client, **extra):
    body = {"project": "alpha", "kind": "single", "image": "busybox", **extra}
    return client.post(JOBS, body, format="json")


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"env": {"HF_TOKEN": {"secret": "nope", "key": "token"}}}, "env.HF_TOKEN"),
        ({"env": {"HF_TOKEN": {"secret": "beta-hf", "key": "token"}}}, "env.HF_TOKEN"),
        ({"env": {"HF_TOKEN": {"secret": "hf", "key": "nokey"}}}, "env.HF_TOKEN"),
        ({"env": {"PULL": {"secret": "ghcr", "key": ".dockerconfigjson"}}}, "env.PULL"),
        ({"env": {"HF_TOKEN": {"secret": "hf"}}}, "env.HF_TOKEN"),
        ({"env": {"HF_TOKEN": 5}}, "env.HF_TOKEN"),
        ({"secret_files": [{"secret": "gcp", "path": "/etc/gcp"}]}, "secret_files[0].path"),
        ({"secret_files": [{"secret": "gcp", "path": "relative"}]}, "secret_files[0].path"),
        ({"secret_files": [{"secret": "nope", "path": "/var/run/x"}]}, "secret_files[0].secret"),
        ({"secret_files": [{"secret": "ghcr", "path": "/var/run/x"}]}, "secret_files[0].secret"),
        (
            {"secret_files": [{"secret": "gcp", "path": "/var/run/gcp", "mode": 1}]},
            "secret_files[0]",
        ),
        ({"env": {"NVIDIA_VISIBLE_DEVICES": {"secret": "hf", "key": "token"}}}, "env"),
    ],
)
def test_each_bad_reference_is_a_400_naming_the_field(
    creds, personas, api_client_for, extra, field
):
    from jobs.models import Job

    response = _post(api_client_for(personas.member), **extra)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"], response.json()
    assert not Job.objects.exists()


def test_dry_run_reports_the_reference_errors_without_storing(creds, personas, api_client_for):
    client = api_client_for(personas.member)
    body = {
        "project": "alpha",
        "kind": "single",
        "image": "busybox",
        "env": {"HF_TOKEN": {"secret": "hf", "key": "nokey"}},
    }
    response = client.post(f"{JOBS}?dry_run=true", body, format="json")
    assert response.status_code == 200
    assert response.json()["valid"] is False
    assert "env.HF_TOKEN" in response.json()["errors"]


def test_plain_values_that_look_like_credentials_get_a_warning(creds, personas, api_client_for):
    response = _post(
        api_client_for(personas.member),
        env={
            "WANDB_API_KEY": "abc123def456",
            "EPOCHS": "3",
            "HF_TOKEN": {"secret": "hf", "key": "token"},
        },
    )
    assert response.status_code == 201, response.json()
    (warning,) = response.json()["warnings"]
    assert "env.WANDB_API_KEY" in warning
    assert "credential" in warning
    assert "abc123def456" not in warning
    clean = _post(api_client_for(personas.member), env={"EPOCHS": "3"})
    assert clean.json()["warnings"] == []


def test_the_submit_form_warns_about_a_plain_token(creds, personas, web_client_for):
    client = web_client_for(personas.member)
    form = {
        "project": "alpha",
        "kind": "single",
        "image": "busybox",
        "env": "HF_TOKEN=abc123def456\nEPOCHS=3",
        "gpus": "1",
        "priority": "normal",
        "max_runtime_minutes": "60",
    }
    response = client.post("/jobs/new/", form, follow=True)
    assert response.status_code == 200
    html = response.content.decode()
    assert "env.HF_TOKEN looks like a credential" in html


def test_viewers_see_the_reference_but_no_plain_values(
    creds, personas, api_client_for, web_client_for
):
    response = _post(
        api_client_for(personas.member),
        env={"HF_TOKEN": {"secret": "hf", "key": "token"}, "EPOCHS": "3"},
        secret_files=[{"secret": "gcp", "path": "/var/run/gcp"}],
    )
    assert response.status_code == 201, response.json()
    job_id = response.json()["id"]
    viewer = api_client_for(personas.viewer).get(f"{JOBS}{job_id}/").json()
    assert viewer["env"] == {"HF_TOKEN": {"secret": "hf", "key": "token"}, "EPOCHS": None}
    assert viewer["secret_files"] == [{"secret": "gcp", "path": "/var/run/gcp"}]
    manifest = api_client_for(personas.viewer).get(f"{JOBS}{job_id}/manifest/", {"format": "json"})
    pod = manifest.json()[-1]["spec"]["template"]["spec"]
    env = pod["containers"][0]["env"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "gp-cred-hf", "key": "token"}},
    } in env
    assert {"name": "EPOCHS", "value": "(hidden)"} in env
    # Beside the memory-backed /dev/shm every GPU pod has, the credential's read-only files.
    assert [m for m in pod["containers"][0]["volumeMounts"] if m["name"] != "dshm"] == [
        {"name": "cred-gcp", "mountPath": "/var/run/gcp", "readOnly": True}
    ]
    assert [v for v in pod["volumes"] if v["name"] != "dshm"] == [
        {"name": "cred-gcp", "secret": {"secretName": "gp-cred-gcp", "defaultMode": 0o440}}
    ]
    page = web_client_for(personas.viewer).get(f"/jobs/{job_id}/")
    assert "from credential hf/token" in page.content.decode()
