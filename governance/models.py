"""Per-member GPU limits inside a project, and temporary quota requests.

Models hold fields and row constraints; the rules across rows (the pool must be in the project's
quotas, the pool's capacity, who may decide) are in governance.services, and the arithmetic of
what a member holds in governance.member_limits.
"""

from django.conf import settings
from django.db import models

from quotas.models import GpuPool
from tenants.models import Project


class MemberGpuLimit(models.Model):
    """The most GPUs (in one pool) one member of a project may hold at once. Without a user it
    is the project's default for every member; a row naming a user overrides it for them."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="member_limits")
    pool = models.ForeignKey(GpuPool, on_delete=models.CASCADE, related_name="member_limits")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="gpu_limits",
        help_text="Empty: every member of the project.",
    )
    max_gpus = models.PositiveIntegerField(
        help_text="GPUs the member may hold at once in this pool (MIG slices count as the GPUs "
        "they partition)."
    )
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "pool__slug", "user__username"]
        verbose_name = "member GPU limit"
        constraints = [
            models.UniqueConstraint(
                fields=["project", "pool", "user"], name="unique_member_limit_per_user"
            ),
            models.UniqueConstraint(
                fields=["project", "pool"],
                condition=models.Q(user__isnull=True),
                name="unique_member_limit_default",
            ),
        ]

    def __str__(self) -> str:
        who = self.user.get_username() if self.user_id else "every member"
        return f"{self.project}/{self.pool}: {who} ≤ {self.max_gpus} GPUs"


class RequestStatus(models.TextChoices):
    PENDING = "pending", "Waiting for staff"
    APPROVED = "approved", "Approved"  # the quota carries the extra GPUs
    REFUSED = "refused", "Refused"
    # Past its end date but some of its GPUs are still in use: the quota falls as they free up.
    EXPIRING = "expiring", "Ending"
    EXPIRED = "expired", "Ended"


class QuotaRequest(models.Model):
    """A project admin's request for more whole GPUs in one pool until a date."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="quota_requests")
    pool = models.ForeignKey(GpuPool, on_delete=models.CASCADE, related_name="quota_requests")
    gpus = models.PositiveIntegerField(help_text="Whole GPUs more than the project's quota.")
    until = models.DateField(help_text="The last day the extra GPUs are wanted.")
    reason = models.TextField()
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="quota_requests"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    status = models.CharField(
        max_length=16, choices=RequestStatus.choices, default=RequestStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, help_text="Staff's note to the requester.")
    # How many of its GPUs the project's quota carries now: gpus once approved, falling to 0
    # as it ends (never below what the project's running jobs use).
    granted = models.PositiveIntegerField(default=0)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "until"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=RequestStatus.values),
                name="quota_request_status_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(gpus__gte=1), name="quota_request_at_least_one_gpu"
            ),
            models.CheckConstraint(
                condition=models.Q(granted__lte=models.F("gpus")),
                name="quota_request_granted_within_gpus",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project}/{self.pool}: +{self.gpus} GPUs until {self.until} ({self.status})"

    @property
    def decision(self) -> str:
        """approved or refused (for notifications), empty while pending."""
        if self.status == RequestStatus.PENDING:
            return ""
        return RequestStatus.REFUSED if self.status == RequestStatus.REFUSED else "approved"
