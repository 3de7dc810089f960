"""GET /api/v1/audit/: the audit trail, filtered, as JSON pages or CSV (?format=csv or
Accept: text/csv). Staff read every row; anyone else the rows of projects they administer, and
naming another project (?project=) is a 404 as for any project one cannot see."""

from __future__ import annotations

import csv
from collections.abc import Iterator

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, renderers, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from audit.filters import AuditEventFilter
from audit.models import AuditEvent
from audit.selectors import administered_project_or_none
from portal.api import TenantScopedViewSet, router
from portal.api_errors import ApiErrorSerializer
from portal.api_io import PortalJSONRenderer
from portal.api_pagination import EstimatedCountPagination

CSV_COLUMNS = (
    "id",
    "created_at",
    "actor",
    "action",
    "target_type",
    "target_id",
    "target_repr",
    "project",
    "source",
    "request_id",
    "ip",
    "changes",
    "detail",
)


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_username", read_only=True)
    project = serializers.CharField(source="project_slug", read_only=True)
    changes = serializers.JSONField(
        read_only=True, help_text="{field: [old, new]}; secret values are never recorded."
    )

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor",
            "action",
            "target_type",
            "target_id",
            "target_repr",
            "project",
            "changes",
            "detail",
            "source",
            "request_id",
            "ip",
        ]
        read_only_fields = fields


class CSVRenderer(renderers.BaseRenderer):
    """Only announces text/csv to content negotiation; the list streams the rows itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return str(data).encode()  # not reached: rows stream, errors answer in JSON


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_safe(value: str) -> str:
    # A spreadsheet runs a cell that starts with = + - @ as a formula: quote it as text.
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def csv_lines(events) -> Iterator[str]:
    import json

    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for event in events.iterator(chunk_size=2000):
        row = AuditEventSerializer(event).data
        row["changes"] = json.dumps(event.changes, ensure_ascii=False) if event.changes else ""
        yield writer.writerow(
            [_csv_safe("" if row[c] is None else str(row[c])) for c in CSV_COLUMNS]
        )


class AuditEventViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """The audit trail: who did what, to what, in which project, from where."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    lookup_value_regex = r"[0-9]+"
    # The trail grows without bound: a capped count (then the planner's estimate) and ?cursor=
    # keyset pages, as the job list (bench/audit_trail.py).
    pagination_class = EstimatedCountPagination
    renderer_classes = [PortalJSONRenderer, renderers.BrowsableAPIRenderer, CSVRenderer]

    def handle_exception(self, exc):
        # Errors answer in the API's JSON shape, also to a CSV request.
        if getattr(self.request, "accepted_renderer", None) is not None:
            self.request.accepted_renderer = PortalJSONRenderer()
            self.request.accepted_media_type = PortalJSONRenderer.media_type
        return super().handle_exception(exc)

    def shape_queryset(self, queryset):
        return queryset.order_by("-created_at", "-id")

    @extend_schema(
        # Two 200 media types make drf-spectacular miss that this is the list operation.
        operation_id="v1_audit_list",
        parameters=[
            OpenApiParameter(
                "format", str, enum=["json", "csv"], description="csv: every match as CSV."
            )
        ],
        responses={
            200: AuditEventSerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
            404: OpenApiResponse(
                ApiErrorSerializer, description="A project whose trail you cannot read."
            ),
        },
    )
    def list(self, request: Request) -> Response | StreamingHttpResponse:
        slug = request.query_params.get("project")
        if slug and administered_project_or_none(request.user, slug) is None:
            raise exceptions.NotFound(f"No project {slug!r} whose audit trail you can read.")
        if request.accepted_renderer.format != "csv":
            return super().list(request)
        events = self.filter_queryset(self.get_queryset())
        response = StreamingHttpResponse(csv_lines(events), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit.csv"'
        return response


router.register("audit", AuditEventViewSet, basename="audit")
