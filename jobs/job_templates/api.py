"""REST endpoints for saved job templates: /api/v1/templates/ (?project=slug).

Members and admins of a project create, change and delete its templates; viewers read them;
another tenant's template is a 404 like a missing one (TenantScopedViewSet). Submitting with a
template is POST /api/v1/jobs/ with "template": "<name>".
"""

from django.core.exceptions import ValidationError
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from jobs.job_templates.services import template_create, template_delete, template_update
from jobs.models import JobTemplate
from portal.api import StrictCharField, TenantScopedViewSet, router
from tenants.selectors import project_list_visible_to


class JobTemplateSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True
    )

    class Meta:
        model = JobTemplate
        fields = ["id", "project", "name", "fields", "created_by", "created_at", "updated_at"]
        read_only_fields = fields


class JobTemplateWriteSerializer(serializers.Serializer):
    project = StrictCharField(help_text="Project slug (ignored when changing a template).")
    name = StrictCharField(max_length=40)
    fields = serializers.DictField(
        help_text="Job fields as POST /api/v1/jobs/ takes them, without project and name."
    )


class JobTemplatePatchSerializer(serializers.Serializer):
    name = StrictCharField(max_length=40, required=False)
    fields = serializers.DictField(required=False)


@extend_schema_view(
    list=extend_schema(
        parameters=[OpenApiParameter("project", OpenApiTypes.STR, description="Project slug.")]
    )
)
class JobTemplateViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    queryset = JobTemplate.objects.all()
    project_field = "project"
    serializer_class = JobTemplateSerializer

    def shape_queryset(self, queryset):
        queryset = queryset.select_related("project", "created_by").order_by(
            "project__slug", "name"
        )
        project = self.request.query_params.get("project")
        if project and self.action == "list":
            queryset = queryset.filter(project__slug=project)
        return queryset

    @extend_schema(request=JobTemplateWriteSerializer, responses={201: JobTemplateSerializer})
    def create(self, request, *args, **kwargs):
        body = JobTemplateWriteSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        slug = body.validated_data["project"]
        project = project_list_visible_to(user=request.user).filter(slug=slug).first()
        if project is None:  # the same answer as a missing project
            raise ValidationError({"project": [f"No project {slug!r} that you belong to."]})
        template = template_create(
            actor=request.user,
            project=project,
            name=body.validated_data["name"],
            fields=body.validated_data["fields"],
        )
        return Response(JobTemplateSerializer(template).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=JobTemplatePatchSerializer, responses={200: JobTemplateSerializer})
    def partial_update(self, request, *args, **kwargs):
        template = self.get_object()
        body = JobTemplatePatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        template = template_update(
            actor=request.user,
            template=template,
            name=body.validated_data.get("name"),
            fields=body.validated_data.get("fields"),
        )
        return Response(JobTemplateSerializer(template).data)

    def perform_destroy(self, instance):
        template_delete(actor=self.request.user, template=instance)


router.register("templates", JobTemplateViewSet, basename="templates")
