"""Celery tasks for workspaces; each body calls one service."""

from celery import shared_task

from portal.kube.apply import RetryableKubeError
from portal.outage import RETRY_ON_OUTAGE, ServiceUnavailable, retry_when_unavailable
from workspaces import services


@shared_task(
    name="workspaces.tasks.sync",
    autoretry_for=(RetryableKubeError, ServiceUnavailable),
    **RETRY_ON_OUTAGE,
    acks_late=True,
    typing=False,
)
@retry_when_unavailable
def sync(workspace_id: int) -> str:
    return services.workspace_sync(workspace_id)


@shared_task(name="workspaces.tasks.cull", typing=False)
@retry_when_unavailable
def cull() -> dict[str, int]:
    """Stop idle workspaces, warn about idle GPUs, and keep every Service where it should be."""
    stopped = services.workspace_cull()
    warned = services.warn_gpu_idle()
    synced = services.sync_all()
    return {"stopped": len(stopped), "warned": warned, "synced": synced}
