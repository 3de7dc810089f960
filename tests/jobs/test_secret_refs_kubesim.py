"""Jobs that use credentials, against kubesim: the applied objects reference the Secret and hold
no value; nothing the portal shows or records (API for member and viewer, events, logs, the
portal's log lines) contains one; registry logins become imagePullSecrets for their registry."""

import base64
import json
import logging

import pytest

from tests.jobs.kubesim_org import reconcile_until

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]

JOBS = "/api/v1/jobs/"
HF_VALUE = "hf_live_S3cr3tV4lue91"
GCP_VALUE = '{"private_key": "-----BEGIN KEY-----gcpKeyMaterial77"}'
PULL_TOKEN = "ghp_PullT0ken4Registry"


def _hidden(blob: bytes | str) -> None:
    data = blob.encode() if isinstance(blob, str) else blob
    for value in (HF_VALUE, GCP_VALUE, PULL_TOKEN):
        assert value.encode() not in data
        assert base64.b64encode(value.encode()) not in data


@pytest.fixture
def team(org):
    from credentials.services import credential_create
    from tests.factories import MembershipFactory, UserFactory

    admin = UserFactory(username=f"a-{org['project'].slug}")
    viewer = UserFactory(username=f"v-{org['project'].slug}")
    MembershipFactory(user=admin, project=org["project"], role="admin")
    MembershipFactory(user=viewer, project=org["project"], role="viewer")
    project = org["project"]
    credential_create(
        actor=admin, project=project, name="hf", kind="secret", values={"token": HF_VALUE}
    )
    credential_create(
        actor=admin, project=project, name="gcp", kind="secret", values={"key.json": GCP_VALUE}
    )
    credential_create(
        actor=admin,
        project=project,
        name="ghcr",
        kind="registry",
        server="ghcr.io",
        username="bot",
        token=PULL_TOKEN,
    )
    return {**org, "admin": admin, "viewer": viewer}


def _submit(client, project, **extra):
    body = {
        "project": project.slug,
        "kind": "single",
        "gpus": 1,
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["python", "train.py"],
        **extra,
    }
    response = client.post(JOBS, body, format="json")
    assert response.status_code == 201, response.json()
    return response


def test_a_job_with_a_secret_env_and_files_runs_and_no_value_shows_anywhere(
    team, api_client_for, caplog
):
    from jobs.manifests import object_name
    from jobs.models import Job, JobEvent
    from portal.kube import apply as kube

    caplog.set_level(logging.DEBUG)
    project = team["project"]
    member = api_client_for(team["user"])
    created = _submit(
        member,
        project,
        env={"HF_TOKEN": {"secret": "hf", "key": "token"}, "EPOCHS": "3"},
        secret_files=[{"secret": "gcp", "path": "/var/run/gcp"}],
    )
    _hidden(created.content)
    job = Job.objects.get(pk=created.json()["id"])
    seen = reconcile_until(job, {"succeeded", "failed"}, timeout=120)
    assert seen[-1] == "succeeded", seen

    applied = kube.get("batch/v1", "Job", object_name(job.pk), project.namespace)
    pod_spec = applied["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "gp-cred-hf", "key": "token"}},
    } in container["env"]
    assert {"name": "cred-gcp", "mountPath": "/var/run/gcp", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {"name": "cred-gcp", "secret": {"secretName": "gp-cred-gcp", "defaultMode": 0o440}} in (
        pod_spec["volumes"]
    )
    assert "imagePullSecrets" not in pod_spec  # nvcr.io: no login registered for it
    _hidden(json.dumps(applied))
    pods = kube.list_objects(
        "v1", "Pod", namespace=project.namespace, label_selector=f"gpu-portal.io/job-id={job.pk}"
    )
    assert pods
    _hidden(json.dumps(pods))

    viewer = api_client_for(team["viewer"])
    for client in (member, viewer):
        for url in (
            f"{JOBS}{job.pk}/",
            JOBS,
            f"{JOBS}{job.pk}/manifest/",
            f"{JOBS}{job.pk}/manifest/?format=json",
            f"/jobs/{job.pk}/",
        ):
            response = client.get(url)
            assert response.status_code == 200, url
            _hidden(response.content)
    assert viewer.get(f"{JOBS}{job.pk}/").json()["env"]["EPOCHS"] is None
    logs = member.get(f"{JOBS}{job.pk}/logs/")
    assert logs.status_code == 200
    _hidden(b"".join(logs.streaming_content))
    stored = Job.objects.get(pk=job.pk)
    _hidden(stored.logs_tail + stored.state_message + json.dumps(stored.env))
    for event in JobEvent.objects.filter(job=stored):
        _hidden(event.message + event.reason)
    _hidden(caplog.text)


def test_registry_logins_are_pull_secrets_for_their_registry_only(team, api_client_for):
    from jobs.manifests import object_name
    from jobs.models import Job
    from jobs.reconcile.services import job_reconcile
    from portal.kube import apply as kube

    project = team["project"]
    member = api_client_for(team["user"])
    private = _submit(member, project, image="ghcr.io/acme/trainer:1.2").json()["id"]
    public = _submit(member, project, image="docker.io/library/busybox:1.36").json()["id"]
    for job_id in (private, public):
        assert job_reconcile(job_id=job_id) == "applied"

    def pull_secrets(job_id):
        applied = kube.get("batch/v1", "Job", object_name(job_id), project.namespace)
        return applied["spec"]["template"]["spec"].get("imagePullSecrets")

    assert pull_secrets(private) == [{"name": "gp-cred-ghcr"}]
    assert pull_secrets(public) is None
    _hidden(json.dumps(kube.get("batch/v1", "Job", object_name(private), project.namespace)))
    assert Job.objects.get(pk=private).state != "failed"


def test_replacing_a_value_changes_the_secret_but_jobs_and_the_api_never_show_it(
    team, api_client_for
):
    from credentials.models import Credential
    from credentials.services import credential_replace
    from portal.kube import apply as kube

    rotated = "hf_rotated_Zq81Lm20Xx"
    credential = Credential.objects.get(project=team["project"], name="hf")
    credential_replace(actor=team["admin"], credential=credential, values={"token": rotated})
    secret = kube.get("v1", "Secret", "gp-cred-hf", team["project"].namespace)
    assert base64.b64decode(secret["data"]["token"]).decode() == rotated
    member = api_client_for(team["user"])
    job = _submit(member, team["project"], env={"HF_TOKEN": {"secret": "hf", "key": "token"}})
    for client in (member, api_client_for(team["viewer"]), api_client_for(team["admin"])):
        for url in (
            f"/api/v1/credentials/?project={team['project'].slug}",
            f"{JOBS}{job.json()['id']}/manifest/",
        ):
            content = client.get(url).content
            assert rotated.encode() not in content
            assert base64.b64encode(rotated.encode()) not in content
