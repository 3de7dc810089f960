"""The one FilterSet for jobs, shared by the API list and the HTML list."""

import django_filters
from django import forms

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


class JobListPageFilter(JobFilter):
    """The HTML list's filters: the same fields, with the project as a choice of the user's
    projects and the states as chips (checkboxes), all kept in the URL."""

    project = django_filters.ChoiceFilter(
        field_name="project__slug", label="Project", empty_label="All my projects"
    )
    state = django_filters.MultipleChoiceFilter(
        choices=JobState.choices,
        widget=forms.CheckboxSelectMultiple(attrs={"class": "chips"}),
    )
    kind = django_filters.ChoiceFilter(choices=JobKind.choices, empty_label="Any kind")

    def __init__(self, *args, projects=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.filters["project"].extra["choices"] = [(p.slug, p.slug) for p in projects]
        self.form.fields["project"].choices = [("", "All my projects")] + [
            (p.slug, f"{p.name} ({p.slug})") for p in projects
        ]
