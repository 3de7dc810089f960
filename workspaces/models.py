"""Interactive workspaces (JupyterLab, code-server) and the kinds admins offer.

A workspace is a long-lived record; each start of it is a Job (jobs app) that goes through the
same validation, quota, queue and backend as a batch job. `Workspace.job` is the current (or
last) run; the workspace's state is derived from that job's state (workspaces.states).
"""

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from jobs.models import Job
from tenants.models import Project


class WorkspaceApp(models.TextChoices):
    JUPYTER = "jupyter", "JupyterLab"
    CODE_SERVER = "code-server", "code-server (VS Code)"


class WorkspaceKind(models.Model):
    """What users may start, curated by admins: an image and the shapes it may run on."""

    slug = models.SlugField(max_length=40, unique=True)
    name = models.CharField(max_length=100)
    app = models.CharField(max_length=16, choices=WorkspaceApp.choices)
    image = models.CharField(max_length=512)
    port = models.PositiveIntegerField(default=8888)
    health_path = models.CharField(
        max_length=200, default="api/status", help_text="Below the workspace's base URL."
    )
    default_shape = models.CharField(max_length=40, default="gpu:1")
    allowed_shapes = models.JSONField(
        default=list,
        blank=True,
        help_text='Shapes users may pick, e.g. ["gpu:1", "mig:1g.10gb"] (workspaces.shapes).',
    )
    cpu = models.CharField(max_length=16, blank=True, help_text="Empty: the pool's default.")
    memory = models.CharField(max_length=16, blank=True, help_text="Empty: the pool's default.")
    max_lifetime_minutes = models.PositiveIntegerField(
        default=8 * 60, validators=[MinValueValidator(1)]
    )
    idle_timeout_minutes = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1)]
    )
    enabled = models.BooleanField(default=True)
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Workspace(models.Model):
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="workspaces")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workspaces"
    )
    kind = models.ForeignKey(WorkspaceKind, on_delete=models.PROTECT, related_name="workspaces")
    name = models.CharField(max_length=40)
    shape = models.CharField(max_length=40)
    pool = models.CharField(max_length=40, blank=True)
    # Kept as asked, so "start again" submits the same volumes and credentials.
    mounts = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    # Project members may open it too (never viewers of other projects).
    shared = models.BooleanField(default=False)
    # A fresh random token per run; the proxy hands it to the workspace, users never see it.
    token = models.CharField(max_length=64, blank=True)
    job = models.ForeignKey(
        Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="workspace_runs"
    )
    runs = models.PositiveIntegerField(default=0)
    # Browser activity through the proxy (written at most every PORTAL_WORKSPACE_TOUCH_SECONDS).
    last_activity_at = models.DateTimeField(null=True, blank=True)
    gpu_idle_warned_at = models.DateTimeField(null=True, blank=True)
    stopped_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_workspace_name")
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name}"

    @property
    def base_path(self) -> str:
        return f"/ws/{self.pk}/"
