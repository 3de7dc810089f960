"""Member limits and quota requests through the API: bad input is a 400 naming the field and
stores nothing; staff decide requests; a refusal needs a note."""

import datetime

import pytest

from governance.models import MemberGpuLimit, QuotaRequest

pytestmark = pytest.mark.django_db


def _in_days(days: int) -> str:
    return str(datetime.datetime.now(tz=datetime.UTC).date() + datetime.timedelta(days=days))


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"max_gpus": -1}, "max_gpus", "at least 0"),
        ({"max_gpus": "many"}, "max_gpus", "not a whole number"),
        ({"pool": "a100"}, "pool", "no quota in pool 'a100'"),
        ({"user": "oscar"}, "user", "not a member"),
    ],
)
def test_a_bad_member_limit_is_a_400_naming_the_field(personas, api_client_for, body, field, words):
    payload = {"project": "alpha", "pool": "h100", "max_gpus": 4, **body}
    response = api_client_for(personas.admin).post("/api/v1/member-limits/", payload, format="json")
    assert response.status_code == 400, response.content
    assert words in response.json()["errors"][field][0]
    assert not MemberGpuLimit.objects.exists()


def test_setting_a_member_limit_again_changes_it(personas, api_client_for):
    client = api_client_for(personas.admin)
    body = {"project": "alpha", "pool": "h100", "user": "bob", "max_gpus": 4}
    assert client.post("/api/v1/member-limits/", body, format="json").status_code == 201
    body["max_gpus"] = 0
    answer = client.post("/api/v1/member-limits/", body, format="json")
    assert answer.json()["max_gpus"] == 0
    assert MemberGpuLimit.objects.get().max_gpus == 0


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"gpus": 40}, "gpus", "at most 24 more"),  # 32 GPUs, 8 guaranteed to alpha
        ({"gpus": 0}, "gpus", "at least 1"),
        ({"until": _in_days(-1)}, "until", "in the past"),
        ({"until": _in_days(400)}, "until", "more than 90 days"),
        ({"until": "next week"}, "until", "not a date"),
        ({"pool": "a100"}, "pool", "no quota in pool"),
        ({"reason": " "}, "reason", "Say why"),
    ],
)
def test_a_bad_quota_request_is_a_400_naming_the_field(
    personas, api_client_for, body, field, words
):
    payload = {"project": "alpha", "pool": "h100", "gpus": 4, "until": _in_days(7)}
    payload.update({"reason": "deadline", **body})
    response = api_client_for(personas.admin).post(
        "/api/v1/quota-requests/", payload, format="json"
    )
    assert response.status_code == 400, response.content
    assert words in response.json()["errors"][field][0]
    assert not QuotaRequest.objects.exists()


def test_staff_approve_and_the_quota_rises_refusals_need_a_note(personas, api_client_for):
    from quotas.models import ProjectQuota

    payload = {"project": "alpha", "pool": "h100", "gpus": 4, "until": _in_days(7)}
    admin = api_client_for(personas.admin)
    first = admin.post("/api/v1/quota-requests/", {**payload, "reason": "a"}, format="json")
    second = admin.post("/api/v1/quota-requests/", {**payload, "reason": "b"}, format="json")
    staff = api_client_for(personas.staff)

    approved = staff.post(f"/api/v1/quota-requests/{first.json()['id']}/approve/", {})
    assert approved.status_code == 200
    assert (approved.json()["status"], approved.json()["granted"]) == ("approved", 4)
    quota = ProjectQuota.objects.get(project=personas.project_a, pool=personas.pool)
    assert quota.nominal == 12
    assert quota.borrowing_limit == 4  # unchanged
    again = staff.post(f"/api/v1/quota-requests/{first.json()['id']}/approve/", {})
    assert again.status_code == 400
    assert "already decided" in again.json()["errors"]["status"][0]

    url = f"/api/v1/quota-requests/{second.json()['id']}/refuse/"
    assert "Say why" in staff.post(url, {}).json()["errors"]["note"][0]
    refused = staff.post(url, {"note": "the pool is booked"})
    assert (refused.json()["status"], refused.json()["note"]) == ("refused", "the pool is booked")
    assert ProjectQuota.objects.get(pk=quota.pk).nominal == 12
