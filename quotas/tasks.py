"""Celery tasks that put the quota model into the cluster (ResourceFlavors, queues, quotas)."""

from collections.abc import Sequence

from celery import shared_task
from django.db import transaction

from portal.kube.apply import RetryableKubeError
from portal.outage import RETRY_ON_OUTAGE, ServiceUnavailable, retry_when_unavailable
from quotas.sync import QuotaSyncBusy, sync_quota_objects


@shared_task(
    autoretry_for=(RetryableKubeError, QuotaSyncBusy, ServiceUnavailable),
    **RETRY_ON_OUTAGE,
    acks_late=True,
)
@retry_when_unavailable
def sync_quotas(confirmed_deletions: Sequence[str] = ()) -> dict:
    """One quota sync (they never overlap: see quotas.sync). ``confirmed_deletions`` are objects
    staff confirmed after the mass-deletion guard refused them."""
    report = sync_quota_objects(confirmed_deletions=confirmed_deletions)
    return {
        "applied": report.applied,
        "unchanged": report.unchanged,
        "deleted": report.deleted,
        "conflicts": report.conflicts,
        "orphaned": report.orphaned,
        "refused": report.refused,
    }


def enqueue_quota_sync(*, confirmed_deletions: Sequence[str] = ()) -> None:
    """Call after any change to pools, departments, projects, quotas or priority classes (e.g.
    from the admin's save_model/delete_model): syncs once the transaction commits. The periodic
    resync repairs anything a lost message missed."""
    confirmed = list(confirmed_deletions)
    transaction.on_commit(lambda: sync_quotas.delay(confirmed_deletions=confirmed))
