"""Reads of credentials: visibility and the facts job validation and manifests need."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from credentials.models import Credential
from tenants.selectors import restrict_to_visible


def credential_list_visible_to(*, user: Any) -> QuerySet[Credential]:
    credentials = Credential.objects.select_related("project", "created_by", "updated_by")
    return restrict_to_visible(credentials, user=user, project_field="project").order_by(
        "project__slug", "name"
    )


def credentials_of_project(*, project_id: int) -> list[Credential]:
    return list(Credential.objects.filter(project_id=project_id).order_by("name"))
