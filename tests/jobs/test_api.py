"""/api/v1/jobs/: submit, list with filters, detail, manifest YAML, dry run, cancel, tenancy."""

import pytest
import yaml

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def payload(**overrides):
    body = {
        "project": "alpha",
        "kind": "single",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["python", "train.py"],
        "env": {"EPOCHS": "3"},
        "gpus": 2,
    }
    body.update(overrides)
    return body


def test_submit_answers_201_submitted_and_enqueues_only_after_commit(
    personas, api_client_for, django_capture_on_commit_callbacks
):
    from jobs.models import Job

    client = api_client_for(personas.member)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(URL, payload(name="first"), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["state"] == "submitted"
    assert body["project"] == "alpha"
    assert body["submitter"] == "bob"
    assert body["gpus"] == 2
    assert body["cpu"] == "8"  # the pool's default
    assert body["memory"] == "64Gi"
    assert body["backend"] == "kueue"
    assert body["pool"] is None
    assert body["events"][0]["to_state"] == "submitted"
    # No pool named: exclusive pools only, and the job says so (issue 26)
    assert body["isolation"].startswith("Exclusive: the whole GPU is yours")
    assert body["device_request"] == {}
    assert client.get(f"{URL}{body['id']}/").json()["isolation"] == body["isolation"]
    assert len(callbacks) == 1  # the reconcile is queued on commit, not before
    assert Job.objects.get(pk=body["id"]).applied_at is None


def test_name_is_generated_when_omitted_and_must_be_unique_among_active_jobs(
    personas, api_client_for
):
    client = api_client_for(personas.member)
    generated = client.post(URL, payload(), format="json").json()
    assert generated["name"].startswith("single-")
    client.post(URL, payload(name="dup"), format="json")
    again = client.post(URL, payload(name="dup"), format="json")
    assert again.status_code == 400
    assert again.json()["errors"]["name"] == [
        "A job named 'dup' is already active in project alpha."
    ]


def test_finished_jobs_free_their_name(personas, api_client_for, make_job):
    from jobs.services import job_transition

    job = make_job(name="reuse")
    job_transition(job, expected_from=job.state, to="failed", reason="x", source="test")
    response = api_client_for(personas.member).post(URL, payload(name="reuse"), format="json")
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("overrides", "field", "fragment"),
    [
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env", "CUDA_VISIBLE_DEVICES cannot be set"),
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "cannot be set"),
        ({"gpus": 16}, "gpus", "1 to 8 whole GPUs"),
        ({"kind": "gang", "gpus": 8, "replicas": 2}, "gpus", "may never use more than 8"),
        ({"kind": "mig", "gpus": None, "mig_profile": "2g.10gb"}, "mig_profile", "valid profiles"),
        ({"image": "Not An Image"}, "image", "not a valid image reference"),
        ({"pool": "v100"}, "pool", "no quota in pool 'v100'"),
        ({"kind": "quantum"}, "kind", "not a valid choice"),
        ({"command": "python train.py"}, "command", ""),
        ({"securityContext": {"privileged": True}}, "securityContext", "Unknown field"),
        ({"hostPath": "/"}, "hostPath", "Unknown field"),
    ],
)
def test_bad_input_is_a_400_with_field_and_reason(
    overrides, field, fragment, personas, api_client_for
):
    from jobs.models import Job

    response = api_client_for(personas.member).post(URL, payload(**overrides), format="json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in errors, errors
    assert any(fragment in message for message in errors[field]), errors
    assert not Job.objects.exists()


def test_dry_run_returns_manifests_and_validation_without_storing(personas, api_client_for):
    from jobs.models import Job

    client = api_client_for(personas.member)
    ok = client.post(URL + "?dry_run=true", payload(kind="gang", gpus=4, replicas=2), format="json")
    assert ok.status_code == 200
    body = ok.json()
    assert body["valid"] is True
    assert body["errors"] == {}
    assert [m["kind"] for m in body["manifests"]] == ["Service", "Job"]
    bad = client.post(URL + "?dry_run=true", payload(gpus=99), format="json")
    assert bad.status_code == 200
    assert bad.json()["valid"] is False
    assert "gpus" in bad.json()["errors"]
    assert bad.json()["manifests"] == []
    assert not Job.objects.exists()


def test_manifest_endpoint_returns_yaml_the_reconciler_applies(personas, api_client_for):
    from jobs.models import Job
    from jobs.selectors import job_manifests
    from tests.factories import ProjectQuotaFactory

    ProjectQuotaFactory(
        project=personas.project_a, pool=personas.pool, resource="1g.10gb", nominal=7
    )
    client = api_client_for(personas.member)
    created = client.post(URL, payload(kind="mig", gpus=None, mig_profile="1g.10gb"), format="json")
    assert created.status_code == 201, created.json()
    job_id = created.json()["id"]
    # A member (a viewer gets the env values hidden: tests/api/test_env_hidden.py).
    response = api_client_for(personas.member).get(f"{URL}{job_id}/manifest/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    docs = list(yaml.safe_load_all(response.content))
    assert docs == job_manifests(Job.objects.get(pk=job_id))
    limits = docs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/mig-1g.10gb"] == "1"


def test_list_filters_newest_first_and_pagination(personas, api_client_for, make_job):
    from jobs.services import job_transition

    first = make_job(name="a", kind="single")
    second = make_job(name="b", kind="gang", replicas=2, submitter=personas.admin)
    third = make_job(name="c", kind="mig", gpus=0, mig_profile="1g.10gb")
    job_transition(
        third, expected_from=third.state, to="running", reason="PodsReady", source="test"
    )
    client = api_client_for(personas.viewer)

    def ids(query=""):
        response = client.get(URL + query)
        assert response.status_code == 200
        return [r["id"] for r in response.json()["results"]]

    assert ids() == [third.pk, second.pk, first.pk]
    assert ids("?kind=gang") == [second.pk]
    assert ids("?state=running") == [third.pk]
    assert ids("?state=submitted&state=running") == [third.pk, second.pk, first.pk]
    assert ids("?submitter=alice") == [second.pk]
    assert ids("?project=alpha") == [third.pk, second.pk, first.pk]
    assert ids("?project=beta") == []
    assert "count" in client.get(URL).json()
    assert client.get(URL + "?state=exploded").status_code == 400


def test_list_query_count_does_not_grow_with_jobs(
    personas, api_client_for, make_job, django_assert_max_num_queries
):
    for i in range(15):
        make_job(name=f"q{i}")
    client = api_client_for(personas.member)
    with django_assert_max_num_queries(8):
        assert client.get(URL).status_code == 200


def test_outsiders_see_404_and_nothing_in_lists(personas, api_client_for, make_job):
    job = make_job()
    outsider = api_client_for(personas.outsider)
    assert outsider.get(f"{URL}{job.pk}/").status_code == 404
    assert outsider.get(f"{URL}{job.pk}/manifest/").status_code == 404
    assert outsider.post(f"{URL}{job.pk}/cancel/").status_code == 404
    assert outsider.get(URL).json()["results"] == []
    response = outsider.post(URL, payload(), format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["project"] == ["No project 'alpha' that you belong to."]


def test_viewers_read_but_cannot_submit_or_cancel(personas, api_client_for, make_job):
    job = make_job()
    viewer = api_client_for(personas.viewer)
    assert viewer.get(f"{URL}{job.pk}/").status_code == 200
    assert viewer.post(URL, payload(), format="json").status_code == 403
    assert viewer.post(f"{URL}{job.pk}/cancel/").status_code == 403
    job.refresh_from_db()
    assert job.state == "submitted"


def test_cancel_moves_to_cancelled_and_finished_jobs_answer_409(
    personas, api_client_for, make_job, django_capture_on_commit_callbacks
):
    from jobs.models import Job
    from jobs.services import job_transition

    job = make_job()
    client = api_client_for(personas.member)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(f"{URL}{job.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"
    # The live-page notice, the deletion and the GPU summary of the ended job, all after commit.
    assert len(callbacks) == 3
    assert Job.objects.get(pk=job.pk).cleanup_pending is True
    again = client.post(f"{URL}{job.pk}/cancel/")
    assert again.status_code == 409
    assert (
        again.json()["detail"]
        == f"Job {job.name} is already cancelled; there is nothing to cancel."
    )
    done = make_job(name="done")
    job_transition(
        done, expected_from=done.state, to="succeeded", reason="Completed", source="test"
    )
    response = client.post(f"{URL}{done.pk}/cancel/")
    assert response.status_code == 409
    assert "already succeeded" in response.json()["detail"]


def test_gang_defaults_to_the_projects_backend(personas, api_client_for):
    project = personas.project_a
    project.default_gang_backend = "volcano"
    project.save()
    body = (
        api_client_for(personas.member)
        .post(URL, payload(kind="gang", gpus=4, replicas=2), format="json")
        .json()
    )
    assert body["backend"] == "volcano"
    assert body["replicas"] == 2
