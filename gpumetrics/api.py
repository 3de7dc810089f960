"""REST endpoints for GPU metrics:

- GET /api/v1/jobs/{id}/metrics/?series=&since=&until=&step=  (series per GPU device, summary)
- GET /api/v1/projects/{slug}/usage/?since=&until=&group_by=user|day|pool  (JSON or ?format=csv)

Tenancy comes from the base viewset: a job or project of another tenant answers 404.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime

from django.shortcuts import get_object_or_404
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from gpumetrics.attribution import SHARED_NOTE
from gpumetrics.selectors import SeriesQuery, job_metrics, project_usage
from gpumetrics.series import SERIES_NAMES
from jobs.models import Job
from portal.api import TenantScopedViewSet, router
from quotas import sharing
from tenants.models import Project

MAX_POINTS = 20_000


def _when(params, name: str) -> int | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(float(raw))
    except ValueError:
        pass
    parsed = parse_datetime(raw)
    if parsed is None:
        raise ValidationError(
            {
                name: [
                    f"{raw!r} is not a time: use ISO 8601 (2026-12-01T10:00:00Z) or epoch seconds."
                ]
            }
        )
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp())


def _range(params) -> tuple[int | None, int | None]:
    since, until = _when(params, "since"), _when(params, "until")
    if since is not None and until is not None and since > until:
        raise ValidationError({"until": ["must not be before since."]})
    return since, until


class SeriesPointsSerializer(serializers.Serializer):
    uuid = serializers.CharField(help_text="GPU UUID (the parent GPU's for a MIG instance).")
    mig_instance_id = serializers.CharField(allow_null=True, help_text="GPU_I_ID for MIG.")
    mig_profile = serializers.CharField(allow_null=True)
    gpu_index = serializers.CharField()
    model = serializers.CharField()
    node = serializers.CharField()
    pod = serializers.CharField()
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    timestamps = serializers.ListField(child=serializers.IntegerField(), help_text="Epoch s.")
    mean = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        help_text="Per series: the value at each timestamp (the mean over the step when "
        "rolled up); null where there was no reading.",
    )
    max = serializers.DictField(
        child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
        allow_null=True,
        help_text="Per series: the maximum over each step (null for raw samples).",
    )


class SummarySerializer(serializers.Serializer):
    final = serializers.BooleanField(help_text="False while the job runs.")
    util_mean = serializers.FloatField(allow_null=True)
    util_p95 = serializers.FloatField(allow_null=True)
    fb_peak_mib = serializers.FloatField(allow_null=True)
    fb_total_mib = serializers.FloatField(allow_null=True)
    energy_kwh = serializers.FloatField()
    gpu_hours = serializers.FloatField(help_text="GPU-hours held (a MIG slice counts its share).")
    idle = serializers.BooleanField(
        help_text="Below the idle threshold for most of the run (false when too short to judge)."
    )
    idle_verdict = serializers.ChoiceField(
        choices=["idle", "busy", "too_short"],
        help_text='"too_short" when the samples span under 5 minutes '
        "(PORTAL_METRICS_IDLE_MIN_MINUTES) or fewer than 5 sweeps: no idle judgement.",
    )
    idle_fraction = serializers.FloatField(
        allow_null=True, help_text="Share of the utilisation readings below the threshold."
    )
    idle_threshold = serializers.FloatField()
    idle_warning = serializers.BooleanField(help_text="An idle-for-30-minutes warning was raised.")
    samples = serializers.IntegerField()
    computed_at = serializers.DateTimeField()


class JobMetricsSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    state = serializers.CharField()
    resolution = serializers.CharField(help_text='"raw", 60 or 3600: what the points come from.')
    step = serializers.IntegerField(allow_null=True)
    since = serializers.DateTimeField(allow_null=True)
    until = serializers.DateTimeField(allow_null=True)
    series = serializers.ListField(child=serializers.DictField())
    devices = SeriesPointsSerializer(many=True)
    pods = serializers.ListField(child=serializers.DictField(), help_text="Devices per pod.")
    summary = SummarySerializer(allow_null=True)
    sharing_note = serializers.CharField(
        help_text='"shared GPU: figures are for the whole device" for a job of a time-slicing '
        "or MPS pool (the exporter does not split a shared GPU between pods); empty otherwise."
    )


class JobMetricsViewSet(TenantScopedViewSet):
    queryset = Job.objects.all()
    project_field = "project"
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "job_pk", OpenApiTypes.INT, OpenApiParameter.PATH, description="Job id."
            ),
            OpenApiParameter(
                "series",
                OpenApiTypes.STR,
                description="Comma-separated series: "
                + ", ".join(SERIES_NAMES)
                + " (default all).",
            ),
            OpenApiParameter("since", OpenApiTypes.STR, description="ISO 8601 or epoch seconds."),
            OpenApiParameter("until", OpenApiTypes.STR, description="ISO 8601 or epoch seconds."),
            OpenApiParameter(
                "step",
                OpenApiTypes.STR,
                description='"raw" (default: every scrape) or seconds per point (60, 3600, ...).',
            ),
        ],
        responses={200: JobMetricsSerializer},
    )
    def list(self, request, job_pk=None):
        """GPU metrics of one job: every series per GPU (or MIG instance) it ran on."""
        job = get_object_or_404(self.get_queryset(), pk=job_pk)
        params = request.query_params
        names = [s.strip() for s in (params.get("series") or "").split(",") if s.strip()]
        unknown = [s for s in names if s not in SERIES_NAMES]
        if unknown:
            raise ValidationError(
                {
                    "series": [
                        f"Unknown series {', '.join(unknown)}; known: {', '.join(SERIES_NAMES)}."
                    ]
                }
            )
        raw_step = (params.get("step") or "raw").strip()
        if raw_step in ("raw", "0"):
            step = 0
        elif raw_step.isdigit() and int(raw_step) >= 1:
            step = int(raw_step)
        else:
            raise ValidationError({"step": ['"raw" or a whole number of seconds (e.g. 60).']})
        since, until = _range(params)
        if step and since is not None and until is not None and (until - since) / step > MAX_POINTS:
            raise ValidationError(
                {"step": [f"too many points: at most {MAX_POINTS} per series; use a larger step."]}
            )
        data = job_metrics(
            job,
            SeriesQuery(series=tuple(names or SERIES_NAMES), since=since, until=until, step=step),
        )
        shared = job.pool_id is not None and sharing.is_shared(job.pool.sharing_mode)
        data["sharing_note"] = SHARED_NOTE if shared else ""
        return Response(data)

    def get_view_name(self):
        return "Job metrics"


class CsvRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        rows = data.get("rows") if isinstance(data, dict) else None
        out = io.StringIO()
        if rows is None:  # an error body
            out.write(str(data.get("detail", data) if isinstance(data, dict) else data))
            return out.getvalue().encode()
        key = data["group_by"]
        writer = csv.writer(out)
        writer.writerow([key, "jobs", "gpu_hours_held", "gpu_hours_used", "util_mean"])
        for row in rows:
            writer.writerow(
                [
                    row[key],
                    row["jobs"],
                    row["gpu_hours_held"],
                    row["gpu_hours_used"],
                    row["util_mean"],
                ]
            )
        return out.getvalue().encode()


class ProjectUsageViewSet(TenantScopedViewSet):
    queryset = Project.objects.all()
    project_field = ""
    pagination_class = None
    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "project_slug", OpenApiTypes.STR, OpenApiParameter.PATH, description="Project slug."
            ),
            OpenApiParameter("since", OpenApiTypes.STR, description="ISO 8601 or epoch seconds."),
            OpenApiParameter("until", OpenApiTypes.STR, description="ISO 8601 or epoch seconds."),
            OpenApiParameter("group_by", OpenApiTypes.STR, enum=["user", "day", "pool"]),
            OpenApiParameter("format", OpenApiTypes.STR, enum=["json", "csv"]),
        ],
        responses={
            200: inline_serializer(
                "ProjectUsage",
                {
                    "project": serializers.CharField(),
                    "group_by": serializers.CharField(),
                    "since": serializers.DateTimeField(allow_null=True),
                    "until": serializers.DateTimeField(allow_null=True),
                    "rows": serializers.ListField(child=serializers.DictField()),
                },
            ),
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    def list(self, request, project_slug=None):
        """GPU-hours held and used and mean utilisation of a project's ended jobs (hourly
        rollups), per user, day or pool; CSV with ?format=csv."""
        project = get_object_or_404(self.get_queryset(), slug=project_slug)
        group_by = request.query_params.get("group_by") or "user"
        if group_by not in ("user", "day", "pool"):
            raise ValidationError({"group_by": ['one of "user", "day", "pool".']})
        since, until = _range(request.query_params)
        rows = project_usage(project, since=since, until=until, group_by=group_by)
        iso = lambda t: datetime.fromtimestamp(t, tz=UTC).isoformat() if t is not None else None  # noqa: E731
        return Response(
            {
                "project": project.slug,
                "group_by": group_by,
                "since": iso(since),
                "until": iso(until),
                "rows": rows,
            }
        )


router.register(r"jobs/(?P<job_pk>[0-9]+)/metrics", JobMetricsViewSet, basename="job-metrics")
router.register(
    r"projects/(?P<project_slug>[a-z0-9]([-a-z0-9]*[a-z0-9])?)/usage",
    ProjectUsageViewSet,
    basename="project-usage",
)
