"""A job's end reaches the user once by e-mail (a real SMTP server) and once per webhook (a
local HTTP receiver) with a signature that verifies; repeats are deduplicated, bursts become a
digest, and an endpoint that hangs holds up nothing else."""

import json
import threading

import pytest

pytestmark = pytest.mark.django_db


def _end_job(job, to="succeeded"):
    from jobs.services import job_transition

    job_transition(job, to=to, expected_from=job.state, reason="Completed", source="watcher")


def test_a_job_end_sends_one_email_and_one_signed_webhook(
    make_job,
    personas,
    smtp_server,
    receivers,
    internal_webhook,
    run_notification_tasks,
    django_capture_on_commit_callbacks,
):
    from notifications.models import Delivery
    from notifications.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

    receiver = receivers()
    hook = internal_webhook(receiver.url)
    job = make_job(state="running", logs_tail="epoch 9 loss 0.12\nsaved model.pt")
    with django_capture_on_commit_callbacks(execute=True):
        _end_job(job)
    run_notification_tasks()
    # A second end report (the watcher and a resync racing) and a replayed task tell nothing new.
    from notifications.producers import announce_job_end

    with django_capture_on_commit_callbacks(execute=True):
        announce_job_end(job.pk)
    run_notification_tasks()

    assert len(smtp_server.messages) == 1
    recipients, mail = smtp_server.messages[0]
    assert recipients == [personas.member.email]
    assert mail["Subject"] == f"Job {job.pk} ({job.name}) succeeded"
    body = mail.get_payload(decode=True).decode()
    assert "saved model.pt" in body
    assert "GPU efficiency" in body

    assert len(receiver.requests) == 1
    request = receiver.requests[0]
    assert verify(
        hook.secret,
        request.headers[TIMESTAMP_HEADER],
        request.body,
        request.headers[SIGNATURE_HEADER],
    )
    assert not verify(
        "another secret",
        request.headers[TIMESTAMP_HEADER],
        request.body,
        request.headers[SIGNATURE_HEADER],
    )
    sent = json.loads(request.body)
    assert sent["event"] == "job.ended"
    assert sent["data"]["job"]["id"] == job.pk
    assert sent["data"]["job"]["state"] == "succeeded"
    assert "saved model.pt" in sent["data"]["log_tail"]
    assert sorted(Delivery.objects.values_list("channel", "status")) == [
        ("email", "sent"),
        ("webhook", "sent"),
    ]


def test_slack_format_posts_text(
    make_job,
    receivers,
    internal_webhook,
    run_notification_tasks,
    django_capture_on_commit_callbacks,
):
    receiver = receivers()
    internal_webhook(receiver.url, format="slack")
    job = make_job(state="running")
    with django_capture_on_commit_callbacks(execute=True):
        _end_job(job, to="failed")
    run_notification_tasks()
    assert len(receiver.requests) == 1
    sent = json.loads(receiver.requests[0].body)
    assert list(sent) == ["text"]
    assert f"Job {job.pk} ({job.name}) failed" in sent["text"]


def test_a_cancelled_job_is_not_announced(
    make_job, smtp_server, run_notification_tasks, django_capture_on_commit_callbacks
):
    job = make_job(state="running")
    with django_capture_on_commit_callbacks(execute=True):
        _end_job(job, to="cancelled")
    assert run_notification_tasks() == []
    assert smtp_server.messages == []


def test_notify_twice_with_one_key_tells_once(
    personas, smtp_server, run_notification_tasks, django_capture_on_commit_callbacks
):
    from notifications.services import notify

    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            notify(
                "job.ended",
                user=personas.member,
                subject="Job 7 succeeded",
                text="done",
                payload={},
                dedupe_key="job.ended:7",
            )
    run_notification_tasks()
    assert len(smtp_server.messages) == 1


def test_a_disabled_channel_sends_nothing(
    personas,
    smtp_server,
    receivers,
    internal_webhook,
    run_notification_tasks,
    django_capture_on_commit_callbacks,
):
    from notifications.services import notify, set_preferences

    receiver = receivers()
    internal_webhook(receiver.url)
    set_preferences(personas.member, {("job.ended", "email"): False})
    with django_capture_on_commit_callbacks(execute=True):
        notify(
            "job.ended",
            user=personas.member,
            subject="s",
            text="t",
            payload={},
            dedupe_key="job.ended:1",
        )
    run_notification_tasks()
    assert smtp_server.messages == []
    assert len(receiver.requests) == 1


def test_a_burst_becomes_one_digest(
    personas, smtp_server, settings, run_notification_tasks, django_capture_on_commit_callbacks
):
    from datetime import timedelta

    from django.utils import timezone

    from notifications.models import Notification, UserSettings
    from notifications.services import notify

    settings.PORTAL_NOTIFY_DIGEST_THRESHOLD = 5
    for n in range(12):
        with django_capture_on_commit_callbacks(execute=True):
            notify(
                "job.ended",
                user=personas.member,
                subject=f"Job {n} succeeded",
                text="ok",
                payload={"job": {"id": n}},
                dedupe_key=f"job.ended:{n}",
            )
    run_notification_tasks()
    assert len(smtp_server.messages) == 5  # the rest waits for the end of the window
    # The window ends: the held seven go out as one message.
    UserSettings.objects.filter(user=personas.member).update(
        digest_due_at=timezone.now() - timedelta(seconds=1)
    )
    from notifications.tasks import flush_digest

    with django_capture_on_commit_callbacks(execute=True):
        flush_digest.apply(args=(personas.member.pk,))
    run_notification_tasks()
    assert len(smtp_server.messages) == 6
    digest = smtp_server.messages[-1][1]
    assert digest["Subject"] == "GPU Portal: 7 notifications"
    text = digest.get_payload(decode=True).decode()
    assert all(f"Job {n} succeeded" in text for n in range(5, 12))
    assert Notification.objects.filter(state="digested").count() == 7


@pytest.mark.django_db(transaction=True)  # the hanging delivery runs in a thread of its own
def test_an_endpoint_that_hangs_delays_nothing_else(
    make_job,
    personas,
    smtp_server,
    receivers,
    internal_webhook,
    settings,
    run_enqueued_tasks,
    django_capture_on_commit_callbacks,
):
    """The hanging endpoint's delivery runs first (as a busy worker would pick it up); the
    e-mail and the other webhook arrive while it still hangs, and the job's transition only
    enqueued work."""
    from django.db import connection

    from notifications.models import Delivery
    from notifications.tasks import deliver

    settings.PORTAL_NOTIFY_MAX_ATTEMPTS = 1
    settings.PORTAL_NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 30
    hanging = receivers(hold=True)
    healthy = receivers()
    internal_webhook(hanging.url, name="a-hanging")
    internal_webhook(healthy.url, name="b-healthy")
    job = make_job(state="running")

    with django_capture_on_commit_callbacks(execute=True):
        _end_job(job)
    # The job's processing is done: nothing was sent from it.
    assert (hanging.requests, healthy.requests, smtp_server.messages) == ([], [], [])
    # (the deliveries' own messages are dropped: this test runs them itself, below)
    run_enqueued_tasks("notifications.tasks.job_ended", "notifications.tasks.dispatch")
    deliveries = list(Delivery.objects.order_by("id"))
    slow = next(d for d in deliveries if d.endpoint and d.endpoint.url == hanging.url)
    others = [d for d in deliveries if d.pk != slow.pk]

    def deliver_in_thread():
        try:
            deliver.apply(args=(slow.pk,))
        finally:
            connection.close()  # this thread's own connection

    worker = threading.Thread(target=deliver_in_thread)
    worker.start()
    assert hanging.arrived.wait(30)
    for delivery in others:
        deliver.apply(args=(delivery.pk,))
    # Both arrived while the hanging endpoint still holds its request.
    assert not hanging.released.is_set()
    assert len(smtp_server.messages) == 1
    assert len(healthy.requests) == 1
    hanging.release()
    worker.join(60)
    assert set(
        Delivery.objects.filter(pk__in=[d.pk for d in others]).values_list("status", flat=True)
    ) == {"sent"}
