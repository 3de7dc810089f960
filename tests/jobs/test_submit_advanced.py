"""The submit form's "Advanced: data, secrets, sweeps" part through the Django client: volumes,
/dev/shm, grace period, credential env, resume from, sweeps and arrays reach the same validation
as the API, and the API's errors land next to the matching fields."""

import html
import re

import pytest

from jobs.submission.form_advanced import (
    TextError,
    parse_secret_env,
    parse_secret_files,
    parse_sweep,
)
from tests.jobs.test_console_pages import field_block, form_data

pytestmark = [pytest.mark.django_db]


@pytest.fixture
def data(personas):
    from credentials.models import Credential
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
        name="scratch",
        kind="existing",
        claim_name="scratch-pvc",
        mount_path="/data",  # the same default path as imagenet: both cannot be mounted
        read_only=False,
    )
    Credential.objects.create(project=personas.project_a, name="hf", kind="secret", keys=["token"])
    # Another tenant's: never offered in alpha's form.
    DataVolume.objects.create(
        project=personas.project_b,
        name="beta-data",
        kind="existing",
        claim_name="beta-pvc",
        mount_path="/beta",
    )


def page_of(response) -> str:
    return html.unescape(response.content.decode())


def test_the_advanced_fieldset_lists_the_projects_volumes_and_credentials(
    personas, data, web_client_for
):
    page = page_of(web_client_for(personas.member).get("/jobs/new/"))
    assert "<summary>Advanced: data, secrets, sweeps</summary>" in page
    volumes = field_block(page, "volumes")
    assert "imagenet: /data, read-only" in volumes
    assert "scratch: /data, read-write" in volumes
    assert "beta-data" not in page
    assert "Choices: hf/token." in field_block(page, "secret_env")
    # No checkpoint volume: nothing to resume from, so no such field.
    assert 'id="id_resume_from"' not in page


def test_a_job_with_a_volume_shm_grace_and_a_credential_lands_with_those_fields(
    personas, data, web_client_for
):
    from jobs.models import Job

    client = web_client_for(personas.member)
    response = client.post(
        "/jobs/new/",
        form_data(
            name="with-data",
            memory="16Gi",
            volumes=["imagenet"],
            shm_size="2Gi",
            termination_grace_seconds="120",
            secret_env="HF_TOKEN=hf/token",
        ),
    )
    assert response.status_code == 302, page_of(response)
    job = Job.objects.get(name="with-data")
    assert response["Location"] == f"/jobs/{job.pk}/"
    assert job.mounts == [
        {"volume": "imagenet", "claim": "imagenet-pvc", "path": "/data", "read_only": True}
    ]
    assert (job.shm_size, job.termination_grace_seconds) == ("2Gi", 120)
    assert job.env == {"HF_TOKEN": {"secret": "hf", "key": "token"}}


def test_a_sweep_from_the_form_creates_the_array_and_shows_its_page(personas, data, web_client_for):
    from jobs.models import Job, JobArray

    client = web_client_for(personas.member)
    response = client.post(
        "/jobs/new/", form_data(name="lr-sweep", sweep="lr=0.1,0.01\nopt=adam,sgd", parallelism="2")
    )
    array = JobArray.objects.get(name="lr-sweep")
    assert response.status_code == 302
    assert response["Location"] == f"/jobs/arrays/{array.pk}/"
    assert (array.count, array.parallelism) == (4, 2)
    assert array.sweep == {"lr": [0.1, 0.01], "opt": ["adam", "sgd"]}  # numbers as numbers
    first = Job.objects.get(array=array, array_index=0)
    assert first.env["SWEEP_LR"] == "0.1"
    assert "lr-sweep" in page_of(client.get(response["Location"]))


def test_api_errors_land_next_to_the_volumes_and_the_credential_lines(
    personas, data, web_client_for
):
    from jobs.models import Job

    client = web_client_for(personas.member)
    response = client.post(
        "/jobs/new/",
        form_data(volumes=["imagenet", "scratch"], secret_env="HF_TOKEN=hf/nokey"),
    )
    assert response.status_code == 400
    page = page_of(response)
    volumes = field_block(page, "volumes")
    assert "has-error" in volumes
    assert "Volume scratch: mounts[0] is already mounted at /data; one mount per path." in volumes
    assert "HF_TOKEN: Credential 'hf' has no key 'nokey'" in field_block(page, "secret_env")
    # What was chosen is kept, and the fieldset stays open to show it.
    assert '<details class="advanced" open>' in page
    assert re.search(r'value="imagenet"[^>]*checked', volumes)
    assert not Job.objects.exists()


def test_sweep_and_array_errors_are_by_their_fields(personas, data, web_client_for):
    client = web_client_for(personas.member)
    page = page_of(client.post("/jobs/new/", form_data(sweep="lr")))
    assert "Line 1 is not name=value1,value2" in field_block(page, "sweep")
    page = page_of(client.post("/jobs/new/", form_data(parallelism="2")))
    assert "parallelism goes with a sweep" in field_block(page, "parallelism")
    page = page_of(client.post("/jobs/new/", form_data(array_count="100000")))
    assert "over this project's limit" in field_block(page, "array_count")


def test_the_live_check_previews_the_first_element_of_a_sweep(personas, data, web_client_for):
    client = web_client_for(personas.member)
    response = client.post("/jobs/new/check/", form_data(name="sw", sweep="lr=0.1,0.01"))
    text = page_of(response)
    assert "An array of 2 jobs, at most 2 at once; the preview shows its first job." in text
    assert "SWEEP_LR" in text
    assert "name: sw-0" in text


def test_resume_from_lists_finished_jobs_when_the_project_has_a_checkpoint_volume(
    personas, data, web_client_for, make_job
):
    from jobs.models import Job
    from volumes.models import DataVolume

    DataVolume.objects.create(
        project=personas.project_a,
        name="ckpt",
        kind="existing",
        claim_name="ckpt-pvc",
        mount_path="/ckpt",
        read_only=False,
        is_checkpoint=True,
    )
    done = make_job(name="first-run", state="succeeded")
    make_job(name="still-running", state="running")
    client = web_client_for(personas.member)
    page = page_of(client.get("/jobs/new/"))
    resume = field_block(page, "resume_from")
    assert f"first-run ({done.pk}, succeeded)" in resume
    assert "still-running" not in resume
    response = client.post("/jobs/new/", form_data(name="second-run", resume_from=str(done.pk)))
    assert response.status_code == 302, page_of(response)
    assert Job.objects.get(name="second-run").resume_from_id == done.pk


def test_viewer_sees_no_advanced_form(personas, data, web_client_for):
    page = page_of(web_client_for(personas.viewer).get("/jobs/new/"))
    assert "You cannot submit jobs" in page
    assert "Advanced: data, secrets, sweeps" not in page
    assert "imagenet" not in page


def test_text_parsers_give_the_api_shape_or_say_which_line():
    assert parse_sweep("lr = 0.1, 1e-3\nbatch=32,64\nname=a,b") == {
        "lr": [0.1, 0.001],
        "batch": [32, 64],
        "name": ["a", "b"],
    }
    assert parse_secret_env("HF_TOKEN=hf/token") == {"HF_TOKEN": {"secret": "hf", "key": "token"}}
    assert parse_secret_files("gcp:/var/run/gcp") == [{"secret": "gcp", "path": "/var/run/gcp"}]
    for parse, text in [
        (parse_sweep, "lr=0.1,"),
        (parse_secret_env, "HF_TOKEN=hf"),
        (parse_secret_files, "/var/run"),
    ]:
        with pytest.raises(TextError, match="Line 1"):
            parse(text)


def test_the_live_check_names_the_form_fields_of_api_errors(personas, data, web_client_for):
    client = web_client_for(personas.member)
    text = page_of(client.post("/jobs/new/check/", form_data(volumes=["imagenet", "scratch"])))
    assert "<strong>Data volumes:</strong> Volume scratch: mounts[0] is already mounted" in text
    text = page_of(client.post("/jobs/new/check/", form_data(array_count="100000")))
    assert "<strong>Array: number of copies:</strong> array.count 100000 is over" in text
