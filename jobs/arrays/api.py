"""REST endpoints for job arrays and sweeps: /api/v1/arrays/ (list, detail with per-state counts
and paged elements), cancel/ and resubmit-failed/. Arrays are created by POST /api/v1/jobs/ with
"array" or "sweep" (jobs.submission.api)."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from jobs.arrays.selectors import (
    array_counts,
    array_elements,
    with_counts,
    with_totals,
)
from jobs.arrays.services import NothingToDo, array_cancel, array_resubmit_failed
from jobs.models import Job, JobArray
from jobs.states import JobState
from portal.api import PortalPagination, TenantScopedViewSet, router
from portal.api_errors import ApiErrorSerializer


class ArrayElementSerializer(serializers.ModelSerializer):
    index = serializers.IntegerField(source="array_index", read_only=True)
    is_terminal = serializers.BooleanField(read_only=True)
    applied = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "index",
            "id",
            "name",
            "state",
            "state_reason",
            "state_message",
            "is_terminal",
            "applied",
            "params",
            "state_changed_at",
        ]
        read_only_fields = fields

    def get_applied(self, job: Job) -> bool:
        """Whether it was ever applied to the cluster: false while the element waits in the
        portal for a slot of the array's parallelism (or was cancelled while waiting)."""
        return job.applied_at is not None


class CountsField(serializers.DictField):
    child = serializers.IntegerField()


class JobArraySerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    submitter = serializers.CharField(source="submitter.username", read_only=True)
    counts = serializers.SerializerMethodField(
        help_text="Elements per state, plus held (waiting in the portal for a slot), active "
        "and total."
    )

    class Meta:
        model = JobArray
        fields = [
            "id",
            "project",
            "name",
            "submitter",
            "count",
            "parallelism",
            "sweep",
            "created_at",
            "counts",
        ]
        read_only_fields = fields

    def get_counts(self, array: JobArray) -> dict[str, int]:
        if hasattr(array, "n_held"):  # annotated by the list
            return with_totals(
                {key[2:]: value for key, value in vars(array).items() if key.startswith("n_")}
            )
        return array_counts(array=array)


class ElementPageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    results = ArrayElementSerializer(many=True)


class JobArrayDetailSerializer(JobArraySerializer):
    elements = ElementPageSerializer(read_only=True, help_text="Paged: ?page=, ?page_size=.")

    class Meta(JobArraySerializer.Meta):
        fields = [*JobArraySerializer.Meta.fields, "elements"]
        read_only_fields = fields


class ResubmitSerializer(serializers.Serializer):
    index = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=100_000,
        help_text="Only this element (its index).",
    )


def array_body(array: JobArray, request, view=None) -> dict:
    """The array with its counts and the requested page of its elements."""
    states = [s for s in request.query_params.getlist("state") if s in JobState.values]
    paginator = PortalPagination()
    page = paginator.paginate_queryset(array_elements(array=array, state=states), request, view)
    body = dict(JobArraySerializer(array).data)
    body["elements"] = paginator.get_paginated_response(
        ArrayElementSerializer(page, many=True).data
    ).data
    return body


class JobArrayViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    queryset = JobArray.objects.all()
    project_field = "project"
    serializer_class = JobArraySerializer

    def shape_queryset(self, queryset):
        queryset = queryset.select_related("project", "submitter").order_by("-created_at", "-id")
        if self.action == "list":
            queryset = with_counts(queryset)
        return queryset

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "state",
                OpenApiTypes.STR,
                many=True,
                enum=JobState.values,
                description="Only elements in these states.",
            )
        ],
        responses={200: JobArrayDetailSerializer},
    )
    def retrieve(self, request, *args, **kwargs):
        """The array, its per-state counts and a page of its elements (index order)."""
        return Response(array_body(self.get_object(), request, self))

    @extend_schema(
        request=None,
        responses={
            200: JobArrayDetailSerializer,
            409: OpenApiResponse(ApiErrorSerializer, description="No element is active."),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel every element still queued, held or running; finished ones stay as they are."""
        array = self.get_object()
        try:
            array_cancel(actor=request.user, array=array)
        except NothingToDo as exc:
            return Response({"detail": str(exc), "errors": {}}, status=status.HTTP_409_CONFLICT)
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(array_body(array, request, self))

    @extend_schema(
        request=ResubmitSerializer,
        responses={
            200: JobArrayDetailSerializer,
            409: OpenApiResponse(ApiErrorSerializer, description="No failed element."),
        },
    )
    @action(detail=True, methods=["post"], url_path="resubmit-failed")
    def resubmit_failed(self, request, pk=None):
        """Submit the failed elements again (or only {"index": i}), each as a new job with the
        same index, parameters and env; the failed attempt keeps its history."""
        array = self.get_object()
        body = ResubmitSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        try:
            array_resubmit_failed(
                actor=request.user, array=array, index=body.validated_data.get("index")
            )
        except NothingToDo as exc:
            return Response({"detail": str(exc), "errors": {}}, status=status.HTTP_409_CONFLICT)
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return Response(array_body(array, request, self))


router.register("arrays", JobArrayViewSet, basename="arrays")
