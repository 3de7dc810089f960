"""The planner's one write: applying a what-if proposal, through the normal quota service (staff
only, audited, validated against department caps, synced to the cluster after commit)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from audit.services import record
from quotas import services as quota_services
from quotas.arithmetic import QuotaEntry
from quotas.models import GpuPool
from quotas.tasks import enqueue_quota_sync
from tenants.models import Project


@transaction.atomic
def whatif_apply(*, actor: Any, proposal: list[QuotaEntry]) -> list[dict[str, Any]]:
    """Set every proposed quota (all or none); the rows as set."""
    applied = []
    for entry in proposal:
        quota = quota_services.quota_set(
            actor=actor,
            project=Project.objects.get(slug=entry.project),
            pool=GpuPool.objects.get(slug=entry.pool),
            resource=entry.resource,
            nominal=entry.nominal,
            borrowing_limit=entry.borrowing_limit,
        )
        applied.append(
            {
                "project": entry.project,
                "pool": entry.pool,
                "resource": quota.resource,
                "nominal": quota.nominal,
                "borrowing_limit": quota.borrowing_limit,
            }
        )
    if applied:
        # Each quota has its own quota.set row with old and new values; this one ties them.
        record(
            "planner.whatif_apply",
            actor=actor,
            target=("planner.whatif", "", f"{len(applied)} quotas"),
            detail=", ".join(f"{a['project']}/{a['pool']}={a['nominal']}" for a in applied),
        )
        enqueue_quota_sync()
    return applied
