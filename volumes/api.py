"""REST endpoints for a project's data volumes (/api/v1/volumes/?project=slug).

Members and viewers read; project admins and staff create, change, re-apply and delete.
Tenancy as everywhere (portal.api.TenantScopedViewSet): another project's volume is a 404.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api import StrictCharField, TenantScopedViewSet, router
from tenants.permissions import is_project_admin
from volumes.filters import VolumeFilter
from volumes.models import DataVolume, VolumeKind
from volumes.services import (
    UPDATABLE_FIELDS,
    ClusterUnavailable,
    volume_create,
    volume_delete,
    volume_sync,
    volume_update,
)


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The cluster could not be reached; try again."


class VolumeSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    storage_class = serializers.CharField(
        source="storage_class.name", read_only=True, allow_null=True
    )
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)

    class Meta:
        model = DataVolume
        fields = [
            "id",
            "project",
            "name",
            "kind",
            "claim_name",
            "storage_class",
            "size",
            "nfs_server",
            "nfs_path",
            "mount_path",
            "read_only",
            "is_checkpoint",
            "description",
            "created_by",
            "created_at",
            "updated_at",
            "sync_state",
            "sync_message",
            "claim_phase",
            "synced_at",
        ]
        read_only_fields = fields


class _RefuseUnknown:
    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: [self.unknown_message] for name in unknown})
        return attrs


class VolumeCreateSerializer(_RefuseUnknown, serializers.Serializer):
    unknown_message = "Unknown field."
    project = StrictCharField(help_text="Project slug.")
    name = StrictCharField(max_length=63)
    kind = serializers.ChoiceField(choices=VolumeKind.choices)
    mount_path = StrictCharField(max_length=256, help_text="Default mount path, e.g. /data.")
    read_only = serializers.BooleanField(default=True)
    is_checkpoint = serializers.BooleanField(default=False)
    claim_name = StrictCharField(
        required=False, allow_blank=True, max_length=253, help_text="kind existing: the claim."
    )
    storage_class = StrictCharField(
        required=False, allow_blank=True, max_length=253, help_text="kind new."
    )
    size = StrictCharField(
        required=False, allow_blank=True, max_length=16, help_text="kind new (and nfs)."
    )
    nfs_server = StrictCharField(required=False, allow_blank=True, max_length=253)
    nfs_path = StrictCharField(required=False, allow_blank=True, max_length=1024)
    description = StrictCharField(required=False, allow_blank=True, max_length=200)


class VolumeUpdateSerializer(_RefuseUnknown, serializers.Serializer):
    unknown_message = (
        f"Fixed once the volume exists; only {', '.join(UPDATABLE_FIELDS)} can change."
    )
    mount_path = StrictCharField(required=False, max_length=256)
    read_only = serializers.BooleanField(required=False)
    is_checkpoint = serializers.BooleanField(required=False)
    description = StrictCharField(required=False, allow_blank=True, max_length=200)


class VolumeDeletedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    deleted_objects = serializers.ListField(child=serializers.CharField())


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


class VolumeViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """A project's data volumes: existing claims, new claims from approved storage classes, and
    NFS exports. Deleting removes only the portal's record unless delete_data=true and
    confirm=<the volume's name> are given (then the claim the portal created goes too)."""

    queryset = DataVolume.objects.all()
    project_field = "project"
    write_predicate = staticmethod(is_project_admin)
    lookup_value_regex = r"[0-9]+"
    serializer_class = VolumeSerializer
    filterset_class = VolumeFilter

    def shape_queryset(self, queryset):
        return queryset.select_related("project", "storage_class", "created_by").order_by(
            "project__slug", "name"
        )

    def denied_message(self, project) -> str:
        return f"Only admins of project '{project}' can manage its data volumes."

    def get_serializer_class(self):
        if self.action == "create":
            return VolumeCreateSerializer
        if self.action in ("update", "partial_update"):
            return VolumeUpdateSerializer
        return VolumeSerializer

    @extend_schema(request=VolumeCreateSerializer, responses={201: VolumeSerializer})
    def create(self, request: Request) -> Response:
        data = VolumeCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            volume = volume_create(actor=request.user, **data.validated_data)
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(VolumeSerializer(volume).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=VolumeUpdateSerializer, responses={200: VolumeSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        volume = self.get_object()
        data = VolumeUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        volume = volume_update(actor=request.user, volume=volume, **data.validated_data)
        return Response(VolumeSerializer(volume).data)

    @extend_schema(request=VolumeUpdateSerializer, responses={200: VolumeSerializer})
    def update(self, request: Request, pk: str | None = None) -> Response:
        return self.partial_update(request, pk=pk)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "delete_data",
                OpenApiTypes.BOOL,
                description="Also delete the claim the portal created (and its data).",
            ),
            OpenApiParameter(
                "confirm",
                OpenApiTypes.STR,
                description="With delete_data: the volume's name, typed as confirmation.",
            ),
        ],
        responses={200: VolumeDeletedSerializer},
    )
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        volume = self.get_object()
        name = volume.name
        try:
            deleted = volume_delete(
                actor=request.user,
                volume=volume,
                delete_data=_truthy(request.query_params.get("delete_data")),
                confirm=request.query_params.get("confirm", ""),
            )
        except ClusterUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from exc
        detail = (
            f"Volume {name} removed; deleted {', '.join(deleted)}."
            if deleted
            else f"Volume {name} removed from the portal; its claim and data are untouched."
        )
        return Response({"detail": detail, "deleted_objects": deleted})

    @extend_schema(request=None, responses={200: VolumeSerializer})
    @action(detail=True, methods=["post"])
    def sync(self, request: Request, pk: str | None = None) -> Response:
        """Apply the volume's claim again and read its phase from the cluster."""
        volume = self.get_object()
        return Response(VolumeSerializer(volume_sync(volume)).data)


router.register("volumes", VolumeViewSet, basename="volumes")
