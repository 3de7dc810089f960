"""REST endpoints of one's own notifications: /api/v1/notifications/settings/ (which events
reach which channel, and after how many minutes a waiting job is worth a message) and
/api/v1/notifications/webhooks/ (endpoints that receive them; the signing secret is shown once,
in the answer to the create). Everything here is the requesting user's own: another user's
endpoint is a 404."""

from __future__ import annotations

from django.conf import settings as django_settings
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response

from notifications import selectors, services
from notifications.events import CHANNEL_LABELS, EVENT_LABELS
from notifications.models import Delivery, UserSettings, WebhookEndpoint, WebhookFormat
from portal.api import OwnerScopedViewSet, StrictCharField, router
from portal.api_errors import PortalAutoSchema

MAX_WAITING_MINUTES = 7 * 24 * 60


class NotificationSettingsSerializer(serializers.Serializer):
    preferences = serializers.DictField(
        child=serializers.DictField(child=serializers.BooleanField()),
        required=False,
        help_text="{event: {channel: enabled}}: events "
        + ", ".join(EVENT_LABELS)
        + "; channels "
        + ", ".join(CHANNEL_LABELS)
        + ". Events and channels left out stay as they are.",
    )
    waiting_minutes = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=MAX_WAITING_MINUTES,
        help_text="Tell me when a job of mine has waited longer than this (minutes); null: the "
        "site's default.",
    )
    default_waiting_minutes = serializers.IntegerField(read_only=True)
    events = serializers.DictField(
        child=serializers.CharField(), read_only=True, help_text="Event types and what they mean."
    )

    def validate_preferences(self, value: dict) -> dict:
        for event, channels in value.items():
            if event not in EVENT_LABELS:
                raise serializers.ValidationError(
                    f"Unknown event type {event!r}; the types are: {', '.join(EVENT_LABELS)}."
                )
            bad = sorted(set(channels) - set(CHANNEL_LABELS))
            if bad:
                raise serializers.ValidationError(
                    f"{event}: unknown channel {bad[0]!r}; the channels are: "
                    f"{', '.join(CHANNEL_LABELS)}."
                )
        return value


def settings_of(user) -> dict:
    return {
        "preferences": selectors.preference_table(user),
        "waiting_minutes": selectors.stored_waiting_minutes(user),
        "default_waiting_minutes": django_settings.PORTAL_NOTIFY_WAITING_MINUTES,
        "events": dict(EVENT_LABELS),
    }


class SingleObjectSchema(PortalAutoSchema):
    """The settings are one object per user: its GET on the list route is not a list."""

    def _is_list_view(self, serializer=None) -> bool:
        return False


class NotificationSettingsViewSet(OwnerScopedViewSet):
    """Your notification settings. GET reads them; POST changes the fields it names (the
    preferences it names, and waiting_minutes when present) and answers with all of them."""

    queryset = UserSettings.objects.all()
    serializer_class = NotificationSettingsSerializer
    pagination_class = None
    filter_backends: list = []
    # Nested preferences have no form encoding: JSON only (a form is a 415, not a silent no-op).
    parser_classes = [JSONParser]
    schema = SingleObjectSchema()

    @extend_schema(
        responses={200: NotificationSettingsSerializer},
        operation_id="v1_notifications_settings_read",
    )
    def list(self, request: Request) -> Response:
        return Response(NotificationSettingsSerializer(settings_of(request.user)).data)

    @extend_schema(
        request=NotificationSettingsSerializer,
        responses={200: NotificationSettingsSerializer},
        operation_id="v1_notifications_settings_change",
    )
    def create(self, request: Request) -> Response:
        data = NotificationSettingsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        changes = {
            (event, channel): enabled
            for event, channels in data.validated_data.get("preferences", {}).items()
            for channel, enabled in channels.items()
        }
        if changes:
            services.set_preferences(request.user, changes)
        if "waiting_minutes" in data.validated_data:
            services.set_waiting_minutes(request.user, data.validated_data["waiting_minutes"])
        return Response(NotificationSettingsSerializer(settings_of(request.user)).data)


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookEndpoint
        fields = ["id", "name", "url", "format", "active", "allow_internal", "created_at"]
        read_only_fields = fields


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(
        read_only=True,
        help_text="The HMAC-SHA256 key of the X-GPU-Portal-Signature header; shown only now.",
    )

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookWriteSerializer(serializers.Serializer):
    name = StrictCharField(max_length=100)
    url = serializers.URLField(max_length=2000, help_text="http(s) URL on a public address.")
    format = serializers.ChoiceField(choices=WebhookFormat.choices, default=WebhookFormat.GENERIC)
    active = serializers.BooleanField(default=True)
    allow_internal = serializers.BooleanField(
        default=False, help_text="Staff only: the URL may point at an internal address."
    )


class WebhookViewSet(
    OwnerScopedViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
):
    """Your webhook endpoints: each gets the notifications your settings send to webhooks, as
    Slack-compatible JSON or as generic JSON signed with the endpoint's secret."""

    queryset = WebhookEndpoint.objects.all()
    serializer_class = WebhookSerializer
    lookup_value_regex = r"[0-9]+"

    def shape_queryset(self, queryset):
        return queryset.order_by("name", "id")

    @extend_schema(request=WebhookWriteSerializer, responses={201: WebhookCreatedSerializer})
    def create(self, request: Request) -> Response:
        data = WebhookWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        endpoint = services.create_webhook(actor=request.user, **data.validated_data)
        return Response(WebhookCreatedSerializer(endpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=WebhookWriteSerializer(partial=True), responses={200: WebhookSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        endpoint = self.get_object()
        data = WebhookWriteSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        # Defaults apply to a create only: a partial change names what it changes.
        changes = {k: v for k, v in data.validated_data.items() if k in request.data}
        endpoint = services.update_webhook(endpoint, actor=request.user, **changes)
        return Response(WebhookSerializer(endpoint).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        services.delete_webhook(self.get_object(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DeliverySerializer(serializers.ModelSerializer):
    endpoint = serializers.CharField(
        source="endpoint.name", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = Delivery
        fields = [
            "id",
            "channel",
            "endpoint",
            "subject",
            "digest",
            "status",
            "attempts",
            "response_status",
            "last_error",
            "created_at",
            "finished_at",
        ]
        read_only_fields = fields


class DeliveryViewSet(OwnerScopedViewSet, mixins.ListModelMixin):
    """Your last deliveries, newest first: each message sent (or tried) on one channel, with
    its status, attempts and last error."""

    queryset = Delivery.objects.all()
    serializer_class = DeliverySerializer

    def shape_queryset(self, queryset):
        return queryset.select_related("endpoint").order_by("-created_at", "-id")


router.register(
    "notifications/settings", NotificationSettingsViewSet, basename="notification-settings"
)
router.register("notifications/webhooks", WebhookViewSet, basename="notification-webhooks")
router.register("notifications/deliveries", DeliveryViewSet, basename="notification-deliveries")
