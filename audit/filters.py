"""The one FilterSet of the audit trail, shared by the API and the project page."""

from __future__ import annotations

from datetime import UTC, datetime, time

import django_filters
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from rest_framework.exceptions import ValidationError

from audit import selectors
from audit.context import Source
from audit.models import AuditEvent


def parse_when(value: str, field: str) -> datetime:
    """An ISO 8601 time (naive = UTC) or date (its UTC midnight); a 400 naming the field."""
    text = value.strip()
    try:
        when = parse_datetime(text)
        if when is None and (day := parse_date(text)) is not None:
            when = datetime.combine(day, time.min)
    except ValueError:
        when = None
    if when is None:
        raise ValidationError(
            {field: [f"{value[:40]!r} is not a time: use ISO 8601, e.g. 2026-11-24T09:00Z."]}
        )
    return when if timezone.is_aware(when) else when.replace(tzinfo=UTC)


class AuditEventFilter(django_filters.FilterSet):
    action = django_filters.CharFilter(
        method="filter_action",
        help_text="An action (job.cancel), several separated by commas, or a family (job.*).",
    )
    actor = django_filters.CharFilter(
        field_name="actor_username", help_text="Username of who did it ('' = the system)."
    )
    project = django_filters.CharFilter(method="filter_project", help_text="Project slug.")
    source = django_filters.MultipleChoiceFilter(choices=Source.choices, distinct=False)
    since = django_filters.CharFilter(
        method="filter_since", help_text="ISO 8601 time or date (UTC midnight), inclusive."
    )
    until = django_filters.CharFilter(
        method="filter_until", help_text="ISO 8601 time or date (UTC midnight), exclusive."
    )
    target = django_filters.CharFilter(
        method="filter_target",
        help_text="type:id, e.g. jobs.job:812 or job:812; a type alone for all of that type.",
    )

    class Meta:
        model = AuditEvent
        fields = ["action", "actor", "project", "source", "since", "until", "target"]

    def filter_action(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return selectors.filter_actions(queryset, value) if value else queryset

    def filter_project(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return selectors.filter_project(queryset, value) if value else queryset

    def filter_since(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(created_at__gte=parse_when(value, "since")) if value else queryset

    def filter_until(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(created_at__lt=parse_when(value, "until")) if value else queryset

    def filter_target(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return selectors.filter_target(queryset, value) if value else queryset
