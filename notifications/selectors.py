"""Reads for notifications: a user's preferences as a table, their endpoints and deliveries."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from notifications.events import CHANNELS, DEFAULT_ENABLED, EVENTS
from notifications.models import Delivery, Preference, UserSettings, WebhookEndpoint


def preference_table(user: Any) -> dict[str, dict[str, bool]]:
    """{event: {channel: enabled}} for every event and channel, defaults filled in."""
    table = {event: dict.fromkeys(CHANNELS, DEFAULT_ENABLED) for event in EVENTS}
    for event, channel, enabled in Preference.objects.filter(user=user).values_list(
        "event", "channel", "enabled"
    ):
        if event in table and channel in table[event]:
            table[event][channel] = enabled
    return table


def enabled_channels(user: Any, event: str) -> set[str]:
    return {c for c, on in preference_table(user).get(event, {}).items() if on}


def waiting_minutes(user: Any) -> int:
    stored = (
        UserSettings.objects.filter(user=user).values_list("waiting_minutes", flat=True).first()
    )
    return stored or settings.PORTAL_NOTIFY_WAITING_MINUTES


def stored_waiting_minutes(user: Any) -> int | None:
    return UserSettings.objects.filter(user=user).values_list("waiting_minutes", flat=True).first()


def endpoints_of(user: Any) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(user=user).order_by("name", "id")


def recent_deliveries(user: Any, limit: int = 50) -> list[Delivery]:
    return list(
        Delivery.objects.filter(user=user)
        .select_related("endpoint")
        .order_by("-created_at", "-id")[:limit]
    )


def waiting_minutes_default() -> int:
    return settings.PORTAL_NOTIFY_WAITING_MINUTES
