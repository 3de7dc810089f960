"""Credentials of a project: names, kinds and key names only.

The values live only in a Kubernetes Secret in the project's namespace, written by
credentials.services; no field here ever holds one (not even transiently).
"""

from django.conf import settings
from django.db import models

from tenants.models import Project, dns1123_label_validator

CREDENTIAL_NAME_MAX = 40


class CredentialKind(models.TextChoices):
    SECRET = "secret", "Secret (key/value)"
    REGISTRY = "registry", "Image registry login"


class Credential(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="credentials")
    name = models.CharField(max_length=CREDENTIAL_NAME_MAX, validators=[dns1123_label_validator])
    kind = models.CharField(max_length=16, choices=CredentialKind.choices)
    # The Secret's key names (never values); a registry login has the one .dockerconfigjson key.
    keys = models.JSONField(default=list, blank=True)
    # Registry logins: the normalised registry host[:port] (docker.io for Docker Hub).
    server = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="unique_credential_name"),
            models.CheckConstraint(
                condition=models.Q(kind__in=CredentialKind.values),
                name="credential_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}/{self.name} ({self.kind})"

    @property
    def secret_name(self) -> str:
        from credentials.manifests import secret_name

        return secret_name(self.name)
