"""REST endpoints: /api/v1/workspaces/ (start, list, read, stop, start again) and
/api/v1/workspace-kinds/ (the catalogue admins curate).

Tenancy as everywhere (portal.api.TenantScopedViewSet), narrowed further: a workspace is
visible to its owner and, when shared, to the project's members; anyone else gets 404. The
token is never in an answer; `url` is the address to open through the portal's proxy.
"""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.api import ClusterReadOnlyViewSet, StrictCharField, TenantScopedViewSet, router
from workspaces import selectors
from workspaces.models import Workspace, WorkspaceKind
from workspaces.services import workspace_start, workspace_start_again, workspace_stop


class WorkspaceKindSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkspaceKind
        fields = [
            "slug",
            "name",
            "app",
            "image",
            "port",
            "health_path",
            "default_shape",
            "allowed_shapes",
            "max_lifetime_minutes",
            "idle_timeout_minutes",
            "enabled",
            "description",
        ]
        read_only_fields = fields


class WorkspaceSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    kind = serializers.CharField(source="kind.slug", read_only=True)
    state = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    time_left_minutes = serializers.SerializerMethodField()
    job = serializers.IntegerField(source="job_id", read_only=True, allow_null=True)

    class Meta:
        model = Workspace
        fields = [
            "id",
            "project",
            "owner",
            "kind",
            "name",
            "shape",
            "pool",
            "mounts",
            "shared",
            "state",
            "url",
            "time_left_minutes",
            "job",
            "runs",
            "last_activity_at",
            "stopped_reason",
            "created_at",
        ]
        read_only_fields = fields

    def get_state(self, obj) -> str:
        return selectors.state_of(obj)

    def get_url(self, obj) -> str:
        return obj.base_path

    def get_time_left_minutes(self, obj) -> int | None:
        return selectors.time_left(obj)


class WorkspaceStartSerializer(serializers.Serializer):
    project = StrictCharField(help_text="Project slug.")
    kind = StrictCharField(help_text="Workspace kind slug (GET /api/v1/workspace-kinds/).")
    shape = StrictCharField(
        required=False, allow_blank=True, help_text="gpu:N or mig:PROFILE; empty: the default."
    )
    name = StrictCharField(required=False, allow_blank=True, max_length=30)
    pool = StrictCharField(required=False, allow_blank=True)
    mounts = serializers.ListField(
        child=serializers.DictField(), required=False, help_text="As a job's mounts."
    )
    env = serializers.DictField(
        required=False, help_text="As a job's env (plain values or credential references)."
    )
    shared = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return attrs


def _anyone_in_project(user, project) -> bool:
    # The service decides (owner or member); the object is already visible.
    return True


@extend_schema_view(
    list=extend_schema(
        parameters=[OpenApiParameter("project", OpenApiTypes.STR, description="Project slug.")]
    )
)
class WorkspaceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = Workspace.objects.all()
    serializer_class = WorkspaceSerializer
    write_predicates = {"stop": _anyone_in_project, "start": _anyone_in_project}

    def shape_queryset(self, queryset):
        queryset = queryset.select_related("project", "kind", "job", "owner")
        if not self.request.user.is_staff:
            queryset = queryset.filter(selectors.openable_by(self.request.user)).distinct()
        project = self.request.query_params.get("project")
        if project and self.action == "list":
            queryset = queryset.filter(project__slug=project)
        return queryset

    @extend_schema(request=WorkspaceStartSerializer, responses={201: WorkspaceSerializer})
    def create(self, request, *args, **kwargs):
        body = WorkspaceStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        workspace = workspace_start(
            actor=request.user,
            project=data["project"],
            kind=data["kind"],
            shape=data.get("shape", ""),
            name=data.get("name", ""),
            pool=data.get("pool", ""),
            mounts=data.get("mounts"),
            env=data.get("env"),
            shared=data.get("shared", False),
            source="api",
        )
        return Response(WorkspaceSerializer(workspace).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: WorkspaceSerializer})
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        """Stop the workspace (its job is cancelled; its volumes are kept)."""
        workspace = workspace_stop(actor=request.user, workspace=self.get_object())
        return Response(WorkspaceSerializer(workspace).data)

    @extend_schema(request=None, responses={200: WorkspaceSerializer})
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        """Start a stopped workspace again, with the same kind, shape and volumes."""
        workspace = workspace_start_again(actor=request.user, workspace=self.get_object())
        return Response(WorkspaceSerializer(workspace).data)


class WorkspaceKindViewSet(ClusterReadOnlyViewSet):
    queryset = WorkspaceKind.objects.all()
    serializer_class = WorkspaceKindSerializer
    lookup_field = "slug"


router.register("workspaces", WorkspaceViewSet, basename="workspaces")
router.register("workspace-kinds", WorkspaceKindViewSet, basename="workspace-kinds")
