"""POST /api/v1/jobs/ with mounts, shm_size, termination_grace_seconds and resume_from: every
bad value is a 400 naming the field; good ones are stored and shown (no cluster needed)."""

import pytest

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


@pytest.fixture
def volumes(personas):
    from volumes.models import DataVolume

    DataVolume.objects.create(
        project=personas.project_a,
        name="imagenet",
        kind="existing",
        claim_name="imagenet-pvc",
        mount_path="/data",
        read_only=True,
    )
    DataVolume.objects.create(
        project=personas.project_a,
        name="ckpt",
        kind="new",
        claim_name="gp-vol-ckpt",
        size="1Ti",
        mount_path="/ckpt",
        read_only=False,
        is_checkpoint=True,
    )
    # Another tenant's volume: never mountable from project alpha.
    DataVolume.objects.create(
        project=personas.project_b,
        name="secret-data",
        kind="existing",
        claim_name="secret-pvc",
        mount_path="/data",
    )


def payload(**overrides):
    body = {
        "project": "alpha",
        "kind": "single",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["python", "train.py"],
        "gpus": 1,
        "memory": "16Gi",
    }
    body.update(overrides)
    return body


def test_a_job_with_a_dataset_gets_mounts_shm_grace_and_its_checkpoint_dir(
    personas, volumes, api_client_for
):
    client = api_client_for(personas.member)
    response = client.post(
        URL, payload(name="train", mounts=[{"volume": "imagenet"}]), format="json"
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["mounts"] == [
        {"volume": "imagenet", "claim": "imagenet-pvc", "path": "/data", "read_only": True}
    ]
    assert body["shm_size"] == "8Gi"  # half of 16Gi
    assert body["termination_grace_seconds"] == 60
    assert body["checkpoint_dir"] == "/checkpoints/alpha/train"
    detail = client.get(f"{URL}{body['id']}/").json()
    assert detail["checkpoint_dir"] == "/checkpoints/alpha/train"
    page = api_client_for(personas.member).get(f"/jobs/{body['id']}/")
    assert page.status_code == 200
    assert b"/checkpoints/alpha/train" in page.content  # the job page says where they are


@pytest.mark.parametrize(
    ("mounts", "field", "words"),
    [
        ([{"volume": "nope"}], "mounts[0].volume", "no volume 'nope'"),
        ([{"volume": "secret-data"}], "mounts[0].volume", "no volume 'secret-data'"),
        ([{"volume": "imagenet", "path": "/proc"}], "mounts[0].path", "/proc"),
        ([{"volume": "imagenet", "path": "/usr/local"}], "mounts[0].path", "/usr"),
        (
            [{"volume": "imagenet"}, {"volume": "ckpt", "path": "/data"}],
            "mounts[1].path",
            "already mounted at /data",
        ),
        ([{"volume": "imagenet", "read_only": False}], "mounts[0].read_only", "read-only"),
        ("imagenet", "mounts", "must be a list"),
    ],
)
def test_each_bad_mount_is_a_400_naming_the_field(
    personas, volumes, api_client_for, mounts, field, words
):
    from jobs.models import Job

    response = api_client_for(personas.member).post(URL, payload(mounts=mounts), format="json")
    assert response.status_code == 400, response.json()
    errors = response.json()["errors"]
    assert field in errors, errors
    assert any(words in m for m in errors[field]), errors[field]
    assert not Job.objects.exists()


def test_shm_and_grace_above_the_pools_caps_are_400s_saying_the_cap(personas, api_client_for):
    pool = personas.pool
    pool.max_shm_size = "16Gi"
    pool.max_termination_grace_seconds = 300
    pool.save()
    client = api_client_for(personas.member)
    response = client.post(URL, payload(memory="64Gi", shm_size="32Gi"), format="json")
    assert response.status_code == 400
    assert "at most 16Gi" in response.json()["errors"]["shm_size"][0]
    response = client.post(URL, payload(termination_grace_seconds=900), format="json")
    assert response.status_code == 400
    assert "at most 300 s" in response.json()["errors"]["termination_grace_seconds"][0]
    response = client.post(URL, payload(memory="8Gi", shm_size="12Gi"), format="json")
    assert response.status_code == 400
    assert "more than the pod's memory" in response.json()["errors"]["shm_size"][0]
    # The default is half the memory, capped by the pool.
    response = client.post(URL, payload(memory="64Gi"), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["shm_size"] == "16Gi"
    response = client.post(
        URL, payload(shm_size="4Gi", termination_grace_seconds=300), format="json"
    )
    assert response.status_code == 201, response.json()
    assert (response.json()["shm_size"], response.json()["termination_grace_seconds"]) == (
        "4Gi",
        300,
    )


def test_resume_from_reuses_the_earlier_jobs_dir_and_refuses_what_it_cannot(
    personas, volumes, api_client_for, make_job
):
    from jobs.models import Job

    client = api_client_for(personas.member)
    first = client.post(URL, payload(name="first"), format="json").json()
    # Still active: two runs must not write one directory.
    response = client.post(URL, payload(name="second", resume_from=first["id"]), format="json")
    assert response.status_code == 400
    assert "still" in response.json()["errors"]["resume_from"][0]
    Job.objects.filter(pk=first["id"]).update(state="failed")
    response = client.post(URL, payload(name="second", resume_from=first["id"]), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["checkpoint_dir"] == "/checkpoints/alpha/first"
    assert response.json()["resume_from"] == first["id"]
    other = make_job(project=personas.project_b, submitter=personas.outsider, state="failed")
    response = client.post(URL, payload(name="third", resume_from=other.pk), format="json")
    assert response.status_code == 400
    assert f"No job {other.pk}" in response.json()["errors"]["resume_from"][0]


def test_checkpoint_dir_cannot_be_overridden_and_viewers_cannot_mount(
    personas, volumes, api_client_for
):
    response = api_client_for(personas.member).post(
        URL, payload(env={"CHECKPOINT_DIR": "/tmp"}), format="json"
    )
    assert response.status_code == 400
    assert "CHECKPOINT_DIR" in response.json()["errors"]["env"][0]
    response = api_client_for(personas.viewer).post(
        URL, payload(mounts=[{"volume": "imagenet"}]), format="json"
    )
    assert response.status_code == 403


def test_each_array_element_checkpoints_into_its_own_directory(personas, volumes, api_client_for):
    from jobs.models import Job

    response = api_client_for(personas.member).post(
        URL, payload(name="lrs", sweep={"lr": [0.1, 0.01]}), format="json"
    )
    assert response.status_code == 201, response.json()
    dirs = sorted(Job.objects.filter(array__name="lrs").values_list("checkpoint_dir", flat=True))
    assert dirs == ["/checkpoints/alpha/lrs-0", "/checkpoints/alpha/lrs-1"]
