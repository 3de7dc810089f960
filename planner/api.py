"""REST endpoints of the planner:

- GET  /api/v1/forecast/?project=&kind=&gpus=...   when a job like this would start (the
  parameters of a submission; nothing is stored)
- GET  /api/v1/jobs/{id}/advice/                   a waiting job's forecast and what would start
  sooner instead
- POST /api/v1/whatif/                             staff: replay a period under proposed quotas
- POST /api/v1/whatif/apply/                       staff: set the proposed quotas (quota service)

Tenancy comes from the base viewset: another tenant's project or job answers like a missing one.
"""

from __future__ import annotations

from datetime import timedelta

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from jobs.models import Job
from jobs.services import job_submit
from jobs.submission.api import JobCreateSerializer
from planner import advice, selectors, services
from portal.api import TenantScopedViewSet, router
from portal.api_errors import ApiErrorSerializer
from tenants.models import Project

# The submission's scalar fields, taken from the query string.
FORECAST_PARAMETERS = (
    "project",
    "kind",
    "image",
    "gpus",
    "mig_profile",
    "replicas",
    "pool",
    "cpu",
    "memory",
    "priority",
    "max_runtime_minutes",
    "backend",
)
PLACEHOLDER_IMAGE = "busybox"  # the image only picks the history of similar runs
MAX_WHATIF_DAYS = 92


class ForecastViewSet(TenantScopedViewSet):
    queryset = Project.objects.all()
    project_field = ""
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter(name, OpenApiTypes.STR, description=f"As in a job submission: {name}.")
            for name in FORECAST_PARAMETERS
        ],
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(ApiErrorSerializer, description="A field is missing or wrong."),
            403: OpenApiResponse(ApiErrorSerializer, description="You may not submit here."),
        },
    )
    def list(self, request):
        """When a job with these fields would likely start (a range), or that it cannot."""
        data = {k: v for k, v in request.query_params.items() if k in FORECAST_PARAMETERS}
        data.setdefault("image", PLACEHOLDER_IMAGE)
        serializer = JobCreateSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        project = fields.pop("project")
        try:
            outcome = job_submit(actor=request.user, project=project, data=fields, dry_run=True)
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        if not outcome.validation.ok or outcome.unsaved is None:
            raise exceptions.ValidationError(outcome.validation.errors)
        forecast = selectors.forecast_for_unsaved(outcome.unsaved)
        return Response({"forecast": forecast.as_dict()})

    def get_view_name(self):
        return "Forecast"


class JobAdviceViewSet(TenantScopedViewSet):
    queryset = Job.objects.select_related("project__department", "pool")
    project_field = "project"
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "job_pk", OpenApiTypes.INT, OpenApiParameter.PATH, description="Job id."
            )
        ],
        responses={
            200: OpenApiTypes.OBJECT,
            404: OpenApiResponse(ApiErrorSerializer, description="No such job of yours."),
        },
    )
    def list(self, request, job_pk=None):
        """A waiting job's forecast and the alternatives that would start now or much sooner
        (each a complete submission body); none for a job that is not waiting."""
        job = get_object_or_404(self.get_queryset(), pk=job_pk)
        result = advice.pending_advice(job=job, actor=request.user)
        return Response(
            {
                "job": job.pk,
                "forecast": result.forecast.as_dict() if result.forecast else None,
                "alternatives": [a.as_dict() for a in result.alternatives],
                "later": result.later.as_dict() if result.later else None,
            }
        )

    def get_view_name(self):
        return "Job advice"


class ProposedQuotaSerializer(serializers.Serializer):
    project = serializers.CharField(max_length=63)
    pool = serializers.CharField(max_length=40)
    resource = serializers.CharField(max_length=32, required=False, default="gpu")
    nominal = serializers.IntegerField(min_value=0, max_value=1_000_000)
    borrowing_limit = serializers.IntegerField(
        min_value=0, max_value=1_000_000, required=False, allow_null=True, default=None
    )


class WhatIfSerializer(serializers.Serializer):
    start = serializers.DateTimeField(required=False, help_text="Default: 28 days ago.")
    end = serializers.DateTimeField(required=False, help_text="Default: now.")
    quotas = ProposedQuotaSerializer(
        many=True, required=False, default=list, help_text="Proposed quotas (changed rows)."
    )

    def validate(self, attrs):
        end = attrs.get("end") or timezone.now()
        start = attrs.get("start") or end - timedelta(days=28)
        if start >= end:
            raise serializers.ValidationError({"end": ["must be after start."]})
        if end - start > timedelta(days=MAX_WHATIF_DAYS):
            raise serializers.ValidationError(
                {"start": [f"the period may be at most {MAX_WHATIF_DAYS} days long."]}
            )
        attrs["start"], attrs["end"] = start, end
        return attrs


class WhatIfViewSet(TenantScopedViewSet):
    """Staff only: every project's jobs are replayed."""

    queryset = Project.objects.all()
    serializer_class = WhatIfSerializer  # also what OPTIONS describes
    project_field = ""
    pagination_class = None

    def _require_staff(self, request) -> None:
        if not request.user.is_staff:
            raise exceptions.PermissionDenied("Only staff may run a quota what-if.")

    def _proposal(self, request):
        serializer = WhatIfSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        entries = selectors.proposal_entries(data["quotas"])
        return data, entries

    @extend_schema(
        request=WhatIfSerializer,
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(ApiErrorSerializer, description="A field is wrong."),
            403: OpenApiResponse(ApiErrorSerializer, description="Not staff."),
        },
    )
    def create(self, request):
        """Replay the period's real jobs under today's quotas and under the proposal; per
        project: median and p90 wait, GPU-hours served, borrowed GPU-hours, preemptions."""
        self._require_staff(request)
        data, entries = self._proposal(request)
        result = selectors.whatif_compare(start=data["start"], end=data["end"], proposal=entries)
        return Response(result)

    @extend_schema(
        request=WhatIfSerializer,
        responses={
            200: OpenApiTypes.OBJECT,
            400: OpenApiResponse(ApiErrorSerializer, description="A field is wrong."),
            403: OpenApiResponse(ApiErrorSerializer, description="Not staff."),
        },
    )
    @action(detail=False, methods=["post"])
    def apply(self, request):
        """Set the proposed quotas through the quota service (audited, synced to the cluster)."""
        self._require_staff(request)
        _, entries = self._proposal(request)
        changed = services.whatif_apply(actor=request.user, proposal=entries)
        return Response({"applied": changed})

    def get_view_name(self):
        return "Quota what-if"


router.register("forecast", ForecastViewSet, basename="forecast")
router.register(r"jobs/(?P<job_pk>[0-9]+)/advice", JobAdviceViewSet, basename="job-advice")
router.register("whatif", WhatIfViewSet, basename="whatif")
