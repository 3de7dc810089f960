"""Writes for notifications: `notify` (the entry point for every producer), dispatching a
notification to the user's channels or into a digest, delivering one message, and the
preferences and webhook endpoints a user keeps.

Nothing here runs inside a caller's job processing: `notify` stores one row and enqueues a task
after the caller's transaction commits; every e-mail and webhook POST is a task of its own."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.utils import timezone

from audit.services import created, diff, record, removed
from notifications import address_guard, webhooks
from notifications.events import CHANNELS, EMAIL, EVENTS, WEBHOOK
from notifications.models import (
    Delivery,
    DeliveryStatus,
    Notification,
    NotificationState,
    Preference,
    UserSettings,
    WebhookEndpoint,
    WebhookFormat,
)
from notifications.selectors import enabled_channels
from portal.celery import app as celery_app

log = logging.getLogger(__name__)

# Sent by name: the tasks module sits above the services.
DISPATCH_TASK = "notifications.tasks.dispatch"
DELIVER_TASK = "notifications.tasks.deliver"
FLUSH_DIGEST_TASK = "notifications.tasks.flush_digest"


def _send_task(name: str, args: tuple, *, countdown: float | None = None) -> None:
    # A broker outage must not fail the caller; the periodic sweep dispatches what is pending.
    # (PORTAL_NOTIFY_QUEUE routes the tasks: CELERY_TASK_ROUTES in portal/settings.py)
    options: dict[str, Any] = {}
    if countdown:
        options["countdown"] = countdown
    try:
        celery_app.send_task(name, args=args, **options)
    except Exception as exc:  # the broker client raises many types; the sweep is the safety net
        log.warning("could not enqueue %s%s: %s; the sweep will", name, args, exc)


def notify(
    event: str,
    *,
    user: Any,
    subject: str,
    text: str,
    payload: dict,
    dedupe_key: str,
    project: Any = None,
) -> None:
    """Tell `user` about `event` on every channel they enabled for it, after the surrounding
    transaction commits. The same `dedupe_key` (e.g. "job.ended:812") is told once per user,
    however often this is called. Many notifications within the digest window become one digest
    message per channel."""
    if event not in EVENTS:
        raise ValueError(f"unknown notification event {event!r}; one of {', '.join(EVENTS)}")
    if user is None or not getattr(user, "is_active", False):
        return
    try:
        with transaction.atomic():
            notification = Notification.objects.create(
                user=user,
                event=event,
                dedupe_key=dedupe_key[:200],
                project=project,
                subject=subject[:300],
                text=text,
                payload=payload,
            )
    except IntegrityError:
        return  # told already (or being told by a concurrent call)
    transaction.on_commit(lambda: _send_task(DISPATCH_TASK, (notification.pk,)))


def _digest_window() -> timedelta:
    return timedelta(seconds=settings.PORTAL_NOTIFY_DIGEST_WINDOW_SECONDS)


def _user_settings_locked(user_id: int) -> UserSettings:
    UserSettings.objects.get_or_create(user_id=user_id)
    return UserSettings.objects.select_for_update().get(user_id=user_id)


def dispatch(notification_id: int) -> str:
    """Send a stored notification on its own, hold it for the user's digest (when the user had
    PORTAL_NOTIFY_DIGEST_THRESHOLD messages within the window already, or a digest is being
    gathered), or mute it (no channel enabled). Returns the new state; idempotent."""
    user_id = (
        Notification.objects.filter(pk=notification_id).values_list("user_id", flat=True).first()
    )
    if user_id is None:
        return "gone"
    now = timezone.now()
    with transaction.atomic():
        state = _user_settings_locked(user_id)  # one dispatcher per user at a time
        notification = (
            Notification.objects.select_related("user")
            .filter(pk=notification_id, state=NotificationState.PENDING)
            .first()
        )
        if notification is None:
            return "done"
        targets = _targets(notification.user, notification.event)
        if not targets:
            notification.state = NotificationState.MUTED
        elif state.digest_due_at is not None:
            notification.state = NotificationState.HELD
        elif (
            Notification.objects.filter(
                user_id=user_id,
                state__in=(NotificationState.SENT, NotificationState.DIGESTED),
                created_at__gte=now - _digest_window(),
            ).count()
            >= settings.PORTAL_NOTIFY_DIGEST_THRESHOLD
        ):
            notification.state = NotificationState.HELD
            state.digest_due_at = now + _digest_window()
            state.save(update_fields=["digest_due_at"])
            countdown = settings.PORTAL_NOTIFY_DIGEST_WINDOW_SECONDS
            transaction.on_commit(
                lambda: _send_task(FLUSH_DIGEST_TASK, (user_id,), countdown=countdown)
            )
        else:
            notification.state = NotificationState.SENT
            for channel, endpoint in targets:
                _create_delivery(
                    notification.user,
                    channel,
                    endpoint,
                    subject=notification.subject,
                    text=notification.text,
                    payload={"event": notification.event, **notification.payload},
                    notifications=[notification],
                )
        notification.save(update_fields=["state"])
        return notification.state


def _targets(user: Any, event: str) -> list[tuple[str, WebhookEndpoint | None]]:
    channels = enabled_channels(user, event)
    out: list[tuple[str, WebhookEndpoint | None]] = []
    if EMAIL in channels and user.email:
        out.append((EMAIL, None))
    if WEBHOOK in channels:
        out += [(WEBHOOK, e) for e in WebhookEndpoint.objects.filter(user=user, active=True)]
    return out


def _create_delivery(
    user: Any,
    channel: str,
    endpoint: WebhookEndpoint | None,
    *,
    subject: str,
    text: str,
    payload: dict,
    notifications: list[Notification],
    digest: bool = False,
) -> Delivery:
    delivery = Delivery.objects.create(
        user=user,
        channel=channel,
        endpoint=endpoint,
        subject=subject[:300],
        text=text,
        payload=payload,
        digest=digest,
    )
    delivery.notifications.set(notifications)
    transaction.on_commit(lambda: _send_task(DELIVER_TASK, (delivery.pk,)))
    return delivery


def flush_digest(user_id: int, *, force: bool = False) -> int:
    """Send the user's held notifications as one digest per channel target, once the digest
    window is over (or at once with `force`). Returns how many notifications it carried."""
    now = timezone.now()
    with transaction.atomic():
        state = _user_settings_locked(user_id)
        if state.digest_due_at is None or (not force and state.digest_due_at > now):
            return 0
        held = list(
            Notification.objects.select_related("user")
            .filter(user_id=user_id, state=NotificationState.HELD)
            .order_by("created_at", "id")
        )
        state.digest_due_at = None
        state.save(update_fields=["digest_due_at"])
        if not held:
            return 0
        user = held[0].user
        by_target: dict[tuple[str, int | None], list[Notification]] = {}
        endpoints: dict[int, WebhookEndpoint] = {}
        for notification in held:
            for channel, endpoint in _targets(user, notification.event):
                if endpoint is not None:
                    endpoints[endpoint.pk] = endpoint
                key = (channel, endpoint.pk if endpoint else None)
                by_target.setdefault(key, []).append(notification)
        for (channel, endpoint_id), items in by_target.items():
            subject, text, payload = digest_message(items)
            _create_delivery(
                user,
                channel,
                endpoints.get(endpoint_id) if endpoint_id else None,
                subject=subject,
                text=text,
                payload=payload,
                notifications=items,
                digest=True,
            )
        Notification.objects.filter(pk__in=[n.pk for n in held]).update(
            state=NotificationState.DIGESTED
        )
        return len(held)


def digest_message(items: list[Notification]) -> tuple[str, str, dict]:
    """One message for several notifications: the subjects as a list, each text below."""
    subject = f"GPU Portal: {len(items)} notifications"
    lines = [f"{len(items)} things happened in the last minutes:", ""]
    lines += [f"- {n.subject}" for n in items]
    for n in items:
        lines += ["", f"== {n.subject} ==", n.text]
    payload = {
        "event": "digest",
        "items": [
            {"event": n.event, "subject": n.subject, "text": n.text, "data": n.payload}
            for n in items
        ],
    }
    return subject, "\n".join(lines), payload


class RetryDelivery(Exception):
    """A failure worth another try later (timeout, connection refused, 5xx, 429)."""


@dataclass(frozen=True)
class DeliveryOutcome:
    status: str
    detail: str = ""


def deliver(delivery_id: int, *, final_attempt: bool = False) -> DeliveryOutcome:
    """Send one message. Raises RetryDelivery for a failure worth retrying (the row says
    "retrying" then), unless this is the final attempt (the row says "failed")."""
    delivery = Delivery.objects.select_related("user", "endpoint").filter(pk=delivery_id).first()
    if delivery is None:
        return DeliveryOutcome("gone")
    if delivery.status in (DeliveryStatus.SENT, DeliveryStatus.FAILED, DeliveryStatus.SKIPPED):
        return DeliveryOutcome(delivery.status)
    Delivery.objects.filter(pk=delivery.pk).update(attempts=delivery.attempts + 1)
    try:
        if delivery.channel == EMAIL:
            response_status = _send_email(delivery)
        else:
            response_status = _post_webhook(delivery)
    except _Permanent as exc:
        return _finish(delivery, DeliveryStatus.FAILED, str(exc), exc.response_status)
    except RetryDelivery as exc:
        if final_attempt:
            return _finish(delivery, DeliveryStatus.FAILED, f"gave up: {exc}", None)
        Delivery.objects.filter(pk=delivery.pk).update(
            status=DeliveryStatus.RETRYING, last_error=str(exc)[:2000]
        )
        raise
    return _finish(delivery, DeliveryStatus.SENT, "", response_status)


class _Permanent(Exception):
    def __init__(self, message: str, response_status: int | None = None):
        super().__init__(message)
        self.response_status = response_status


def _finish(delivery: Delivery, status: str, error: str, code: int | None) -> DeliveryOutcome:
    Delivery.objects.filter(pk=delivery.pk).update(
        status=status, last_error=error[:2000], response_status=code, finished_at=timezone.now()
    )
    return DeliveryOutcome(status, error)


def _send_email(delivery: Delivery) -> None:
    address = delivery.user.email
    if not address:
        raise _Permanent("the account has no e-mail address")
    connection = get_connection(timeout=settings.EMAIL_TIMEOUT)
    message = EmailMessage(
        subject=delivery.subject,
        body=delivery.text,
        to=[address],
        connection=connection,
        headers={"X-GPU-Portal-Delivery": str(delivery.pk)},
    )
    try:
        message.send(fail_silently=False)
    except OSError as exc:  # smtplib's errors are OSErrors; so are timeouts and refusals
        raise RetryDelivery(f"SMTP: {exc}") from exc


def _post_webhook(delivery: Delivery) -> int:
    endpoint = delivery.endpoint
    if endpoint is None or not endpoint.active:
        raise _Permanent("the webhook endpoint was deleted or switched off")
    try:
        # Checked again now: the name may resolve elsewhere than when it was saved.
        target = address_guard.check_url(endpoint.url, allow_internal=endpoint.allow_internal)
    except address_guard.UnsafeURL as exc:
        raise _Permanent(str(exc)) from exc
    event = str(delivery.payload.get("event", ""))
    if endpoint.format == WebhookFormat.SLACK:
        body = webhooks.slack_body(delivery.subject, delivery.text)
    else:
        payload = {k: v for k, v in delivery.payload.items() if k != "event"}
        body = webhooks.generic_body(
            delivery_id=delivery.pk,
            event=event,
            subject=delivery.subject,
            text=delivery.text,
            payload=payload,
        )
    try:
        result = webhooks.post(
            target,
            webhooks.encode(body),
            secret=endpoint.secret,
            event=event,
            delivery_id=delivery.pk,
            timeout=settings.PORTAL_NOTIFY_WEBHOOK_TIMEOUT_SECONDS,
        )
    except webhooks.PostFailed as exc:
        raise RetryDelivery(f"{endpoint.url}: {exc}") from exc
    if 200 <= result.status < 300:
        return result.status
    message = f"{endpoint.url} answered HTTP {result.status}: {result.body[:200]}"
    if result.status >= 500 or result.status in (408, 425, 429):
        raise RetryDelivery(message)
    raise _Permanent(message, result.status)


# --- preferences and endpoints ----------------------------------------------------------------


def set_preferences(user: Any, changes: dict[tuple[str, str], bool]) -> None:
    """Store (event, channel) → enabled for the user; unknown keys are a ValidationError."""
    bad = [f"{e}/{c}" for e, c in changes if e not in EVENTS or c not in CHANNELS]
    if bad:
        raise ValidationError({"preferences": [f"Unknown event/channel: {', '.join(bad)}."]})
    with transaction.atomic():
        for (event, channel), enabled in changes.items():
            Preference.objects.update_or_create(
                user=user, event=event, channel=channel, defaults={"enabled": bool(enabled)}
            )


def set_waiting_minutes(user: Any, minutes: int | None) -> None:
    if minutes is not None and not (1 <= minutes <= 7 * 24 * 60):
        raise ValidationError(
            {"waiting_minutes": ["Must be a whole number of minutes from 1 to 10080 (a week)."]}
        )
    UserSettings.objects.update_or_create(user=user, defaults={"waiting_minutes": minutes})


def _is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def check_webhook_url(url: str, *, actor: Any, allow_internal: bool) -> None:
    """ValidationError on `url` (or `allow_internal`) when the actor may not use this target."""
    if allow_internal and not _is_staff(actor):
        raise ValidationError({"allow_internal": ["Only staff may allow internal targets."]})
    try:
        address_guard.check_url(url, allow_internal=allow_internal)
    except address_guard.UnsafeURL as exc:
        raise ValidationError({"url": [str(exc)]}) from exc


def create_webhook(
    *,
    actor: Any,
    name: str,
    url: str,
    format: str = WebhookFormat.GENERIC,
    allow_internal: bool = False,
    active: bool = True,
) -> WebhookEndpoint:
    """A webhook endpoint of the actor's own, with a fresh secret (shown once by the caller)."""
    if format not in WebhookFormat.values:
        raise ValidationError({"format": [f"Must be one of {', '.join(WebhookFormat.values)}."]})
    check_webhook_url(url, actor=actor, allow_internal=allow_internal)
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.create(
            user=actor,
            name=name,
            url=url,
            format=format,
            allow_internal=allow_internal,
            active=active,
            secret=secrets.token_urlsafe(32),
        )
        record("webhook.create", actor=actor, target=endpoint, changes=created(_audited(endpoint)))
    return endpoint


def _audited(endpoint: WebhookEndpoint) -> dict[str, Any]:
    # The host only: a Slack-style URL carries its secret in the path.
    return {
        "name": endpoint.name,
        "host": urlsplit(endpoint.url).hostname or "",
        "format": endpoint.format,
        "active": endpoint.active,
        "allow_internal": endpoint.allow_internal,
    }


def update_webhook(endpoint: WebhookEndpoint, *, actor: Any, **changes: Any) -> WebhookEndpoint:
    allowed = {"name", "url", "format", "active", "allow_internal"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValidationError({sorted(unknown)[0]: ["This field cannot be changed."]})
    if "format" in changes and changes["format"] not in WebhookFormat.values:
        raise ValidationError({"format": [f"Must be one of {', '.join(WebhookFormat.values)}."]})
    url = changes.get("url", endpoint.url)
    allow_internal = changes.get("allow_internal", endpoint.allow_internal)
    if "url" in changes or "allow_internal" in changes:
        check_webhook_url(url, actor=actor, allow_internal=allow_internal)
    before = _audited(endpoint)
    for name, value in changes.items():
        setattr(endpoint, name, value)
    with transaction.atomic():
        endpoint.save()
        record(
            "webhook.change",
            actor=actor,
            target=endpoint,
            changes=diff(before, _audited(endpoint)),
            detail="URL changed" if "url" in changes else "",
        )
    return endpoint


def delete_webhook(endpoint: WebhookEndpoint, *, actor: Any) -> None:
    target, old = (endpoint._meta.label_lower, endpoint.pk, str(endpoint)), _audited(endpoint)
    with transaction.atomic():
        endpoint.delete()
        record("webhook.delete", actor=actor, target=target, changes=removed(old))
