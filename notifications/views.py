"""The notification settings page: which events reach which channel, the waiting limit, one's
webhook endpoints (the signing secret shown once, right after the create) and recent
deliveries. Thin: a form, one service, a redirect (or the page again with the errors, 400)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from notifications import selectors, services
from notifications.events import CHANNEL_LABELS, EVENT_LABELS
from notifications.forms import PreferencesForm, WebhookForm, preference_field
from notifications.models import WebhookEndpoint


def _put_errors(form, exc: ValidationError) -> None:
    errors = exc.message_dict if hasattr(exc, "error_dict") else {None: exc.messages}
    for name, texts in errors.items():
        for text in texts:
            form.add_error(name if name in form.fields else None, text)


def _render(
    request: HttpRequest,
    *,
    preferences_form: PreferencesForm | None = None,
    webhook_form: WebhookForm | None = None,
    new_secret: tuple[WebhookEndpoint, str] | None = None,
    status: int = 200,
) -> HttpResponse:
    user = request.user
    table = selectors.preference_table(user)
    if preferences_form is None:
        initial = {"waiting_minutes": selectors.stored_waiting_minutes(user)}
        for event, channels in table.items():
            for channel, enabled in channels.items():
                initial[preference_field(event, channel)] = enabled
        preferences_form = PreferencesForm(initial=initial)
    rows = [
        {
            "event": event,
            "label": label,
            "boxes": [
                (channel, preferences_form[preference_field(event, channel)])
                for channel in CHANNEL_LABELS
            ],
        }
        for event, label in EVENT_LABELS.items()
    ]
    context = {
        "rows": rows,
        "channels": CHANNEL_LABELS,
        "preferences_form": preferences_form,
        "webhook_form": webhook_form or WebhookForm(),
        "endpoints": list(selectors.endpoints_of(user)),
        "deliveries": selectors.recent_deliveries(user, limit=20),
        "default_waiting_minutes": selectors.waiting_minutes_default(),
        "new_secret": new_secret,
    }
    return render(request, "notifications/settings.html", context, status=status)


class SettingsView(LoginRequiredMixin, View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return _render(request)

    def post(self, request: HttpRequest) -> HttpResponse:
        form = PreferencesForm(request.POST)
        if form.is_valid():
            try:
                services.set_preferences(request.user, form.preferences())
                services.set_waiting_minutes(request.user, form.cleaned_data["waiting_minutes"])
            except ValidationError as exc:
                _put_errors(form, exc)
            else:
                messages.success(request, "Notification settings saved.")
                return redirect("notification-settings")
        return _render(request, preferences_form=form, status=400)


class WebhookCreateView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest) -> HttpResponse:
        form = WebhookForm(request.POST)
        if form.is_valid():
            try:
                endpoint = services.create_webhook(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                _put_errors(form, exc)
            else:
                # Rendered, not redirected: the secret is shown this once and never stored in
                # a message or a URL.
                return _render(request, new_secret=(endpoint, endpoint.secret))
        return _render(request, webhook_form=form, status=400)


class WebhookToggleView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, endpoint_id: int) -> HttpResponse:
        endpoint = get_object_or_404(selectors.endpoints_of(request.user), pk=endpoint_id)
        services.update_webhook(endpoint, actor=request.user, active=not endpoint.active)
        state = "on" if endpoint.active else "off"
        messages.success(request, f"Webhook {endpoint.name} is {state}.")
        return redirect("notification-settings")


class WebhookDeleteView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, endpoint_id: int) -> HttpResponse:
        endpoint = get_object_or_404(selectors.endpoints_of(request.user), pk=endpoint_id)
        name = endpoint.name
        services.delete_webhook(endpoint, actor=request.user)
        messages.success(request, f"Webhook {name} removed.")
        return redirect("notification-settings")
