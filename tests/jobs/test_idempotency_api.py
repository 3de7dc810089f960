"""Idempotent submission: POST /api/v1/jobs/ with an Idempotency-Key returns the first job on a
repeat (200), refuses the key with another body (422) or a malformed key (400), keeps users'
keys apart, covers arrays, settles concurrent duplicates on the unique constraint, and forgets
keys after the retention."""

import threading
from datetime import timedelta

import pytest

URL = "/api/v1/jobs/"
HEADER = "Idempotency-Key"


def payload(**overrides):
    body = {
        "project": "alpha",
        "kind": "single",
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["python", "train.py"],
        "gpus": 1,
    }
    body.update(overrides)
    return body


def post(client, body, key=None, **params):
    headers = {HEADER: key} if key is not None else {}
    url = URL + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
    return client.post(url, body, format="json", headers=headers)


@pytest.mark.django_db
def test_a_repeat_with_the_same_key_and_body_returns_the_first_job_with_200(
    personas, api_client_for
):
    from jobs.models import Job

    client = api_client_for(personas.member)
    first = post(client, payload(), key="6f1c3c1e-submit-1")
    assert first.status_code == 201, first.json()
    again = post(client, payload(), key="6f1c3c1e-submit-1")
    assert again.status_code == 200, again.json()
    assert again["Idempotent-Replayed"] == "true"
    body = again.json()
    assert body["id"] == first.json()["id"]
    assert body["name"] == first.json()["name"]  # the generated name, not a new one
    assert body["events"][0]["reason"] == "Submitted"
    assert Job.objects.filter(project=personas.project_a).count() == 1
    # Key order and spacing of the body do not make it another request.
    reordered = dict(reversed(list(payload().items())))
    assert post(client, reordered, key="6f1c3c1e-submit-1").status_code == 200


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_a_422_naming_the_header(personas, api_client_for):
    from jobs.models import Job

    client = api_client_for(personas.member)
    assert post(client, payload(), key="k-1").status_code == 201
    other = post(client, payload(gpus=2), key="k-1")
    assert other.status_code == 422
    body = other.json()
    assert list(body["errors"]) == [HEADER]
    assert "different request" in body["errors"][HEADER][0]
    assert body["detail"].startswith(HEADER)
    assert Job.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "tab\there", "schlüssel"],
    ids=["empty", "too-long", "control-character", "not-ascii"],
)
def test_a_malformed_key_is_a_400_naming_the_header(personas, api_client_for, key):
    from jobs.models import Job, SubmissionKey

    response = post(api_client_for(personas.member), payload(), key=key)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [HEADER]
    assert "1 to 255 printable ASCII characters" in response.json()["errors"][HEADER][0]
    assert not Job.objects.exists()
    assert not SubmissionKey.objects.exists()


@pytest.mark.django_db
def test_the_longest_key_is_accepted(personas, api_client_for):
    client = api_client_for(personas.member)
    key = "k" * 255
    assert post(client, payload(), key=key).status_code == 201
    assert post(client, payload(), key=key).status_code == 200


@pytest.mark.django_db
def test_another_users_same_key_is_independent(personas, api_client_for):
    from jobs.models import Job

    mine = post(api_client_for(personas.member), payload(), key="shared-key")
    theirs = post(api_client_for(personas.admin), payload(gpus=2), key="shared-key")
    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]
    assert theirs.json()["submitter"] == "alice"
    assert Job.objects.count() == 2
    # And each user's repeat finds their own job.
    again = post(api_client_for(personas.admin), payload(gpus=2), key="shared-key")
    assert again.json()["id"] == theirs.json()["id"]


@pytest.mark.django_db
def test_without_a_key_every_post_is_a_new_job(personas, api_client_for):
    from jobs.models import Job

    client = api_client_for(personas.member)
    assert post(client, payload()).status_code == 201
    assert post(client, payload()).status_code == 201
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_refused_submission_does_not_use_up_its_key(personas, api_client_for):
    client = api_client_for(personas.member)
    refused = post(client, payload(gpus=64), key="retry-me")
    assert refused.status_code == 400
    assert "gpus" in refused.json()["errors"]
    assert post(client, payload(), key="retry-me").status_code == 201


@pytest.mark.django_db
def test_a_dry_run_ignores_the_key(personas, api_client_for):
    from jobs.models import SubmissionKey

    client = api_client_for(personas.member)
    dry = post(client, payload(), key="dry", dry_run="true")
    assert dry.status_code == 200
    assert dry.json()["valid"] is True
    assert not SubmissionKey.objects.exists()
    assert post(client, payload(), key="dry").status_code == 201


@pytest.mark.django_db
def test_arrays_repeat_and_refuse_like_jobs(personas, api_client_for):
    from jobs.models import Job, JobArray

    client = api_client_for(personas.member)
    body = payload(name="sweep", sweep={"lr": [0.1, 0.01]}, parallelism=1)
    first = post(client, body, key="array-key")
    assert first.status_code == 201, first.json()
    again = post(client, body, key="array-key")
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["count"] == 2
    assert [e["name"] for e in again.json()["elements"]["results"]] == ["sweep-0", "sweep-1"]
    other = post(client, {**body, "parallelism": 2}, key="array-key")
    assert other.status_code == 422
    assert list(other.json()["errors"]) == [HEADER]
    assert JobArray.objects.count() == 1
    assert Job.objects.count() == 2


@pytest.mark.django_db
def test_a_concurrent_duplicate_loses_on_the_unique_key_and_gets_the_winners_job(personas):
    """The second of two racing requests passed the look-up before the first committed: its
    insert of the key fails, its job rolls back, and it answers with the first one's job."""
    from jobs.idempotency import AlreadySubmitted, parse_idempotency_key, record_submission
    from jobs.models import Job
    from jobs.services import job_submit

    body = payload()
    key = parse_idempotency_key("raced", body=body)
    data = {k: v for k, v in body.items() if k != "project"}
    winner = job_submit(actor=personas.member, project="alpha", data=dict(data)).job
    record_submission(user=personas.member, key=key, job=winner)  # committed by the winner
    with pytest.raises(AlreadySubmitted) as raised:
        job_submit(actor=personas.member, project="alpha", data=dict(data), idempotency=key)
    assert raised.value.previous.job_id == winner.pk
    assert list(Job.objects.values_list("pk", flat=True)) == [winner.pk]


@pytest.mark.django_db(transaction=True)
def test_racing_identical_requests_create_one_job_and_no_server_error(personas):
    """Eight clients send the same keyed submission at once, each on its own connection."""
    from django.db import connection
    from rest_framework.test import APIClient

    from jobs.models import Job

    clients = []
    for _ in range(8):
        client = APIClient()
        client.force_login(personas.member)
        clients.append(client)
    start = threading.Barrier(len(clients))
    statuses: list[int] = []
    ids: list[int] = []
    lock = threading.Lock()

    def submit(client):
        try:
            start.wait()
            response = post(client, payload(name="once"), key="burst-key")
            with lock:
                statuses.append(response.status_code)
                if response.status_code in (200, 201):
                    ids.append(response.json()["id"])
        finally:
            connection.close()

    threads = [threading.Thread(target=submit, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 7 + [201], statuses
    assert len(set(ids)) == 1
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_keys_expire_after_the_retention(personas, api_client_for, settings):
    from django.utils import timezone

    from jobs.idempotency import expire_submission_keys
    from jobs.models import Job, SubmissionKey

    settings.PORTAL_IDEMPOTENCY_KEY_HOURS = 24
    client = api_client_for(personas.member)
    first = post(client, payload(), key="old-key").json()
    fresh = post(client, payload(gpus=2), key="new-key").json()
    SubmissionKey.objects.filter(key="old-key").update(
        created_at=timezone.now() - timedelta(hours=25)
    )
    # Expired but not yet swept: the key is free again, for any body.
    again = post(client, payload(gpus=3), key="old-key")
    assert again.status_code == 201
    assert again.json()["id"] != first["id"]
    SubmissionKey.objects.filter(key="old-key").update(
        created_at=timezone.now() - timedelta(hours=30)
    )
    assert expire_submission_keys() == 1
    assert list(SubmissionKey.objects.values_list("key", flat=True)) == ["new-key"]
    assert Job.objects.filter(pk=fresh["id"]).exists()  # expiry forgets keys, never jobs


@pytest.mark.django_db
def test_the_schema_documents_the_header_and_the_422(api_client_for, personas):
    schema = api_client_for(personas.member).get("/api/schema/?format=json").json()
    create = schema["paths"]["/api/v1/jobs/"]["post"]
    header = next(p for p in create["parameters"] if p["name"] == HEADER)
    assert header["in"] == "header"
    assert header["schema"]["maxLength"] == 255
    assert "422" in create["responses"]
