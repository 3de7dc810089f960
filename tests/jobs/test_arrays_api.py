"""Job arrays and sweeps through the API and the array page: one POST stores every element and
queues one task; per-element states and counts; cancel the rest; resubmit failed elements;
validation and tenancy."""

import pytest

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/"


def payload(**overrides):
    body = {
        "project": "alpha",
        "kind": "single",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["python", "train.py"],
        "env": {"EPOCHS": "3"},
        "gpus": 1,
    }
    body.update(overrides)
    return body


def test_a_sweep_stores_one_job_per_combination_with_its_env_and_queues_one_task(
    personas, api_client_for, django_capture_on_commit_callbacks
):
    from jobs.models import Job

    client = api_client_for(personas.member)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            URL,
            payload(name="lr", sweep={"lr": [0.1, 0.01], "batch": [32, 64]}, parallelism=2),
            format="json",
        )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["count"], body["parallelism"]) == ("lr", 4, 2)
    assert body["counts"]["submitted"] == body["counts"]["held"] == body["counts"]["total"] == 4
    elements = body["elements"]["results"]
    assert [(e["index"], e["name"], e["params"]) for e in elements] == [
        (0, "lr-0", {"lr": 0.1, "batch": 32}),
        (1, "lr-1", {"lr": 0.1, "batch": 64}),
        (2, "lr-2", {"lr": 0.01, "batch": 32}),
        (3, "lr-3", {"lr": 0.01, "batch": 64}),
    ]
    assert all(e["state"] == "submitted" and not e["applied"] for e in elements)
    # One task for the whole array (plus the live-page notice), not one per element.
    assert len(callbacks) == 2
    job = Job.objects.get(pk=elements[3]["id"])
    assert job.env == {
        "EPOCHS": "3",
        "ARRAY_INDEX": "3",
        "ARRAY_COUNT": "4",
        "SWEEP_LR": "0.01",
        "SWEEP_BATCH": "64",
    }
    assert job.events.get().reason == "Submitted"


def test_an_array_of_n_elements(personas, api_client_for):
    client = api_client_for(personas.member)
    response = client.post(URL, payload(name="many", array={"count": 60}), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["count"], body["parallelism"]) == (60, 60)
    assert body["elements"]["count"] == 60
    assert len(body["elements"]["results"]) == 50  # paged
    page2 = client.get(f"/api/v1/arrays/{body['id']}/?page=2").json()
    assert [e["index"] for e in page2["elements"]["results"]] == list(range(50, 60))


@pytest.mark.parametrize(
    ("extra", "field", "needle"),
    [
        ({"array": {"count": 11}}, "array", "limit of 10 elements"),
        ({"sweep": {}}, "sweep", "non-empty grid"),
        ({"sweep": {"a": [1, 2, 3], "b": [1, 2, 3, 4]}}, "sweep", "3 × 4 = 12"),
        ({"array": {"count": 2}, "sweep": {"lr": [1]}}, "sweep", "not both"),
        ({"array": {"count": 2}, "env": {"ARRAY_INDEX": "7"}}, "env", "ARRAY_INDEX"),
        ({"array": {"count": 2}, "name": "x" * 39}, "name", "at most 38 characters"),
        ({"array": {"count": 2}, "gpus": 99}, "gpus", ""),
    ],
)
def test_bad_arrays_answer_400_naming_the_field_and_store_nothing(
    personas, api_client_for, extra, field, needle
):
    from jobs.models import Job, JobArray

    personas.project_a.max_array_elements = 10
    personas.project_a.save()
    response = api_client_for(personas.member).post(URL, payload(**extra), format="json")
    assert response.status_code == 400, response.json()
    assert needle in " ".join(response.json()["errors"][field])
    assert not Job.objects.exists()
    assert not JobArray.objects.exists()


def test_tenancy_viewers_cannot_submit_or_cancel_outsiders_see_nothing(personas, api_client_for):
    viewer = api_client_for(personas.viewer)
    assert viewer.post(URL, payload(array={"count": 2}), format="json").status_code == 403
    body = api_client_for(personas.member).post(URL, payload(array={"count": 2}), format="json")
    array_id = body.json()["id"]
    assert viewer.get(f"/api/v1/arrays/{array_id}/").status_code == 200
    assert viewer.post(f"/api/v1/arrays/{array_id}/cancel/").status_code == 403
    outsider = api_client_for(personas.outsider)
    assert outsider.get(f"/api/v1/arrays/{array_id}/").status_code == 404
    assert outsider.post(f"/api/v1/arrays/{array_id}/cancel/").status_code == 404
    assert outsider.get("/api/v1/arrays/").json()["count"] == 0


def _finish(job, state):
    from jobs.services import job_transition

    job_transition(job, to=state, expected_from=job.state, reason="Test", source="test")


def test_cancel_cancels_the_rest_and_keeps_finished_elements(personas, api_client_for):
    from django.utils import timezone

    from jobs.models import Job

    client = api_client_for(personas.member)
    array_id = client.post(URL, payload(array={"count": 5}), format="json").json()["id"]
    jobs = list(Job.objects.filter(array_id=array_id).order_by("array_index"))
    _finish(jobs[0], "succeeded")
    Job.objects.filter(pk=jobs[1].pk).update(applied_at=timezone.now())  # in the cluster
    response = client.post(f"/api/v1/arrays/{array_id}/cancel/")
    assert response.status_code == 200, response.json()
    counts = response.json()["counts"]
    assert (counts["succeeded"], counts["cancelled"], counts["active"]) == (1, 4, 0)
    # Only the element that reached the cluster has objects to delete.
    assert list(Job.objects.filter(cleanup_pending=True).values_list("pk", flat=True)) == [
        jobs[1].pk
    ]
    assert Job.objects.get(pk=jobs[2].pk).events.last().to_state == "cancelled"
    again = client.post(f"/api/v1/arrays/{array_id}/cancel/")
    assert again.status_code == 409
    assert "no active element" in again.json()["detail"]


def test_failed_elements_are_resubmitted_alone(personas, api_client_for):
    from jobs.models import Job

    client = api_client_for(personas.member)
    body = client.post(URL, payload(name="sw", sweep={"seed": [1, 2, 3]}), format="json").json()
    jobs = list(Job.objects.filter(array_id=body["id"]).order_by("array_index"))
    _finish(jobs[0], "succeeded")
    _finish(jobs[1], "failed")
    _finish(jobs[2], "failed")
    one = client.post(f"/api/v1/arrays/{body['id']}/resubmit-failed/", {"index": 2}, format="json")
    assert one.status_code == 200, one.json()
    counts = one.json()["counts"]
    assert (counts["succeeded"], counts["failed"], counts["submitted"]) == (1, 1, 1)
    retry = Job.objects.get(array_id=body["id"], array_index=2, superseded=False)
    assert retry.pk != jobs[2].pk
    assert (retry.name, retry.params, retry.env["SWEEP_SEED"]) == ("sw-2", {"seed": 3}, "3")
    assert retry.events.get().reason == "Resubmitted"
    assert Job.objects.get(pk=jobs[2].pk).superseded
    rest = client.post(f"/api/v1/arrays/{body['id']}/resubmit-failed/")
    assert rest.json()["counts"]["failed"] == 0
    assert client.post(f"/api/v1/arrays/{body['id']}/resubmit-failed/").status_code == 409


def test_the_array_page_lists_elements_with_states_and_cancels(
    personas, api_client_for, web_client_for
):
    from jobs.models import Job

    body = (
        api_client_for(personas.member)
        .post(URL, payload(name="pg", sweep={"lr": [0.1, 0.2]}), format="json")
        .json()
    )
    _finish(Job.objects.get(array_id=body["id"], array_index=0), "failed")
    web = web_client_for(personas.member)
    page = web.get(f"/jobs/arrays/{body['id']}/").content.decode()
    assert 'data-index="0" data-state="failed"' in page
    assert 'data-index="1" data-state="submitted"' in page
    assert "lr=0.2" in page
    assert "Cancel the rest" in page
    assert 'hx-confirm="Cancel the 1 unfinished' in page
    element = Job.objects.get(array_id=body["id"], array_index=1)
    assert f'href="/jobs/arrays/{body["id"]}/"' in web.get(f"/jobs/{element.pk}/").content.decode()
    response = web.post(f"/jobs/arrays/{body['id']}/cancel/")
    assert response.status_code == 302
    assert Job.objects.get(array_id=body["id"], array_index=1).state == "cancelled"
    viewer_page = web_client_for(personas.viewer).get(f"/jobs/arrays/{body['id']}/")
    assert "Cancel the rest" not in viewer_page.content.decode()
    assert web_client_for(personas.outsider).get(f"/jobs/arrays/{body['id']}/").status_code == 404
