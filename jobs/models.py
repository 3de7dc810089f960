"""Training jobs and their state history. Rules live in jobs/services.py and jobs/states.py."""

from django.conf import settings
from django.db import models

from jobs.states import ACTIVE, TERMINAL, JobState
from quotas.models import GpuPool, PriorityName
from tenants.models import GangBackend, Project


class JobKind(models.TextChoices):
    SINGLE = "single", "Single GPU"
    MIG = "mig", "MIG slice"
    GANG = "gang", "Gang (multi-pod)"


class JobQuerySet(models.QuerySet):
    def visible_to(self, user) -> "JobQuerySet":
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(project__memberships__user=user)

    def active(self) -> "JobQuerySet":
        return self.filter(state__in=ACTIVE)


class Job(models.Model):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="jobs")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=40)
    kind = models.CharField(max_length=16, choices=JobKind.choices)
    image = models.CharField(max_length=512)
    command = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    gpus = models.PositiveSmallIntegerField(default=0, help_text="Whole GPUs per pod.")
    mig_profile = models.CharField(max_length=32, blank=True)
    replicas = models.PositiveSmallIntegerField(default=1)
    pool = models.ForeignKey(
        GpuPool, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    # Pools (slugs) the job may run in, decided at submission; the pods' node affinity.
    eligible_pools = models.JSONField(default=list, blank=True)
    cpu = models.CharField(max_length=16)
    memory = models.CharField(max_length=16)
    priority = models.CharField(
        max_length=16, choices=PriorityName.choices, default=PriorityName.NORMAL
    )
    max_runtime_minutes = models.PositiveIntegerField()
    backend = models.CharField(max_length=16, choices=GangBackend.choices)

    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.SUBMITTED)
    state_reason = models.CharField(max_length=64, blank=True)
    state_message = models.TextField(blank=True)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    # When the manifests were last applied; null until the first successful apply.
    applied_at = models.DateTimeField(null=True, blank=True)
    # Set by cancel until the cluster objects are confirmed gone (the resync retries it).
    cleanup_pending = models.BooleanField(default=False)
    last_reconciled_at = models.DateTimeField(null=True, blank=True)
    # The last log lines of the job's pods, kept when its finished cluster objects are removed.
    logs_tail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["project", "-created_at"]),
            models.Index(fields=["state"]),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(state__in=JobState.values), name="job_state_valid"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=JobKind.values), name="job_kind_valid"
            ),
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(state__in=sorted(ACTIVE)),
                name="unique_active_job_name_per_project",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def pods(self) -> int:
        return self.replicas if self.kind == JobKind.GANG else 1


class JobEvent(models.Model):
    """One state change of a job (jobs.services.job_transition), or a note about it with from and
    to equal (cluster objects removed, an apply blocked): written by jobs.services only."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(auto_now_add=True)
    # Empty for the event that records the submission itself.
    from_state = models.CharField(max_length=16, choices=JobState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=JobState.choices)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    source = models.CharField(max_length=32, help_text="api, ui, reconciler, admin ...")

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.from_state} → {self.to_state} ({self.reason})"
