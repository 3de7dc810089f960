"""Notification preferences, webhook endpoints, the notifications themselves and their
deliveries (one row per message sent, or tried, on one channel)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from notifications.events import CHANNEL_LABELS, EVENT_LABELS


class Preference(models.Model):
    """Whether `user` wants `event` on `channel`; no row means the default (on)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_preferences"
    )
    event = models.CharField(max_length=40, choices=list(EVENT_LABELS.items()))
    channel = models.CharField(max_length=16, choices=list(CHANNEL_LABELS.items()))
    enabled = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "event", "channel"], name="notification_preference_once"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} {self.event} {self.channel}: {'on' if self.enabled else 'off'}"


class UserSettings(models.Model):
    """Per-user numbers: after how many minutes of waiting a job is worth a message."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_settings"
    )
    # None: PORTAL_NOTIFY_WAITING_MINUTES.
    waiting_minutes = models.PositiveIntegerField(null=True, blank=True)
    # While a digest is being gathered for this user: when it is sent (compare-and-set).
    digest_due_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"notification settings of {self.user}"


class WebhookFormat(models.TextChoices):
    SLACK = "slack", 'Slack-compatible ({"text": ...})'
    GENERIC = "generic", "Generic JSON, signed (HMAC-SHA256)"


class WebhookEndpoint(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    name = models.CharField(max_length=100)
    url = models.URLField(max_length=2000)
    format = models.CharField(
        max_length=16, choices=WebhookFormat.choices, default=WebhookFormat.GENERIC
    )
    # The HMAC key; shown to its owner once, when the endpoint is created.
    secret = models.CharField(max_length=128)
    active = models.BooleanField(default=True)
    # Staff only: the URL may point at a loopback, private or link-local address.
    allow_internal = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"


class NotificationState(models.TextChoices):
    PENDING = "pending", "Pending"  # stored, not dispatched yet
    SENT = "sent", "Sent"  # deliveries created on its own
    HELD = "held", "Held for a digest"
    DIGESTED = "digested", "Sent in a digest"
    MUTED = "muted", "No channel enabled"


class Notification(models.Model):
    """Something a user is told about, once per dedupe key."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=40)
    dedupe_key = models.CharField(max_length=200)
    project = models.ForeignKey(
        "tenants.Project", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    subject = models.CharField(max_length=300)
    text = models.TextField()
    payload = models.JSONField(default=dict)
    state = models.CharField(
        max_length=16, choices=NotificationState.choices, default=NotificationState.PENDING
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "dedupe_key"], name="notification_once")
        ]
        indexes = [models.Index(fields=["user", "state"], name="notification_user_state")]

    def __str__(self) -> str:
        return f"{self.event} for {self.user}: {self.subject}"


class DeliveryStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RETRYING = "retrying", "Retrying"
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"


class Delivery(models.Model):
    """One message on one channel (an e-mail, or a POST to one endpoint): a notification or a
    digest of several."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_deliveries"
    )
    channel = models.CharField(max_length=16, choices=list(CHANNEL_LABELS.items()))
    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )
    notifications = models.ManyToManyField(Notification, related_name="deliveries")
    digest = models.BooleanField(default=False)
    subject = models.CharField(max_length=300)
    text = models.TextField()
    payload = models.JSONField(default=dict)
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.QUEUED
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    response_status = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "-created_at"], name="delivery_user_recent")]

    def __str__(self) -> str:
        return f"{self.channel} to {self.user}: {self.subject} ({self.status})"
