"""GPU pools, quotas per project and department, and priority classes."""

from django.core.validators import MinValueValidator
from django.db import models

from tenants.models import Department, Project, dns1123_label_validator

FULL_GPU = "gpu"  # the resource name of a whole GPU in ProjectQuota.resource


class GpuPool(models.Model):
    """A class of identical GPU nodes, selected by node labels (a Kueue ResourceFlavor)."""

    slug = models.CharField(max_length=40, unique=True, validators=[dns1123_label_validator])
    name = models.CharField(max_length=200)
    gpu_model = models.CharField(
        max_length=100, help_text="As GPU Feature Discovery reports it, e.g. NVIDIA-H100-80GB-HBM3."
    )
    node_labels = models.JSONField(
        default=dict, blank=True, help_text="Labels that select this pool's nodes."
    )
    node_count = models.PositiveIntegerField(default=1)
    gpus_per_node = models.PositiveIntegerField(default=8, validators=[MinValueValidator(1)])
    mig_profiles = models.JSONField(
        default=list, blank=True, help_text="MIG profiles this pool offers, e.g. ['1g.10gb']."
    )
    default_cpu = models.CharField(max_length=16, default="8", help_text="CPU per pod by default.")
    default_memory = models.CharField(
        max_length=16, default="64Gi", help_text="Memory per pod by default."
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def total_gpus(self) -> int:
        return self.node_count * self.gpus_per_node


class ProjectQuota(models.Model):
    """How much of one resource (a full GPU or a MIG profile) a project gets in one pool."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(GpuPool, on_delete=models.CASCADE, related_name="project_quotas")
    resource = models.CharField(
        max_length=32, default=FULL_GPU, help_text="'gpu' for whole GPUs or a MIG profile name."
    )
    nominal = models.PositiveIntegerField(help_text="Guaranteed amount.")
    borrowing_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="How much more it may borrow from its cohort; empty = any."
    )

    class Meta:
        ordering = ["project__slug", "pool__slug", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "pool", "resource"], name="unique_project_pool_resource"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project}/{self.pool}/{self.resource}: {self.nominal}"


class DepartmentQuota(models.Model):
    """An optional cap on the sum of a department's projects' quotas in one pool."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    pool = models.ForeignKey(GpuPool, on_delete=models.CASCADE, related_name="department_quotas")
    resource = models.CharField(max_length=32, default=FULL_GPU)
    limit = models.PositiveIntegerField()

    class Meta:
        ordering = ["department__slug", "pool__slug", "resource"]
        constraints = [
            models.UniqueConstraint(
                fields=["department", "pool", "resource"], name="unique_department_pool_resource"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.department}/{self.pool}/{self.resource} ≤ {self.limit}"


class PriorityName(models.TextChoices):
    HIGH = "high", "High"
    NORMAL = "normal", "Normal"
    LOW = "low", "Low"


class PriorityClass(models.Model):
    name = models.CharField(max_length=16, choices=PriorityName.choices, unique=True)
    value = models.IntegerField()
    preemptible = models.BooleanField(default=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return self.name
