"""GPU pools, quotas per project and department, and priority classes.

Models hold fields, constraints and the validation of the row itself (``clean``); rules that read
other rows (department caps, quotas using a pool's profiles) are in quotas.services. The quota
numbers are computed in quotas.arithmetic and the MIG profile table lives in quotas.mig.
"""

import re
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from quotas import arithmetic, mig
from tenants.models import Department, Project, dns1123_label_validator

FULL_GPU = arithmetic.FULL_GPU  # the resource name of a whole GPU in ProjectQuota.resource
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# Kubernetes label syntax (apimachinery validation.IsQualifiedName / IsValidLabelValue).
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def label_key_error(key: object) -> str | None:
    """Why ``key`` is not a valid Kubernetes label key, or None when it is."""
    if not isinstance(key, str) or not key:
        return "a label key must be a non-empty string"
    prefix, _, name = key.rpartition("/")
    if "/" in key and not prefix:
        return f"label key {key!r} has an empty prefix before '/'"
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return (
            f"label key {key!r}: the prefix must be a DNS subdomain (lower-case letters, digits, "
            "'-' and '.', at most 253 characters)"
        )
    if len(name) > 63 or not _LABEL_NAME_RE.match(name):
        return (
            f"label key {key!r}: the name must be at most 63 characters of letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def label_value_error(key: str, value: object) -> str | None:
    """Why ``value`` is not a valid Kubernetes label value, or None when it is."""
    if not isinstance(value, str):
        return f"the value of label {key!r} must be a string (got {value!r})"
    if value and (len(value) > 63 or not _LABEL_NAME_RE.match(value)):
        return (
            f"the value {value!r} of label {key!r} must be at most 63 characters of letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit"
        )
    return None


def validate_node_labels(value: object) -> None:
    """A JSON object of Kubernetes label key → value strings."""
    if not isinstance(value, dict):
        raise ValidationError(
            "Node labels must be a JSON object of label → value, e.g. "
            '{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}.'
        )
    errors = []
    for key, label_value in value.items():
        error = label_key_error(key) or label_value_error(key, label_value)
        if error:
            errors.append(error[0].upper() + error[1:] + ".")
    if errors:
        raise ValidationError(errors)


def validate_profile_list(value: object) -> None:
    """A JSON list of distinct profile-name strings (which ones are valid depends on the model)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValidationError('MIG profiles must be a JSON list of names, e.g. ["1g.10gb"].')
    duplicates = sorted({item for item in value if value.count(item) > 1})
    if duplicates:
        raise ValidationError(f"MIG profiles listed twice: {', '.join(duplicates)}.")


class PoolScheduler(models.TextChoices):
    """Which scheduler runs a pool's jobs (issue 25). Kueue: single, MIG and gang jobs (a gang
    may ask for Volcano); Volcano: gangs go to Volcano unless they ask for Kueue; KAI: every job
    of the pool goes to KAI Scheduler, and only there may a job ask for a fraction of a GPU."""

    KUEUE = "kueue", "Kueue"
    VOLCANO = "volcano", "Volcano"
    KAI = "kai", "KAI Scheduler"


# KAI's gpu-fraction must be 0 < f < 1; the portal offers multiples of the pool's step.
FRACTION_STEP_MIN = Decimal("0.05")
FRACTION_STEP_MAX = Decimal("0.5")


def gpu_memory_from_model(gpu_model: str) -> int | None:
    """MiB of one GPU guessed from the model name ('…-80GB…' → 80,000 MiB): a little below what
    GPU Feature Discovery reports (81,559 for an H100 80GB), so a request it allows fits."""
    match = re.search(r"(\d+)GB?(?![A-Z0-9])", gpu_model.upper())
    return int(match.group(1)) * 1000 if match else None


class GpuPool(models.Model):
    """A class of identical GPU nodes, selected by node labels (a Kueue ResourceFlavor)."""

    slug = models.CharField(max_length=40, unique=True, validators=[dns1123_label_validator])
    name = models.CharField(max_length=200)
    gpu_model = models.CharField(
        max_length=100, help_text="As GPU Feature Discovery reports it, e.g. NVIDIA-H100-80GB-HBM3."
    )
    node_labels = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_node_labels],
        help_text=(
            "Labels that select this pool's nodes, as a JSON object; empty means "
            '{"nvidia.com/gpu.product": "<GPU model>"}.'
        ),
    )
    node_count = models.PositiveIntegerField(default=1)
    gpus_per_node = models.PositiveIntegerField(default=8, validators=[MinValueValidator(1)])
    mig_profiles = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_profile_list],
        help_text='MIG profiles this pool offers as a JSON list, e.g. ["1g.10gb", "2g.20gb"].',
    )
    default_cpu = models.CharField(max_length=16, default="8", help_text="CPU per pod by default.")
    default_memory = models.CharField(
        max_length=16, default="64Gi", help_text="Memory per pod by default."
    )
    # Issue 12: the most a job may ask for its memory-backed /dev/shm, and for the time between
    # SIGTERM and the kill on preemption or cancel (jobs.validation applies both).
    max_shm_size = models.CharField(
        max_length=16,
        default="64Gi",
        validators=[
            RegexValidator(
                r"^[0-9]+(Ki|Mi|Gi|Ti)$", "A size in Ki, Mi, Gi or Ti, e.g. 64Gi or 512Mi."
            )
        ],
        help_text="Largest /dev/shm (memory-backed) a pod may ask for, e.g. 64Gi.",
    )
    max_termination_grace_seconds = models.PositiveIntegerField(
        default=600,
        help_text="Longest grace period (seconds between SIGTERM and the kill) a job may ask for.",
    )
    # Issue 25: the pool's scheduler and KAI's GPU fractions. Kept apart from the GPU sharing
    # modes (time-slicing, MPS, DRA) a pool may also have.
    scheduler = models.CharField(
        max_length=16,
        choices=PoolScheduler.choices,
        default=PoolScheduler.KUEUE,
        help_text=(
            "Which scheduler runs this pool's jobs. Cannot change while jobs of the pool are "
            "active."
        ),
    )
    kai_fractions_allowed = models.BooleanField(
        default=False,
        help_text="KAI pools only: jobs may ask for a fraction of one GPU (gpu_fraction or "
        "gpu_memory). Fractions share a GPU without memory isolation.",
    )
    kai_fraction_step = models.DecimalField(
        max_digits=3,
        decimal_places=2,
        default=Decimal("0.25"),
        validators=[MinValueValidator(FRACTION_STEP_MIN), MaxValueValidator(FRACTION_STEP_MAX)],
        help_text="A gpu_fraction must be a multiple of this step (0.05 to 0.5), e.g. 0.25.",
    )
    gpu_memory_mib = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Memory of one GPU in MiB (the nvidia.com/gpu.memory node label); empty: "
        "taken from the model name. The most a gpu_memory request may ask.",
    )
    kai_over_quota_weight = models.PositiveIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="KAI pools: each project queue's overQuotaWeight, its share of idle GPUs "
        "(equal for all projects of the pool by default; a project quota may set its own).",
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def total_gpus(self) -> int:
        return self.node_count * self.gpus_per_node

    @property
    def gpu_memory(self) -> int | None:
        """MiB of one GPU: the admin's figure, else the model name's."""
        return self.gpu_memory_mib or gpu_memory_from_model(self.gpu_model)

    @property
    def allows_fractions(self) -> bool:
        return self.scheduler == PoolScheduler.KAI and self.kai_fractions_allowed

    @property
    def resources(self) -> list[str]:
        """What quotas in this pool may be given in: whole GPUs, then the offered MIG profiles."""
        return [FULL_GPU, *self.mig_profiles]

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.gpu_model:
            self.gpu_model = mig.normalise_model(self.gpu_model)
            limit = self._meta.get_field("gpu_model").max_length
            if len(self.gpu_model) > limit:
                raise ValidationError(
                    {"gpu_model": [f"The GPU model name may have at most {limit} characters."]}
                )
        # A cleared JSON field in a form arrives as None; the columns are not nullable.
        if self.node_labels is None:
            self.node_labels = {}
        if self.mig_profiles is None:
            self.mig_profiles = []
        # Shape errors of mig_profiles are reported by its field validator; check names only
        # when it is a list of distinct strings.
        try:
            validate_profile_list(self.mig_profiles)
            profiles_ok = bool(self.gpu_model)
        except ValidationError:
            profiles_ok = False
        if isinstance(self.node_labels, dict) and not self.node_labels and self.gpu_model:
            # Kueue's ResourceFlavor needs a selector; the GFD product label is the natural one.
            self.node_labels = {GPU_PRODUCT_LABEL: self.gpu_model}
        if profiles_ok:
            if self.mig_profiles and not mig.is_mig_capable(self.gpu_model):
                errors.setdefault("mig_profiles", []).append(
                    f"{self.gpu_model} does not support MIG; leave the MIG profiles empty."
                )
            else:
                for profile in self.mig_profiles:
                    try:
                        mig.validate_profile(self.gpu_model, profile)
                    except ValueError as exc:
                        errors.setdefault("mig_profiles", []).append(str(exc))
                        break
        if self.kai_fractions_allowed and self.scheduler != PoolScheduler.KAI:
            errors.setdefault("kai_fractions_allowed", []).append(
                "Only a KAI pool can offer GPU fractions; choose the KAI scheduler first."
            )
        step = self.kai_fraction_step
        if step is not None and isinstance(step, Decimal) and step > 0 and (1 / step) % 1:
            errors.setdefault("kai_fraction_step", []).append(
                f"{step} does not divide a GPU evenly; choose e.g. 0.1, 0.2, 0.25 or 0.5."
            )
        if errors:
            raise ValidationError(errors)
        if profiles_ok:
            order = mig.profiles_for_model(self.gpu_model)
            self.mig_profiles = sorted(self.mig_profiles, key=order.index)


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
    # Issue 25 (KAI pools): the project queue's overQuotaWeight; empty = the pool's.
    over_quota_weight = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="KAI pools: share of idle GPUs relative to other projects; empty = the pool's.",
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

    def clean(self) -> None:
        pool = self.pool if self.pool_id else None
        if pool is not None and self.resource:
            error = resource_error(pool, self.resource)
            if error:
                raise ValidationError({"resource": [error]})


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

    def clean(self) -> None:
        pool = self.pool if self.pool_id else None
        if pool is None or not self.resource:
            return
        error = resource_error(pool, self.resource)
        if error:
            raise ValidationError({"resource": [error]})


def related_or_none(instance: models.Model, name: str) -> models.Model | None:
    """A foreign-key target even when it is not saved yet (an admin inline on an add page)."""
    field = instance._meta.get_field(name)
    if field.is_cached(instance):
        return field.get_cached_value(instance)
    if getattr(instance, field.attname) is None:
        return None
    return getattr(instance, name)


def resource_error(pool: GpuPool, resource: str) -> str | None:
    """Why ``resource`` cannot be given as quota in ``pool``, naming what is allowed; or None."""
    if resource == FULL_GPU:
        return None
    offered = ", ".join(pool.resources)
    if not mig.PROFILE_RE.match(resource):
        return (
            f"{resource!r} is neither 'gpu' nor a MIG profile name; pool {pool.slug} offers: "
            f"{offered}."
        )
    try:
        mig.validate_profile(pool.gpu_model, resource)
    except ValueError as exc:
        return f"{exc} Pool {pool.slug} offers: {offered}."
    if resource not in pool.mig_profiles:
        return (
            f"Pool {pool.slug} does not offer the MIG profile {resource}; it offers: {offered}. "
            "Add the profile to the pool first."
        )
    return None


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


class SyncOutcome(models.TextChoices):
    OK = "ok", "OK"
    REFUSED = "refused", "Deletions refused"
    ERRORS = "errors", "Errors"


class QuotaSyncStatus(models.Model):
    """What the last quota sync did (one row): shown to staff in the admin console, so a sync
    that refused to delete or failed is visible without reading worker logs."""

    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=SyncOutcome.choices, default=SyncOutcome.OK)
    applied = models.PositiveIntegerField(default=0)
    unchanged = models.PositiveIntegerField(default=0)
    deleted = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True, help_text="Why deletions were refused, or the errors.")
    refused_deletions = models.JSONField(
        default=list, blank=True, help_text="Objects the sync would have deleted but did not."
    )

    class Meta:
        verbose_name = "quota sync status"
        verbose_name_plural = "quota sync status"

    def __str__(self) -> str:
        return f"last quota sync: {self.get_outcome_display()}"


class OrphanedNamespace(models.Model):
    """A portal namespace whose project is gone. The sync never deletes namespaces (they hold the
    tenant's data and running pods); it marks them in the cluster and lists them here."""

    namespace = models.CharField(max_length=63, unique=True)
    project_slug = models.CharField(max_length=63, blank=True)
    marked_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["namespace"]

    def __str__(self) -> str:
        return self.namespace
