"""FilterSets for the quota catalogue, shared by the API lists and the HTML pages."""

from __future__ import annotations

import django_filters

from quotas.models import GpuPool


class GpuPoolFilter(django_filters.FilterSet):
    gpu_model = django_filters.CharFilter(
        lookup_expr="iexact", help_text="GPU model, e.g. NVIDIA-H100-80GB-HBM3."
    )

    class Meta:
        model = GpuPool
        fields = ["gpu_model"]
