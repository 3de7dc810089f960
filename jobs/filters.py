"""The one FilterSet for jobs, shared by the API list and the HTML list."""

import django_filters

from jobs.models import Job, JobKind
from jobs.states import JobState


class JobFilter(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", help_text="Project slug.")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    submitter = django_filters.CharFilter(
        field_name="submitter__username", help_text="Username of the submitter."
    )

    class Meta:
        model = Job
        fields = ["project", "state", "kind", "submitter"]
