"""REST endpoints: /api/v1/member-limits/ (project admins cap what one member holds) and
/api/v1/quota-requests/ (project admins ask for more GPUs for a while; staff decide)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from governance.models import MemberGpuLimit, QuotaRequest
from governance.services import (
    member_limit_delete,
    member_limit_set,
    quota_request_approve,
    quota_request_create,
    quota_request_refuse,
)
from portal.api import StrictCharField, TenantScopedViewSet, router
from tenants.permissions import is_project_admin, is_staff


class MemberLimitSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    pool = serializers.CharField(source="pool.slug", read_only=True)
    user = serializers.CharField(
        source="user.username",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="null: the limit of every member without one of their own.",
    )

    class Meta:
        model = MemberGpuLimit
        fields = ["id", "project", "pool", "user", "max_gpus", "updated_at"]
        read_only_fields = fields


class MemberLimitWriteSerializer(serializers.Serializer):
    project = StrictCharField(help_text="Project slug.")
    pool = StrictCharField(help_text="A pool the project has a quota in.")
    user = StrictCharField(
        required=False, allow_blank=True, help_text="A member's username; empty: every member."
    )
    max_gpus = serializers.JSONField(help_text="GPUs the member may hold at once (0 or more).")


class MemberLimitViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """GPU limits per member inside your projects. Readable by the project's members; set
    (create or change) and removed by its admins. A job over its submitter's limit waits in the
    portal until their other jobs free enough GPUs."""

    queryset = MemberGpuLimit.objects.all()
    serializer_class = MemberLimitSerializer
    write_predicate = staticmethod(is_project_admin)
    lookup_value_regex = r"[0-9]+"

    def shape_queryset(self, queryset):
        return queryset.select_related("project", "pool", "user").order_by("project__slug", "id")

    def denied_message(self, project) -> str:
        return f"Only admins of project '{project}' can change its GPU limits."

    @extend_schema(request=MemberLimitWriteSerializer, responses={201: MemberLimitSerializer})
    def create(self, request: Request) -> Response:
        data = MemberLimitWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        limit = member_limit_set(actor=request.user, **data.validated_data)
        return Response(MemberLimitSerializer(limit).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        member_limit_delete(actor=request.user, limit=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class QuotaRequestSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    pool = serializers.CharField(source="pool.slug", read_only=True)
    requester = serializers.CharField(source="requester.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "project",
            "pool",
            "gpus",
            "until",
            "reason",
            "requester",
            "created_at",
            "status",
            "decided_by",
            "decided_at",
            "note",
            "granted",
            "ended_at",
        ]
        read_only_fields = fields


class QuotaRequestCreateSerializer(serializers.Serializer):
    project = StrictCharField(help_text="Project slug (you must be its admin).")
    pool = StrictCharField(help_text="A pool the project has a quota in.")
    gpus = serializers.JSONField(help_text="Whole GPUs more than the project's quota (from 1).")
    until = StrictCharField(help_text="The last day the GPUs are wanted (YYYY-MM-DD).")
    reason = StrictCharField(allow_blank=True, help_text="Why; staff decide on it.")


class DecisionSerializer(serializers.Serializer):
    note = StrictCharField(
        required=False, allow_blank=True, default="", help_text="Staff's note (required to refuse)."
    )


def _staff_only(request: Request) -> None:
    if not is_staff(request.user):
        raise PermissionDenied("Only staff decide quota requests.")


class QuotaRequestViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Temporary quota requests of your projects: N more GPUs in a pool until a date. Project
    admins ask; staff approve (the quota rises and the sync applies it) or refuse."""

    queryset = QuotaRequest.objects.all()
    serializer_class = QuotaRequestSerializer
    write_predicate = staticmethod(is_project_admin)
    lookup_value_regex = r"[0-9]+"

    def shape_queryset(self, queryset):
        return queryset.select_related("project", "pool", "requester", "decided_by")

    @extend_schema(request=QuotaRequestCreateSerializer, responses={201: QuotaRequestSerializer})
    def create(self, request: Request) -> Response:
        data = QuotaRequestCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = quota_request_create(actor=request.user, **data.validated_data)
        return Response(QuotaRequestSerializer(created).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DecisionSerializer, responses={200: QuotaRequestSerializer})
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        target = self.get_object()
        _staff_only(request)
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        decided = quota_request_approve(actor=request.user, request=target, **data.validated_data)
        return Response(QuotaRequestSerializer(decided).data)

    @extend_schema(request=DecisionSerializer, responses={200: QuotaRequestSerializer})
    @action(detail=True, methods=["post"])
    def refuse(self, request: Request, pk: str | None = None) -> Response:
        target = self.get_object()
        _staff_only(request)
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        decided = quota_request_refuse(actor=request.user, request=target, **data.validated_data)
        return Response(QuotaRequestSerializer(decided).data)


router.register("member-limits", MemberLimitViewSet, basename="member-limits")
router.register("quota-requests", QuotaRequestViewSet, basename="quota-requests")
