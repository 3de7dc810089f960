"""A project's data volumes (datasets, checkpoints) and the storage classes staff approve.

Rules that read other rows or the cluster are in volumes.services; the Kubernetes objects are
built in volumes.manifests.
"""

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from tenants.models import Project, dns1123_label_validator

VOLUME_NAME_MAX = 40
SIZE_RE = r"^[1-9][0-9]*(Mi|Gi|Ti|Pi)$"
size_validator = RegexValidator(SIZE_RE, "A size in Mi, Gi, Ti or Pi, e.g. 500Gi or 2Ti.")


class StorageClass(models.Model):
    """A StorageClass of the cluster that project admins may create new claims from."""

    name = models.CharField(
        max_length=253,
        unique=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                "The StorageClass's name in the cluster (a DNS subdomain).",
            )
        ],
        help_text="Name of the StorageClass in the cluster.",
    )
    max_size = models.CharField(
        max_length=16,
        validators=[size_validator],
        help_text="Largest claim a project may create from it, e.g. 10Ti.",
    )
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "approved storage class"
        verbose_name_plural = "approved storage classes"

    def __str__(self) -> str:
        return self.name


class VolumeKind(models.TextChoices):
    EXISTING = "existing", "Existing claim in the project's namespace"
    NEW = "new", "New claim from an approved storage class"
    NFS = "nfs", "NFS export (the portal binds it through a PersistentVolume and a claim)"


class SyncState(models.TextChoices):
    PENDING = "pending", "Not applied yet"
    OK = "ok", "In the cluster"
    ERROR = "error", "Error"


class DataVolumeQuerySet(models.QuerySet):
    def visible_to(self, user) -> "DataVolumeQuerySet":
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(project__memberships__user=user)


class DataVolume(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="volumes")
    name = models.CharField(
        max_length=VOLUME_NAME_MAX,
        validators=[dns1123_label_validator],
        help_text="DNS-1123 label; jobs name the volume by it in their mounts.",
    )
    kind = models.CharField(max_length=16, choices=VolumeKind.choices)
    # The claim in the project's namespace: given for an existing claim, derived from the name
    # for the claims the portal creates (volumes.manifests.claim_name).
    claim_name = models.CharField(max_length=253, blank=True)
    storage_class = models.ForeignKey(
        StorageClass, on_delete=models.PROTECT, null=True, blank=True, related_name="volumes"
    )
    size = models.CharField(max_length=16, blank=True, validators=[size_validator])
    nfs_server = models.CharField(max_length=253, blank=True)
    nfs_path = models.CharField(max_length=1024, blank=True)
    mount_path = models.CharField(
        max_length=256, help_text="Default mount path in a job, e.g. /data."
    )
    read_only = models.BooleanField(default=True)
    is_checkpoint = models.BooleanField(
        default=False,
        help_text="The project's checkpoint volume (at most one, read-write): jobs get "
        "CHECKPOINT_DIR on it.",
    )
    description = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    sync_state = models.CharField(
        max_length=16, choices=SyncState.choices, default=SyncState.PENDING
    )
    sync_message = models.TextField(blank=True)
    claim_phase = models.CharField(max_length=16, blank=True, help_text="As the cluster says.")
    synced_at = models.DateTimeField(null=True, blank=True)

    objects = DataVolumeQuerySet.as_manager()

    class Meta:
        ordering = ["project__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_volume_name"),
            models.UniqueConstraint(
                fields=["project"],
                condition=models.Q(is_checkpoint=True),
                name="one_checkpoint_volume_per_project",
            ),
            models.CheckConstraint(
                condition=~models.Q(is_checkpoint=True, read_only=True),
                name="checkpoint_volume_read_write",
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=VolumeKind.values), name="volume_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"

    @property
    def portal_owned(self) -> bool:
        """Whether the portal created the claim (and may delete it when told to)."""
        return self.kind in (VolumeKind.NEW, VolumeKind.NFS)
