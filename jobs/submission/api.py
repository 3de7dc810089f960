"""REST endpoints for jobs: /api/v1/jobs/ (create, list, detail), manifest/ and cancel/."""

import yaml
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
)
from rest_framework import exceptions, mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response

from jobs import idempotency
from jobs.arrays.api import JobArrayDetailSerializer, array_body
from jobs.arrays.services import array_submit
from jobs.arrays.shape import is_array_request
from jobs.job_templates.services import template_for_submission, with_template_fields
from jobs.logs import selectors as job_logs
from jobs.models import Job, JobEvent, JobKind, JobPod, SubmissionKey
from jobs.redact import hidden_env, redact_manifests
from jobs.render import manifests_yaml
from jobs.selectors import job_manifests, writable_project_ids
from jobs.services import InvalidTransition, job_cancel, job_submit
from jobs.states import JobState
from jobs.submission.again import fields_of_job
from jobs.submission.filters import JobFilter
from jobs.validation import BACKENDS, PRIORITIES
from planner.selectors import forecast_dict
from portal.api import StrictCharField, TenantScopedViewSet, router
from portal.api_errors import ApiErrorSerializer
from portal.api_io import PortalJSONRenderer
from portal.api_pagination import EstimatedCountPagination
from tenants.permissions import can_write


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = [
            "created_at",
            "from_state",
            "to_state",
            "reason",
            "message",
            "source",
            "occurred_at",
            "count",
            "warning",
        ]


class JobPodSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobPod
        fields = [
            "name",
            "rank",
            "node",
            "phase",
            "started_at",
            "finished_at",
            "gpu_indices",
            "gpu_uuids",
            "exit_code",
            "reason",
            "message",
            "restart_count",
            "deleted",
        ]


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string", "nullable": True},
        "description": "Environment variables. Values are null for viewers of the project: "
        "only its members and admins may read them.",
    }
)
class EnvField(serializers.Field):
    """A job's env, values withheld (null) from users who cannot write in its project."""

    def __init__(self, **kwargs):
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, job: Job) -> dict:
        if self._may_read_values(job):
            return dict(job.env)
        return hidden_env(job.env)

    def _may_read_values(self, job: Job) -> bool:
        request = self.context.get("request")
        if request is None:
            return False
        # One role lookup per project per answer, not per job of a list.
        cache = self.context.setdefault("_env_readable", {})
        if job.project_id not in cache:
            cache[job.project_id] = can_write(request.user, job.project)
        return cache[job.project_id]


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {
                "type": "object",
                "properties": {"secret": {"type": "string"}, "key": {"type": "string"}},
                "required": ["secret", "key"],
            },
        ],
    }
)
class EnvValueField(serializers.Field):
    """A plain string, or a reference to a key of a project credential (jobs.secret_refs
    checks the reference)."""

    default_error_messages = {
        "invalid": "Not a valid value: send a string or "
        '{{"secret": "<credential>", "key": "<key>"}}.'
    }

    def to_internal_value(self, data):
        if isinstance(data, str | dict):
            return data
        self.fail("invalid")

    def to_representation(self, value):
        return value


class JobSerializer(serializers.ModelSerializer):
    """What a job looks like when read."""

    project = serializers.CharField(source="project.slug", read_only=True)
    submitter = serializers.CharField(source="submitter.username", read_only=True)
    pool = serializers.CharField(source="pool.slug", read_only=True, allow_null=True)
    is_terminal = serializers.BooleanField(read_only=True)
    env = EnvField()
    mounts = serializers.SerializerMethodField(
        help_text="Data volumes in the pods: volume, claim, path, read_only."
    )
    checkpoint_dir = serializers.CharField(
        read_only=True,
        help_text="CHECKPOINT_DIR in the pods: where the job's checkpoints are (on the project's "
        "checkpoint volume), the same after preemption, requeue and resume; empty without one.",
    )
    resume_from = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    gpu_fraction = serializers.FloatField(
        read_only=True, allow_null=True, help_text="The fraction of one GPU asked for (KAI pools)."
    )
    gpu_memory = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="MiB of one GPU asked for (KAI pools)."
    )
    # Issue 26: what the job page says about the GPU's sharing, and the DRA device asked for.
    isolation = serializers.CharField(
        read_only=True,
        help_text="One sentence: what isolation the job's GPU has (exclusive, MIG, "
        "time-slicing or MPS), from its pool's sharing mode.",
    )
    device_request = serializers.SerializerMethodField(
        help_text="DRA-managed pools: the device asked for by its attributes, e.g. "
        '{"min_memory": "40Gi"}; empty otherwise.'
    )

    @extend_schema_field({"type": "object", "additionalProperties": {"type": "string"}})
    def get_device_request(self, job: Job) -> dict:
        return dict(job.device_request or {})

    @extend_schema_field(
        {"type": "array", "items": {"type": "object", "additionalProperties": True}}
    )
    def get_mounts(self, job: Job) -> list:
        return list(job.mounts or [])

    class Meta:
        model = Job
        fields = [
            "id",
            "project",
            "name",
            "kind",
            "state",
            "state_reason",
            "state_message",
            "is_terminal",
            "submitter",
            "image",
            "command",
            "env",
            "secret_files",
            "gpus",
            "mig_profile",
            "replicas",
            "pool",
            "cpu",
            "memory",
            "priority",
            "max_runtime_minutes",
            "backend",
            "created_at",
            "state_changed_at",
            "queue_position",
            "queue_length",
            "explanation",
            "mounts",
            "shm_size",
            "termination_grace_seconds",
            "checkpoint_dir",
            "resume_from",
            "gpu_fraction",
            "gpu_memory",
            "isolation",
            "device_request",
        ]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    pods = JobPodSerializer(many=True, read_only=True, source="pod_records")

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "events", "pods"]
        read_only_fields = fields


class JobCreatedSerializer(JobDetailSerializer):
    """The answer to a submission: the job, and advice that did not stop it."""

    warnings = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta(JobDetailSerializer.Meta):
        fields = [*JobDetailSerializer.Meta.fields, "warnings"]
        read_only_fields = fields


class JobCreateSerializer(serializers.Serializer):
    """The request. Shapes only; the rules (quota, MIG, env, sizes) are in jobs.validation."""

    project = StrictCharField(help_text="Project slug.")
    name = StrictCharField(required=False, allow_blank=True, max_length=63)
    kind = serializers.ChoiceField(choices=JobKind.choices)
    image = StrictCharField(max_length=1024)
    command = serializers.ListField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
        default=list,
    )
    env = serializers.DictField(
        child=EnvValueField(),
        required=False,
        default=dict,
        help_text='NAME → a string, or {"secret": "<credential>", "key": "<key>"} to take the '
        "value from a project credential (the value never passes through the portal's job).",
    )
    secret_files = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        default=list,
        help_text='[{"secret": "<credential>", "path": "/var/run/gcp"}]: the credential\'s keys '
        "as read-only files in that directory.",
    )
    gpus = serializers.IntegerField(required=False, allow_null=True)
    mig_profile = StrictCharField(required=False, allow_blank=True, max_length=32)
    replicas = serializers.IntegerField(required=False, allow_null=True)
    pool = StrictCharField(required=False, allow_blank=True, max_length=40)
    cpu = StrictCharField(required=False, allow_blank=True, max_length=16)
    memory = StrictCharField(required=False, allow_blank=True, max_length=16)
    priority = serializers.ChoiceField(choices=PRIORITIES, required=False, default="normal")
    max_runtime_minutes = serializers.IntegerField(required=False, allow_null=True)
    backend = serializers.ChoiceField(
        choices=BACKENDS,
        required=False,
        allow_blank=True,
        help_text="Which scheduler: empty = the pool's (kueue, volcano for gangs, or kai).",
    )
    # Issue 25: range, step and pool are checked by jobs.validation, which names the field.
    gpu_fraction = serializers.FloatField(
        required=False,
        allow_null=True,
        error_messages={
            "invalid": "A fraction of one GPU is a number greater than 0 and less than 1, "
            "e.g. 0.25 or 0.5."
        },
        help_text="A fraction of one GPU (0 < f < 1, a multiple of the pool's fraction_step), "
        "instead of gpus; KAI pools that allow fractions only.",
    )
    gpu_memory = serializers.IntegerField(
        required=False,
        allow_null=True,
        error_messages={"invalid": "GPU memory is a whole number of MiB, e.g. 20000."},
        help_text="MiB of one GPU's memory, instead of gpus or gpu_fraction; KAI pools only.",
    )
    # Shapes are checked by jobs.mounts, which names the item (mounts[1].path).
    mounts = serializers.JSONField(
        required=False,
        help_text='Data volumes: [{"volume": "imagenet", "path": "/data", "read_only": true}]; '
        "path defaults to the volume's default mount path, read_only to its access.",
    )
    device = serializers.JSONField(
        required=False,
        help_text='DRA-managed pools only: the GPU by its attributes, e.g. {"min_memory": "40Gi", '
        '"architecture": "Hopper", "min_compute_capability": "8.0", "product_name": '
        '"NVIDIA H100 80GB HBM3"}.',
    )
    shm_size = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=16,
        help_text="Memory-backed /dev/shm, e.g. 8Gi; default half the memory, capped by the pool.",
    )
    termination_grace_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=7 * 24 * 3600,
        help_text="Seconds between SIGTERM and the kill on preemption or cancel (default 60, "
        "at most the pool's maximum).",
    )
    resume_from = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=2**63 - 1,
        help_text="Id of an earlier, finished job of the project whose checkpoint directory "
        "this job continues in.",
    )
    # Many jobs in one request (jobs/arrays.py): the answer is the array (/api/v1/arrays/).
    array = serializers.JSONField(
        required=False, help_text='An array of N elements: {"count": N, "parallelism": P}.'
    )
    sweep = serializers.JSONField(
        required=False,
        help_text='A parameter grid, one element per combination: {"lr": [0.1, 0.01]}.',
    )
    parallelism = serializers.JSONField(
        required=False, help_text="With sweep: at most this many elements in the cluster at once."
    )
    template = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=40,
        help_text="Name of a saved template of the project (/api/v1/templates/): its fields are "
        "the request's, and the fields given here override them.",
    )

    def validate(self, attrs):
        # Say so when a client sends something the portal does not take (a pod spec, a
        # securityContext, a misspelt field) instead of silently dropping it.
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            allowed = ", ".join(self.fields)
            raise serializers.ValidationError(
                {name: [f"Unknown field; a job takes only: {allowed}."] for name in unknown}
            )
        return attrs


class DryRunSerializer(serializers.Serializer):
    valid = serializers.BooleanField()
    warnings = serializers.ListField(child=serializers.CharField())
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))
    manifests = serializers.ListField(child=serializers.DictField())
    forecast = serializers.JSONField(
        allow_null=True,
        help_text="When it would likely start: low_seconds, high_seconds (from now; null past "
        "the horizon), starts_now, possible, pool and a sentence (text). Null when invalid.",
    )


class YamlRenderer(BaseRenderer):
    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, str):
            return data.encode()
        return yaml.safe_dump(data, sort_keys=False).encode()


class PlainTextRenderer(BaseRenderer):
    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, dict):
            return (str(data.get("detail") or data) + "\n").encode()
        return str(data).encode()


JOB_OR_ARRAY = PolymorphicProxySerializer(
    component_name="JobOrArray",
    serializers=[JobCreatedSerializer, JobArrayDetailSerializer],
    resource_type_field_name=None,
)


class JobViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    TenantScopedViewSet,
):
    queryset = Job.objects.all()
    project_field = "project"
    filterset_class = JobFilter
    pagination_class = EstimatedCountPagination

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if self.action == "list":
            # EnvField's per-project role lookups answered by one query, so the list's query
            # count does not grow with the number of projects on a page.
            context["_env_readable"] = writable_project_ids(user=self.request.user)
        return context

    def shape_queryset(self, queryset):
        queryset = queryset.select_related("project", "submitter", "pool").order_by(
            "-created_at", "-id"
        )
        if self.action == "retrieve":
            queryset = queryset.prefetch_related("events", "pod_records")
        return queryset

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        if self.action == "manifest":
            # Errors keep the API's JSON shape even where YAML was negotiated (or the format
            # was unknown, when DRF falls back to the first renderer).
            self.request.accepted_renderer = PortalJSONRenderer()
            self.request.accepted_media_type = PortalJSONRenderer.media_type
        return response

    def get_serializer_class(self):
        if self.action == "create":
            return JobCreateSerializer
        if self.action == "retrieve":
            return JobDetailSerializer
        return JobSerializer

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "dry_run",
                OpenApiTypes.BOOL,
                description="Validate and render the manifests without storing anything.",
            ),
            OpenApiParameter(
                idempotency.HEADER,
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": idempotency.MAX_LENGTH,
                    "pattern": "^[ -~]+$",
                },
                location=OpenApiParameter.HEADER,
                description="A key of your choosing (a UUID) for this submission, so it can be "
                "sent again safely when the answer was lost: a repeat with the same key and "
                "body returns the first submission's job or array (200) instead of a second "
                "one; the same key with another body is a 422. Keys are per user and kept "
                "24 hours (PORTAL_IDEMPOTENCY_KEY_HOURS). Ignored by dry runs.",
            ),
        ],
        request=JobCreateSerializer,
        responses={
            201: JOB_OR_ARRAY,
            200: PolymorphicProxySerializer(
                component_name="DryRunOrRepeat",
                serializers=[DryRunSerializer, JobCreatedSerializer, JobArrayDetailSerializer],
                resource_type_field_name=None,
            ),
            422: OpenApiResponse(
                ApiErrorSerializer,
                description=f"The {idempotency.HEADER} was used before with a different body.",
            ),
        },
    )
    def create(self, request, *args, **kwargs):
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        key = None
        if not dry_run:
            key = idempotency.parse_idempotency_key(
                request.headers.get(idempotency.HEADER), body=request.data
            )
        if key is not None:
            previous = _previous_submission(request.user, key)
            if previous is not None:
                return self._repeat(request, previous)
        serializer = JobCreateSerializer(data=with_template(request.user, request.data))
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        data.pop("template", None)
        try:
            if is_array_request(data) or data.get("parallelism") is not None:
                return self._create_array(request, data, dry_run, key)
            outcome = job_submit(
                actor=request.user,
                project=data.pop("project"),
                data=data,
                dry_run=dry_run,
                idempotency=key,
            )
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        except idempotency.AlreadySubmitted as exc:
            return self._repeat(request, exc.previous)
        except idempotency.KeyReused as exc:
            raise IdempotencyKeyReused({idempotency.HEADER: [str(exc)]}) from exc
        if dry_run:
            body = {
                "valid": outcome.validation.ok,
                "errors": outcome.validation.errors,
                "warnings": outcome.warnings,
                "manifests": outcome.manifests,
                # When it would likely start (planner): None for an invalid request.
                "forecast": forecast_dict(outcome.unsaved) if outcome.validation.ok else None,
            }
            return Response(body, status=status.HTTP_200_OK)
        return self._created(outcome)

    def _created(self, outcome) -> Response:
        """201 with the stored job as it is in memory (no re-read): its one event is the
        submission."""
        context = self.get_serializer_context()
        # job_submit has just checked that the submitter may write in the project: the env's
        # values are theirs to read without asking the database again.
        context["_env_readable"] = {outcome.job.project_id: True}
        data = JobSerializer(outcome.job, context=context).data
        data["events"] = JobEventSerializer(outcome.events, many=True).data
        data["pods"] = []  # none yet: the job was only stored
        # Advice (e.g. a plain value that looks like a credential); the job was stored.
        data["warnings"] = outcome.warnings
        return Response(data, status=status.HTTP_201_CREATED)

    def _create_array(self, request, data, dry_run: bool, key) -> Response:
        if dry_run:
            raise exceptions.ValidationError(
                {"dry_run": ["A dry run takes one job; submit the array without dry_run."]}
            )
        array = array_submit(
            actor=request.user, project=data.pop("project"), data=data, idempotency=key
        )
        return Response(array_body(array, request, self), status=status.HTTP_201_CREATED)

    def _repeat(self, request, previous: SubmissionKey) -> Response:
        """The answer to a repeated Idempotency-Key: the first submission's job or array as it
        is now, with 200 (the first answer was 201)."""
        headers = {"Idempotent-Replayed": "true"}
        if previous.array_id is not None:
            body = array_body(previous.array, request, self)
            return Response(body, status=status.HTTP_200_OK, headers=headers)
        job = (
            self.shape_queryset(Job.objects.filter(pk=previous.job_id))
            .prefetch_related("events", "pod_records")
            .get()
        )
        body = dict(JobDetailSerializer(job, context=self.get_serializer_context()).data)
        body["warnings"] = []
        return Response(body, status=status.HTTP_200_OK, headers=headers)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "format",
                OpenApiTypes.STR,
                enum=["yaml", "json"],
                description="yaml (the default): one multi-document YAML text; json: a list "
                "of the objects. An Accept header of application/json does the same.",
            )
        ],
        responses={
            (200, "application/yaml"): OpenApiResponse(
                OpenApiTypes.STR, description="The objects as multi-document YAML."
            ),
            (200, "application/json"): OpenApiResponse(
                {"type": "array", "items": {"type": "object", "additionalProperties": True}},
                description="The objects as a JSON list.",
            ),
        },
    )
    @action(detail=True, methods=["get"], renderer_classes=[YamlRenderer, PortalJSONRenderer])
    def manifest(self, request, pk=None):
        """The job's Kubernetes objects exactly as the reconciler applies them, as YAML (or a
        JSON list with ?format=json). Env values are hidden from viewers."""
        job = self.get_object()
        manifests = job_manifests(job)
        if not can_write(request.user, job.project):
            manifests = redact_manifests(manifests, job.env)
        if request.accepted_renderer.format == "json":
            return Response(manifests)
        return Response(manifests_yaml(manifests))

    @extend_schema(
        request=None,
        responses={
            200: JobDetailSerializer,
            409: OpenApiResponse(
                ApiErrorSerializer, description="The job is already finished or cancelled."
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel the job: its cluster objects are deleted; a finished job answers 409."""
        job = self.get_object()
        try:
            job_cancel(actor=request.user, job=job)
        except InvalidTransition as exc:
            return Response(
                {
                    "detail": f"Job {job.name} is already {JobState(exc.current).label.lower()}; "
                    "there is nothing to cancel.",
                    "errors": {},
                },
                status=status.HTTP_409_CONFLICT,
            )
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        job = self.shape_queryset(Job.objects.filter(pk=job.pk)).prefetch_related("events").get()
        return Response(JobDetailSerializer(job, context=self.get_serializer_context()).data)

    @extend_schema(
        request=None,
        responses={
            201: JobCreatedSerializer,
            400: OpenApiResponse(
                ApiErrorSerializer,
                description="The job's request is no longer valid (for example its pool is "
                "gone or the project has no quota there); the errors name the fields.",
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def resubmit(self, request, pk=None):
        """Submit the job again: a new job with the same request (image, command, shape, pool,
        priority, mounts, credentials; a new name). The job itself is left as it is. The audit
        trail records it as job.resubmit of this job."""
        job = self.get_object()
        fields = fields_of_job(job)
        try:
            outcome = job_submit(
                actor=request.user, project=fields.pop("project"), data=fields, resubmit_of=job
            )
        except DjangoPermissionDenied as exc:
            raise exceptions.PermissionDenied(str(exc)) from exc
        return self._created(outcome)

    @extend_schema(
        parameters=[
            OpenApiParameter("pod", OpenApiTypes.STR, description="Pod name (default: rank 0)."),
            OpenApiParameter("rank", OpenApiTypes.INT, description="Gang rank instead of pod."),
            OpenApiParameter("tail", OpenApiTypes.INT, description="Only the last N lines."),
            OpenApiParameter("since", OpenApiTypes.STR, description="e.g. 90s, 10m, 2h."),
            OpenApiParameter("previous", OpenApiTypes.BOOL, description="Restarted container."),
            OpenApiParameter("follow", OpenApiTypes.BOOL, description="Stream until it ends."),
        ],
        responses={
            (200, "text/plain"): OpenApiTypes.STR,
            409: OpenApiResponse(
                ApiErrorSerializer, description="The job has not started a pod yet: no logs."
            ),
            410: OpenApiResponse(
                ApiErrorSerializer,
                description="The pod no longer exists (the job page keeps its last lines).",
            ),
        },
    )
    @action(detail=True, methods=["get"], renderer_classes=[PlainTextRenderer, PortalJSONRenderer])
    def logs(self, request, pk=None):
        """The job's container log as text; ?follow=true streams until the pod ends."""
        job = self.get_object()
        query, errors = job_logs.parse_log_query(request.query_params)
        if errors:
            first = next(iter(errors.values()))[0]
            return Response({"detail": first, "errors": errors}, status=400)
        try:
            record = job_logs.choose_pod(job, pod=query.pod, rank=query.rank)
            chunks = job_logs.stream(
                job,
                record,
                tail=query.tail,
                since_seconds=query.since_seconds,
                previous=query.previous,
                follow=query.follow,
            )
        except job_logs.LogsUnavailable as exc:
            # The plain sentence as text, or the usual error shape for a JSON client.
            return Response({"detail": str(exc), "errors": {}}, status=exc.status)
        response = StreamingHttpResponse(job_logs.safe_chunks(chunks), content_type=TEXT)
        response["X-Pod"] = record.name
        response["Cache-Control"] = "no-cache"
        return response


TEXT = "text/plain; charset=utf-8"


class IdempotencyKeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = f"This {idempotency.HEADER} was already used for a different request."
    default_code = "idempotency_key_reused"


def _previous_submission(user, key: idempotency.IdempotencyKey) -> SubmissionKey | None:
    try:
        return idempotency.previous_submission(user=user, key=key)
    except idempotency.KeyReused as exc:
        raise IdempotencyKeyReused({idempotency.HEADER: [str(exc)]}) from exc


def with_template(user, data):
    """The request body with a named template's fields under it (explicit fields win)."""
    if not isinstance(data, dict) or not isinstance(data.get("template"), str):
        return data
    if not data["template"] or not isinstance(data.get("project"), str):
        return data
    template = template_for_submission(user=user, project=data["project"], name=data["template"])
    explicit = data.dict() if hasattr(data, "dict") else dict(data)  # a form post's QueryDict
    return with_template_fields(template.fields, explicit)


router.register("jobs", JobViewSet, basename="jobs")
