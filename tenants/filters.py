"""FilterSets for projects and memberships, shared by the API lists and the HTML pages."""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from tenants.models import Department, Membership, Project, Role
from tenants.selectors import project_list_visible_to


def _projects_visible_to_request(request) -> QuerySet:
    if request is None:
        return Project.objects.none()
    return project_list_visible_to(user=request.user)


class ProjectFilter(django_filters.FilterSet):
    department = django_filters.ModelChoiceFilter(
        queryset=Department.objects.all(),
        to_field_name="slug",
        help_text="Department slug.",
    )
    q = django_filters.CharFilter(
        method="filter_text", help_text="Part of the project's slug or name."
    )

    class Meta:
        model = Project
        fields = ["department", "q"]

    def filter_text(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(Q(slug__icontains=value) | Q(name__icontains=value))


class MembershipFilter(django_filters.FilterSet):
    project = django_filters.ModelChoiceFilter(
        queryset=_projects_visible_to_request,
        to_field_name="slug",
        help_text="Project slug.",
    )
    role = django_filters.ChoiceFilter(choices=Role.choices)
    user = django_filters.CharFilter(field_name="user__username", help_text="Username.")

    class Meta:
        model = Membership
        fields = ["project", "role", "user"]
