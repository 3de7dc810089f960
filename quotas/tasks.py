"""Celery tasks that put the quota model into the cluster (ResourceFlavors, queues, quotas)."""

from celery import shared_task
from django.db import transaction

from portal.kube.apply import RetryableKubeError


@shared_task(
    autoretry_for=(RetryableKubeError,),
    retry_backoff=2,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=8,
    acks_late=True,
)
def sync_quotas() -> dict:
    from quotas.sync import sync_quota_objects

    report = sync_quota_objects()
    return {
        "applied": report.applied,
        "unchanged": report.unchanged,
        "deleted": report.deleted,
        "conflicts": report.conflicts,
    }


def enqueue_quota_sync() -> None:
    """Call after any change to pools, departments, projects, quotas or priority classes (e.g.
    from the admin's save_model/delete_model): syncs once the transaction commits. The periodic
    resync repairs anything a lost message missed."""
    transaction.on_commit(sync_quotas.delay)
