"""REST endpoints for credentials: /api/v1/credentials/ (?project=slug).

Everyone in a project sees its credentials' names, keys, registry server and who changed them
when; project admins (and staff) create, replace values and delete. Values are write-only: no
answer of this API ever contains one.
"""

from __future__ import annotations

import django_filters
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from audit.services import record
from credentials.models import Credential, CredentialKind
from credentials.services import (
    ClusterUnavailable,
    credential_create,
    credential_delete,
    credential_replace,
)
from portal.api import StrictCharField, TenantScopedViewSet, router
from portal.api_errors import ApiErrorSerializer
from tenants.permissions import is_project_admin


class CredentialFilter(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", help_text="Project slug.")
    kind = django_filters.ChoiceFilter(choices=CredentialKind.choices)

    class Meta:
        model = Credential
        fields = ["project", "kind"]


class CredentialSerializer(serializers.ModelSerializer):
    """A credential as anyone in its project reads it: never a value."""

    project = serializers.CharField(source="project.slug", read_only=True)
    secret_name = serializers.CharField(
        read_only=True, help_text="The Kubernetes Secret in the project's namespace."
    )
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True
    )
    updated_by = serializers.CharField(
        source="updated_by.username", read_only=True, allow_null=True
    )
    keys = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = Credential
        fields = [
            "id",
            "project",
            "name",
            "kind",
            "keys",
            "server",
            "secret_name",
            "created_by",
            "created_at",
            "updated_by",
            "updated_at",
        ]
        read_only_fields = fields


def _value_field(**kwargs) -> StrictCharField:
    return StrictCharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=False, **kwargs
    )


class _RejectUnknown(serializers.Serializer):
    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            allowed = ", ".join(self.fields)
            raise serializers.ValidationError(
                {name: [f"Unknown field; a credential takes only: {allowed}."] for name in unknown}
            )
        return attrs


class CredentialCreateSerializer(_RejectUnknown):
    project = StrictCharField(help_text="Project slug.")
    name = StrictCharField(max_length=63, help_text="DNS-1123 label, e.g. hf.")
    kind = serializers.ChoiceField(choices=CredentialKind.choices)
    values = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        write_only=True,
        required=False,
        help_text="kind secret: key → value. Write-only: never shown again.",
    )
    server = StrictCharField(
        required=False, allow_blank=True, max_length=255, help_text="kind registry, e.g. ghcr.io."
    )
    username = _value_field(max_length=255, help_text="kind registry. Write-only.")
    token = _value_field(help_text="kind registry: token or password. Write-only.")


class CredentialReplaceSerializer(_RejectUnknown):
    values = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        write_only=True,
        required=False,
        help_text="kind secret: new values. PATCH replaces the given keys and keeps the others; "
        "PUT replaces the whole set.",
    )
    server = StrictCharField(required=False, allow_blank=True, max_length=255)
    username = _value_field(max_length=255)
    token = _value_field()


class ClusterUnavailableError(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The cluster cannot be reached now; nothing was changed."
    default_code = "cluster_unavailable"


UNAVAILABLE = OpenApiResponse(
    ApiErrorSerializer, description="The cluster cannot be reached now; nothing was changed."
)


class CredentialViewSet(
    TenantScopedViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
):
    """Credentials of your projects: names and keys for everyone in the project; admins write."""

    queryset = Credential.objects.all()
    project_field = "project"
    write_predicate = staticmethod(is_project_admin)
    lookup_value_regex = r"[0-9]+"
    serializer_class = CredentialSerializer
    filterset_class = CredentialFilter

    def shape_queryset(self, queryset):
        return queryset.select_related("project", "created_by", "updated_by").order_by(
            "project__slug", "name"
        )

    def denied_message(self, project) -> str:
        return f"Only admins of project '{project}' manage its credentials."

    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        credential = self.get_object()
        # Who looked at a credential's key list is part of the trail (never its values).
        record("credential.read_keys", actor=request.user, target=credential)
        return Response(self.get_serializer(credential).data)

    @extend_schema(
        request=CredentialCreateSerializer, responses={201: CredentialSerializer, 503: UNAVAILABLE}
    )
    def create(self, request: Request) -> Response:
        data = CredentialCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            credential = credential_create(actor=request.user, **data.validated_data)
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        except ClusterUnavailable as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        return Response(CredentialSerializer(credential).data, status=status.HTTP_201_CREATED)

    def _replace(self, request: Request, *, replace_all: bool) -> Response:
        credential = self.get_object()
        data = CredentialReplaceSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            credential = credential_replace(
                actor=request.user,
                credential=credential,
                replace_all=replace_all,
                **data.validated_data,
            )
        except ClusterUnavailable as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        return Response(CredentialSerializer(credential).data)

    @extend_schema(
        request=CredentialReplaceSerializer, responses={200: CredentialSerializer, 503: UNAVAILABLE}
    )
    def update(self, request: Request, pk: str | None = None) -> Response:
        """Replace all values (keys not given are removed from the Secret)."""
        return self._replace(request, replace_all=True)

    @extend_schema(
        request=CredentialReplaceSerializer, responses={200: CredentialSerializer, 503: UNAVAILABLE}
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        """Replace the given values; the other keys keep theirs."""
        return self._replace(request, replace_all=False)

    @extend_schema(responses={204: None, 503: UNAVAILABLE})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        """Delete the credential and its Secret (jobs that name it will not start)."""
        try:
            credential_delete(actor=request.user, credential=self.get_object())
        except ClusterUnavailable as exc:
            raise ClusterUnavailableError(str(exc)) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)


router.register("credentials", CredentialViewSet, basename="credentials")
