"""REST endpoints for the GPU pool catalogue (/api/v1/pools/), read-only."""

from __future__ import annotations

from rest_framework import serializers

from portal.api import ClusterReadOnlyViewSet, router
from quotas.filters import GpuPoolFilter
from quotas.models import GpuPool


class GpuPoolSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="pools-detail", lookup_field="slug")
    total_gpus = serializers.IntegerField(read_only=True, help_text="node_count × gpus_per_node.")
    mig_profiles = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="MIG profiles offered."
    )
    node_labels = serializers.DictField(
        child=serializers.CharField(), read_only=True, help_text="Labels selecting the nodes."
    )
    capacity_gpus = serializers.SerializerMethodField(help_text="Whole GPUs in the pool.")
    gpus_in_use = serializers.SerializerMethodField(
        help_text="Whole GPUs admitted to jobs now (from the queues' status)."
    )
    free_gpus = serializers.SerializerMethodField(help_text="capacity_gpus − gpus_in_use.")
    scheduler = serializers.CharField(
        read_only=True, help_text="Which scheduler runs the pool's jobs: kueue, volcano or kai."
    )
    fractions_allowed = serializers.BooleanField(
        source="allows_fractions",
        read_only=True,
        help_text="Whether jobs may ask for a fraction of a GPU (gpu_fraction, gpu_memory).",
    )
    fraction_step = serializers.DecimalField(
        source="kai_fraction_step",
        max_digits=3,
        decimal_places=2,
        read_only=True,
        help_text="A gpu_fraction must be a multiple of this.",
    )
    gpu_memory_mib = serializers.IntegerField(
        source="gpu_memory",
        read_only=True,
        allow_null=True,
        help_text="Memory of one GPU in MiB: the most a gpu_memory request may ask.",
    )

    class Meta:
        model = GpuPool
        fields = [
            "url",
            "slug",
            "name",
            "gpu_model",
            "node_count",
            "gpus_per_node",
            "total_gpus",
            "mig_profiles",
            "node_labels",
            "capacity_gpus",
            "gpus_in_use",
            "free_gpus",
            "scheduler",
            "fractions_allowed",
            "fraction_step",
            "gpu_memory_mib",
        ]
        read_only_fields = fields

    def _in_use(self, pool: GpuPool) -> int:
        cache = self.context.setdefault("_gpus_in_use", None)
        if cache is None:
            from jobs.selectors import gpus_in_use_per_pool

            cache = self.context["_gpus_in_use"] = gpus_in_use_per_pool()
        return cache.get(pool.slug, 0)

    def get_capacity_gpus(self, pool: GpuPool) -> int:
        return pool.total_gpus

    def get_gpus_in_use(self, pool: GpuPool) -> int:
        return self._in_use(pool)

    def get_free_gpus(self, pool: GpuPool) -> int:
        return max(0, pool.total_gpus - self._in_use(pool))


class GpuPoolViewSet(ClusterReadOnlyViewSet):
    """The GPU pools of the cluster: which GPU model, how many, which MIG profiles."""

    queryset = GpuPool.objects.all().order_by("slug")
    serializer_class = GpuPoolSerializer
    filterset_class = GpuPoolFilter
    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


router.register("pools", GpuPoolViewSet, basename="pools")
