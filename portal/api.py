"""The REST API's shared parts: the router every app registers into and the base viewsets.

Tenancy is applied here once. `TenantScopedViewSet.get_queryset` narrows every queryset to the
projects the requesting user belongs to, so a row of another tenant is simply not found (404) and
never listed; writes on a visible object are checked against a role predicate from
tenants.permissions (403). Apps register their viewsets into `router` from their own `api.py`;
`load_api_modules()` imports those modules before the URLs are built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from django.apps import apps
from django.conf import settings
from django.db.models import Model, QuerySet
from django.utils.module_loading import module_has_submodule
from rest_framework import exceptions, permissions, serializers, viewsets
from rest_framework.pagination import PageNumberPagination
from rest_framework.routers import DefaultRouter

from tenants.permissions import can_write
from tenants.selectors import restrict_to_visible

router = DefaultRouter()

RolePredicate = Callable[[Any, Any], bool]


def load_api_modules() -> None:
    """Import `<app>.api` for each of this project's apps so their viewsets are registered."""
    base_dir = Path(settings.BASE_DIR).resolve()
    for config in apps.get_app_configs():
        if not Path(config.path).resolve().is_relative_to(base_dir):
            continue  # a third-party app
        if module_has_submodule(config.module, "api"):
            importlib.import_module(f"{config.name}.api")


class PortalPagination(PageNumberPagination):
    """?page=N, and ?page_size=M (at most 500) for scripts that want fewer round trips.

    Both must be whole numbers from 1 (page may also be "last"); anything else, or a page past
    the last one, is a 400 naming the parameter, never a silent default or a 404.
    """

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500

    def get_page_size(self, request) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        number = _positive_int(raw)
        if number is None:
            raise exceptions.ValidationError(
                {
                    self.page_size_query_param: [
                        f"{raw!r} is not a page size: use a whole number from 1 to "
                        f"{self.max_page_size}."
                    ]
                }
            )
        return min(number, self.max_page_size)

    def paginate_queryset(self, queryset, request, view=None):
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and raw not in self.last_page_strings and _positive_int(raw) is None:
            raise exceptions.ValidationError(
                {self.page_query_param: [f"{raw!r} is not a page number: use 1, 2, … or 'last'."]}
            )
        try:
            return super().paginate_queryset(queryset, request, view)
        except exceptions.NotFound:
            pages = self.django_paginator_class(queryset, self.get_page_size(request)).num_pages
            raise exceptions.ValidationError(
                {self.page_query_param: [f"Page {raw} does not exist; the last page is {pages}."]}
            ) from None

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["description"] = "Page number from 1 (a page past the last is a 400)."
                parameter["schema"] = {"type": "integer", "minimum": 1}
            elif parameter["name"] == self.page_size_query_param:
                parameter["description"] = (
                    f"Results per page, 1 to {self.max_page_size} (larger values are capped)."
                )
                parameter["schema"] = {"type": "integer", "minimum": 1}
        return parameters


def _positive_int(raw: str) -> int | None:
    text = raw.strip()
    # A length cap keeps int() away from its 4,300-digit limit (a ValueError, so a 500).
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        return None
    number = int(text)
    return number if number >= 1 else None


class StrictCharField(serializers.CharField):
    """A string field that refuses numbers instead of quietly turning 0 into "0" (the schema
    says string; a client sending a number has a bug worth hearing about)."""

    default_error_messages = {"invalid": "Not a valid string: send text in quotes."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


def project_of(obj: Model, project_field: str) -> Any:
    """Follow `project_field` ("project", "job__project", "" for a Project) from obj."""
    for attr in filter(None, project_field.split("__")):
        obj = getattr(obj, attr)
    return obj


class ProjectRolePermission(permissions.BasePermission):
    """Reads need only visibility (the queryset handles it); writes need the view's predicate."""

    message = "Your role in this project does not allow this action."

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated)

    def has_object_permission(self, request, view, obj) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        predicate = view.write_predicate_for(view.action)
        project = project_of(obj, view.project_field)
        if predicate(request.user, project):
            return True
        self.message = view.denied_message(project)
        return False


class TenantScopedViewSet(viewsets.GenericViewSet):
    """Base for every endpoint whose rows belong to a project.

    Subclasses set `queryset`, `project_field` (ORM path to the Project, "" for Project itself)
    and optionally `write_predicate` / `write_predicates` ({action: predicate}). Extra query
    shaping goes in `shape_queryset`, never in an override of `get_queryset`, so the tenancy
    filter is always applied.
    """

    project_field: ClassVar[str] = "project"
    write_predicate: ClassVar[RolePredicate] = staticmethod(can_write)
    write_predicates: ClassVar[dict[str, RolePredicate]] = {}
    permission_classes = [ProjectRolePermission]
    pagination_class = PortalPagination

    def shape_queryset(self, queryset: QuerySet) -> QuerySet:
        return queryset

    def get_queryset(self) -> QuerySet:
        queryset = self.shape_queryset(super().get_queryset())
        return restrict_to_visible(
            queryset, user=self.request.user, project_field=self.project_field
        )

    def write_predicate_for(self, action: str | None) -> RolePredicate:
        return self.write_predicates.get(action or "", type(self).write_predicate)

    def denied_message(self, project: Any) -> str:
        return f"Your role in project '{project}' does not allow this action."


class OwnerScopedViewSet(viewsets.GenericViewSet):
    """Base for endpoints whose rows belong to one user, not to a project (their notification
    settings and webhook endpoints). Each user reads and changes only their own rows: another
    user's row is simply not found (404), as another tenant's. Query shaping goes in
    `shape_queryset`, never in an override of `get_queryset`."""

    owner_field: ClassVar[str] = "user"
    permission_classes = [permissions.IsAuthenticated]
    pagination_class = PortalPagination

    def shape_queryset(self, queryset: QuerySet) -> QuerySet:
        return queryset

    def get_queryset(self) -> QuerySet:
        queryset = self.shape_queryset(super().get_queryset())
        return queryset.filter(**{self.owner_field: self.request.user})


class ClusterReadOnlyViewSet(viewsets.ReadOnlyModelViewSet):
    """Base for cluster-wide catalogue data (GPU pools): every signed-in user reads, nobody
    writes through the API (admins use the admin console)."""

    permission_classes = [permissions.IsAuthenticated]
    pagination_class = PortalPagination
