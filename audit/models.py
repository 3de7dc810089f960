"""Audit trail: one row per write through the services, login and admin action."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from audit.context import Source


class AuditEventQuerySet(models.QuerySet):
    def visible_to(self, user) -> AuditEventQuerySet:
        """Staff read every row; anyone else only the rows of projects they administer."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        if user.is_active and user.is_staff:
            return self
        # A semi-join on the user's admin memberships (not a join through projects), so the
        # planner can walk the project-and-time index for each.
        from tenants.models import Membership, Role

        administered = Membership.objects.filter(user=user, role=Role.ADMIN).values("project_id")
        return self.filter(project_id__in=administered)


class AuditEvent(models.Model):
    """Who did what, to what, in which project, from where. Rows are written once and never
    changed; the retention task is the only thing that deletes them."""

    created_at = models.DateTimeField(default=timezone.now)
    # Null for the system (tasks); the username stays when the user is deleted.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    actor_username = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, help_text="Dotted, e.g. job.cancel, quota.change.")
    target_type = models.CharField(max_length=64, blank=True, help_text="e.g. jobs.job")
    target_id = models.CharField(max_length=64, blank=True)
    target_repr = models.CharField(max_length=200, blank=True)
    project = models.ForeignKey(
        "tenants.Project",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    project_slug = models.CharField(max_length=40, blank=True)
    # {field: [old, new]}; never secret values.
    changes = models.JSONField(default=dict, blank=True)
    detail = models.TextField(blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.SYSTEM)
    request_id = models.CharField(max_length=128, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["-created_at", "-id"], name="audit_time"),
            models.Index(fields=["project", "-created_at"], name="audit_project_time"),
            models.Index(fields=["actor", "-created_at"], name="audit_actor_time"),
            models.Index(fields=["action", "-created_at"], name="audit_action_time"),
            models.Index(fields=["target_type", "target_id"], name="audit_target"),
        ]

    def __str__(self) -> str:
        who = self.actor_username or "system"
        what = f" {self.target_type}:{self.target_id}" if self.target_type else ""
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {who} {self.action}{what}"

    def save(self, *args, **kwargs) -> None:
        if self.pk is not None and not kwargs.get("force_insert"):
            raise ValueError("Audit events are never changed once written.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("Audit events are deleted only by the retention task.")
