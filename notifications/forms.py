"""Forms of the notification settings page: the event × channel grid with the waiting limit,
and a webhook endpoint."""

from __future__ import annotations

from django import forms

from notifications.events import CHANNELS, EVENTS
from notifications.models import WebhookFormat

MAX_WAITING_MINUTES = 7 * 24 * 60


def preference_field(event: str, channel: str) -> str:
    return f"pref__{event}__{channel}"


class PreferencesForm(forms.Form):
    """One checkbox per event and channel (all present: an unticked box is a "no")."""

    waiting_minutes = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_WAITING_MINUTES,
        label="Tell me when a job has waited longer than (minutes)",
        help_text="Empty: the site's default.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for event in EVENTS:
            for channel in CHANNELS:
                self.fields[preference_field(event, channel)] = forms.BooleanField(required=False)

    def preferences(self) -> dict[tuple[str, str], bool]:
        return {
            (event, channel): self.cleaned_data[preference_field(event, channel)]
            for event in EVENTS
            for channel in CHANNELS
        }


class WebhookForm(forms.Form):
    name = forms.CharField(max_length=100)
    url = forms.URLField(max_length=2000, label="URL", assume_scheme="https")
    format = forms.ChoiceField(choices=WebhookFormat.choices, initial=WebhookFormat.GENERIC)
    allow_internal = forms.BooleanField(
        required=False, label="Internal address allowed (staff only)"
    )
