"""Reads of data volumes: what a job may mount, the project's checkpoint volume."""

from typing import Any

from django.db.models import QuerySet

from jobs.mounts import VolumeFacts
from tenants.models import Project
from volumes.models import DataVolume


def volume_list_visible_to(*, user: Any) -> QuerySet[DataVolume]:
    return (
        DataVolume.objects.visible_to(user)
        .select_related("project", "storage_class", "created_by")
        .order_by("project__slug", "name")
    )


def volume_facts_for_project(*, project: Project) -> dict[str, VolumeFacts]:
    """The project's volumes by name, as job validation needs them."""
    rows = DataVolume.objects.filter(project=project).values_list(
        "name", "claim_name", "mount_path", "read_only", "is_checkpoint"
    )
    return {
        name: VolumeFacts(
            name=name,
            claim_name=claim,
            default_path=path,
            read_only=read_only,
            is_checkpoint=is_checkpoint,
        )
        for name, claim, path, read_only, is_checkpoint in rows
    }


def checkpoint_volume_of(volumes: dict[str, VolumeFacts]) -> VolumeFacts | None:
    return next((v for v in volumes.values() if v.is_checkpoint), None)
