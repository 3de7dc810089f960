"""REST endpoints for projects and memberships (/api/v1/projects/, /api/v1/memberships/)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.selectors import usage_rows_for_projects
from portal.api import TenantScopedViewSet, router
from quotas.selectors import quota_rows_for_projects
from tenants.filters import MembershipFilter, ProjectFilter
from tenants.models import Membership, Project, Role
from tenants.permissions import can_manage_members
from tenants.selectors import membership_list_of_user, project_list_visible_to, with_my_role
from tenants.services import membership_add, membership_change_role, membership_remove


class QuotaRowSerializer(serializers.Serializer):
    pool = serializers.CharField(source="pool_slug", help_text="GPU pool slug.")
    pool_name = serializers.CharField()
    gpu_model = serializers.CharField()
    resource = serializers.CharField(help_text="'gpu' for whole GPUs or a MIG profile name.")
    nominal = serializers.IntegerField(help_text="Guaranteed amount.")
    borrowing_limit = serializers.IntegerField(
        allow_null=True, help_text="How much more may be borrowed; null means no limit."
    )
    maximum = serializers.IntegerField(
        help_text="Most the project can use: its nominal plus what it may borrow from the other "
        "projects of its department."
    )


class UsageRowSerializer(serializers.Serializer):
    pool = serializers.CharField(help_text="GPU pool slug.")
    resource = serializers.CharField(help_text="'gpu' or a MIG profile name.")
    queue = serializers.CharField(source="queue_name")
    in_use = serializers.DecimalField(max_digits=12, decimal_places=3, coerce_to_string=False)
    reserved = serializers.DecimalField(max_digits=12, decimal_places=3, coerce_to_string=False)
    guaranteed = serializers.DecimalField(max_digits=12, decimal_places=3, coerce_to_string=False)
    maximum = serializers.DecimalField(
        max_digits=12, decimal_places=3, coerce_to_string=False, allow_null=True
    )
    borrowed = serializers.DecimalField(max_digits=12, decimal_places=3, coerce_to_string=False)
    lent = serializers.DecimalField(max_digits=12, decimal_places=3, coerce_to_string=False)
    updated_at = serializers.DateTimeField()


class DepartmentRefSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()


class ProjectSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="projects-detail", lookup_field="slug")
    department = DepartmentRefSerializer(read_only=True)
    my_role = serializers.ChoiceField(
        choices=Role.choices,
        read_only=True,
        allow_null=True,
        help_text="Your role in the project; null for staff who are not members.",
    )
    quotas = serializers.SerializerMethodField(help_text="Quota per GPU pool and resource.")
    usage = serializers.SerializerMethodField(
        help_text="Use against quota now, from the cluster's queue status (kept by the watcher)."
    )
    run_as_uid = serializers.IntegerField(
        read_only=True,
        help_text="Under Pod Security 'restricted', the uid, gid and fsGroup of the project's "
        "pods (the first of the project's 10,000 ids).",
    )

    class Meta:
        model = Project
        fields = [
            "url",
            "slug",
            "name",
            "description",
            "department",
            "namespace",
            "default_gang_backend",
            "pod_security",
            "run_as_uid",
            "my_role",
            "quotas",
            "usage",
            "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(QuotaRowSerializer(many=True))
    def get_quotas(self, project: Project) -> list[dict]:
        rows = self.context.get("quota_rows", {}).get(project.pk, [])
        return QuotaRowSerializer(rows, many=True).data

    @extend_schema_field(UsageRowSerializer(many=True))
    def get_usage(self, project: Project) -> list[dict]:
        rows = self.context.get("usage_rows", {}).get(project.pk, [])
        return UsageRowSerializer(rows, many=True).data


class ProjectViewSet(TenantScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """Projects you belong to (all projects for staff), with their GPU quotas per pool."""

    queryset = Project.objects.all()
    project_field = ""
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    serializer_class = ProjectSerializer
    filterset_class = ProjectFilter

    def shape_queryset(self, queryset):
        return with_my_role(queryset.select_related("department"), user=self.request.user)

    def _serialize(self, projects: list[Project], *, many: bool):
        rows = quota_rows_for_projects(projects=projects)
        context = {
            **self.get_serializer_context(),
            "quota_rows": rows,
            "usage_rows": usage_rows_for_projects(projects=projects),
        }
        return ProjectSerializer(projects if many else projects[0], many=many, context=context)

    def list(self, request: Request, *args, **kwargs) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        if page is not None:
            return self.get_paginated_response(self._serialize(list(page), many=True).data)
        return Response(self._serialize(list(queryset), many=True).data)

    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        return Response(self._serialize([self.get_object()], many=False).data)


class MembershipSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.SlugRelatedField(slug_field="username", read_only=True)
    email = serializers.EmailField(source="user.email", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "project", "user", "email", "role", "source", "created_at"]
        read_only_fields = fields


class _StrictSlugField(serializers.SlugRelatedField):
    """A SlugRelatedField that refuses non-string input instead of querying with it."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.STR)
class _VisibleProjectField(_StrictSlugField):
    default_error_messages = {
        "does_not_exist": "No project '{value}' that you belong to.",
        "invalid": "Give the project's slug.",
    }

    def get_queryset(self):
        request = self.context.get("request")
        if request is None:
            return Project.objects.none()
        return project_list_visible_to(user=request.user)


@extend_schema_field(OpenApiTypes.STR)
class _UserByNameField(_StrictSlugField):
    default_error_messages = {
        "does_not_exist": "No user named '{value}'.",
        "invalid": "Give the user's username.",
    }


class MembershipCreateSerializer(serializers.Serializer):
    project = _VisibleProjectField(slug_field="slug", help_text="Project slug.")
    user = _UserByNameField(
        slug_field="username",
        queryset=get_user_model().objects.all(),
        help_text="Username of the person to add.",
    )
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class MembershipRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class MembershipViewSet(
    TenantScopedViewSet,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
):
    """Who belongs to your projects. Project admins add members, change roles and remove them;
    a project always keeps at least one admin."""

    queryset = Membership.objects.all()
    project_field = "project"
    write_predicate = staticmethod(can_manage_members)
    lookup_value_regex = r"[0-9]+"
    serializer_class = MembershipSerializer
    filterset_class = MembershipFilter

    def shape_queryset(self, queryset):
        return queryset.select_related("user", "project").order_by(
            "project__slug", "user__username"
        )

    def denied_message(self, project) -> str:
        return f"Only admins of project '{project}' can change its memberships."

    @extend_schema(request=MembershipCreateSerializer, responses={201: MembershipSerializer})
    def create(self, request: Request) -> Response:
        data = MembershipCreateSerializer(data=request.data, context=self.get_serializer_context())
        data.is_valid(raise_exception=True)
        membership = membership_add(actor=request.user, **data.validated_data)
        return Response(MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=MembershipRoleSerializer, responses={200: MembershipSerializer})
    def update(self, request: Request, pk: str | None = None) -> Response:
        membership = self.get_object()
        data = MembershipRoleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = membership_change_role(
            actor=request.user, membership=membership, role=data.validated_data["role"]
        )
        return Response(MembershipSerializer(membership).data)

    @extend_schema(request=MembershipRoleSerializer, responses={200: MembershipSerializer})
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        # The role is the only writable field, so a PATCH is the same as a PUT.
        return self.update(request, pk=pk)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        membership_remove(actor=request.user, membership=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class MyProjectSerializer(serializers.Serializer):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices)


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_staff = serializers.BooleanField()
    authenticated_by = serializers.ChoiceField(choices=["token", "session"])
    token_expiry = serializers.DateTimeField(
        allow_null=True, help_text="When the token of this request expires; null if never."
    )
    projects = MyProjectSerializer(many=True, help_text="Projects you belong to, with your role.")


class MeView(APIView):
    """Who you are: username, the expiry of the token you used, your projects and roles.

    About the caller only, so it is outside the tenant-scoped router (nothing to scope).
    """

    @extend_schema(responses={200: MeSerializer})
    def get(self, request: Request) -> Response:
        token = request.auth if hasattr(request.auth, "expiry") else None
        memberships = membership_list_of_user(user=request.user)
        body = {
            "username": request.user.get_username(),
            "is_staff": request.user.is_staff,
            "authenticated_by": "token" if token is not None else "session",
            "token_expiry": token.expiry if token is not None else None,
            "projects": [
                {"slug": m.project.slug, "name": m.project.name, "role": m.role}
                for m in memberships
            ],
        }
        return Response(MeSerializer(body).data)


router.register("projects", ProjectViewSet, basename="projects")
router.register("memberships", MembershipViewSet, basename="memberships")
