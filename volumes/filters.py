"""The FilterSet for data volumes (API list)."""

import django_filters

from volumes.models import DataVolume, VolumeKind


class VolumeFilter(django_filters.FilterSet):
    project = django_filters.CharFilter(field_name="project__slug", help_text="Project slug.")
    kind = django_filters.ChoiceFilter(choices=VolumeKind.choices)

    class Meta:
        model = DataVolume
        fields = ["project", "kind"]
