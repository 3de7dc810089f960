"""The settings page and API (per event and channel, the waiting limit, webhook endpoints with
the SSRF guard and the secret shown once), and the producers of a long wait and of a decided
quota request, delivered through the real local SMTP server."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

PUBLIC_URL = "https://8.8.8.8/hooks/team"


def test_the_page_saves_each_event_and_channel_and_the_waiting_limit(personas, web_client_for):
    from notifications.selectors import enabled_channels, stored_waiting_minutes

    client = web_client_for(personas.member)
    page = client.get("/notifications/").content.decode()
    assert 'id="notification-preferences"' in page
    assert "A job of mine has waited longer than my limit" in page
    boxes = {
        f"pref__{event}__{channel}": "on"
        for event in ("job.ended", "job.waiting", "gpu.idle", "quota_request.decided")
        for channel in ("email", "webhook")
    }
    del boxes["pref__job.ended__webhook"]  # unticked
    response = client.post("/notifications/", {**boxes, "waiting_minutes": "45"})
    assert response.status_code == 302
    assert enabled_channels(personas.member, "job.ended") == {"email"}
    assert enabled_channels(personas.member, "job.waiting") == {"email", "webhook"}
    assert stored_waiting_minutes(personas.member) == 45

    bad = client.post("/notifications/", {**boxes, "waiting_minutes": "0"})
    assert bad.status_code == 400
    assert "greater than or equal to 1" in bad.content.decode()
    assert stored_waiting_minutes(personas.member) == 45


def test_webhooks_on_the_page_refuse_private_addresses_and_show_the_secret_once(
    personas, web_client_for
):
    from notifications.models import WebhookEndpoint

    client = web_client_for(personas.member)
    refused = client.post(
        "/notifications/webhooks/",
        {"name": "local", "url": "http://127.0.0.1:8080/", "format": "generic"},
    )
    assert refused.status_code == 400
    assert "non-public address" in refused.content.decode()
    assert not WebhookEndpoint.objects.exists()

    added = client.post(
        "/notifications/webhooks/", {"name": "team", "url": PUBLIC_URL, "format": "slack"}
    )
    assert added.status_code == 200
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.secret in added.content.decode()
    assert endpoint.secret not in client.get("/notifications/").content.decode()

    assert client.post(f"/notifications/webhooks/{endpoint.pk}/toggle/").status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.active is False
    # Another user's endpoint is not found.
    other = web_client_for(personas.admin)
    assert other.post(f"/notifications/webhooks/{endpoint.pk}/delete/").status_code == 404
    assert client.post(f"/notifications/webhooks/{endpoint.pk}/delete/").status_code == 302
    assert not WebhookEndpoint.objects.exists()


def test_the_api_reads_and_changes_settings_and_names_bad_fields(personas, api_client_for):
    client = api_client_for(personas.member)
    body = client.get("/api/v1/notifications/settings/").json()
    assert body["preferences"]["job.ended"] == {"email": True, "webhook": True}
    assert body["waiting_minutes"] is None

    changed = client.post(
        "/api/v1/notifications/settings/",
        {"preferences": {"gpu.idle": {"email": False}}, "waiting_minutes": 90},
        format="json",
    )
    assert changed.status_code == 200, changed.json()
    assert changed.json()["preferences"]["gpu.idle"] == {"email": False, "webhook": True}
    assert changed.json()["waiting_minutes"] == 90

    for payload, field in [
        ({"preferences": {"job.lost": {"email": True}}}, "preferences"),
        ({"preferences": {"job.ended": {"sms": True}}}, "preferences"),
        ({"waiting_minutes": 0}, "waiting_minutes"),
    ]:
        bad = client.post("/api/v1/notifications/settings/", payload, format="json")
        assert bad.status_code == 400, payload
        assert field in bad.json()["errors"], bad.json()


def test_the_api_refuses_a_private_webhook_and_shows_the_secret_only_at_create(
    personas, api_client_for
):
    client = api_client_for(personas.member)
    refused = client.post(
        "/api/v1/notifications/webhooks/",
        {"name": "meta", "url": "http://169.254.169.254/latest/"},
        format="json",
    )
    assert refused.status_code == 400
    assert "url" in refused.json()["errors"]
    internal = client.post(
        "/api/v1/notifications/webhooks/",
        {"name": "x", "url": "http://10.0.0.5/", "allow_internal": True},
        format="json",
    )
    assert internal.status_code == 400
    assert "allow_internal" in internal.json()["errors"]

    created = client.post(
        "/api/v1/notifications/webhooks/", {"name": "team", "url": PUBLIC_URL}, format="json"
    )
    assert created.status_code == 201, created.json()
    assert len(created.json()["secret"]) > 20
    detail = client.get(f"/api/v1/notifications/webhooks/{created.json()['id']}/").json()
    assert "secret" not in detail
    assert detail["format"] == "generic"


def test_a_job_waiting_past_the_limit_is_told_once_with_the_explanation(
    personas, make_job, smtp_server, run_notification_tasks, django_capture_on_commit_callbacks
):
    from jobs.models import Job
    from notifications.producers import announce_waiting_jobs
    from notifications.services import set_waiting_minutes

    set_waiting_minutes(personas.member, 30)
    waiting = make_job(
        state="queued", explanation="Waiting for 4 GPUs in pool h100: the project's quota is used."
    )
    fresh = make_job(state="queued")
    Job.objects.filter(pk=waiting.pk).update(
        state_changed_at=timezone.now() - datetime.timedelta(minutes=40)
    )
    Job.objects.filter(pk=fresh.pk).update(
        state_changed_at=timezone.now() - datetime.timedelta(minutes=10)
    )
    for _ in range(2):  # the periodic sweep runs again: nothing new
        with django_capture_on_commit_callbacks(execute=True):
            announce_waiting_jobs()
        run_notification_tasks()

    assert len(smtp_server.messages) == 1
    _, mail = smtp_server.messages[0]
    assert f"Job {waiting.pk}" in mail["Subject"]
    body = mail.get_payload(decode=True).decode()
    assert "the project's quota is used" in body
    assert "your limit: 30" in body


@pytest.mark.parametrize("decision", ["approve", "refuse"])
def test_a_decided_quota_request_mails_the_requester(
    personas,
    smtp_server,
    run_notification_tasks,
    django_capture_on_commit_callbacks,
    api_client_for,
    decision,
):
    from governance import services

    request = services.quota_request_create(
        actor=personas.admin,
        project="alpha",
        pool="h100",
        gpus=2,
        until=timezone.localdate() + datetime.timedelta(days=3),
        reason="paper deadline",
    )
    decide = getattr(services, f"quota_request_{decision}")
    with django_capture_on_commit_callbacks(execute=True):
        decide(actor=personas.staff, request=request, note="see the note")
    run_notification_tasks()

    assert len(smtp_server.messages) == 1
    recipients, mail = smtp_server.messages[0]
    assert recipients == [personas.admin.email]
    deliveries = api_client_for(personas.admin).get("/api/v1/notifications/deliveries/").json()
    assert [(d["channel"], d["status"]) for d in deliveries["results"]] == [("email", "sent")]
    assert (
        api_client_for(personas.member).get("/api/v1/notifications/deliveries/").json()["results"]
        == []
    )
    word = "approved" if decision == "approve" else "refused"
    assert mail["Subject"].startswith(f"Quota request {word}")
    assert "see the note" in mail.get_payload(decode=True).decode()
