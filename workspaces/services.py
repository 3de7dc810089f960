"""Writes for workspaces: start, start again, stop, proxy activity, the Service, idle culling.

Every run is a job submitted with jobs.services.job_submit, so it is validated, queued, counted
against quota and limited in time exactly like a batch job; stopping cancels that job. Errors
are ValidationError({field: [reason]}) naming the workspace's own fields.
"""

from __future__ import annotations

import datetime
import logging
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from jobs.secret_refs import SECRET_KIND, CredentialFacts
from jobs.services import InvalidTransition, job_stop, job_submit
from jobs.states import ACTIVE, JobState
from portal.celery import app as celery_app
from portal.kube import apply as kube
from portal.kube.apply import KubeError, PermanentKubeError, RetryableKubeError
from tenants.models import Project
from tenants.permissions import can_write
from workspaces import launch
from workspaces.manifests import (
    is_token_secret,
    service_manifest,
    service_name,
    token_secret_manifest,
    token_secret_name,
)
from workspaces.models import Workspace, WorkspaceKind
from workspaces.shapes import ShapeError, check_allowed

log = logging.getLogger(__name__)
SOURCE = "workspaces"
NAME_MAX = 30
# Job fields the shape decides: their errors are the shape's.
_SHAPE_FIELDS = {"kind", "gpus", "mig_profile", "replicas", "gpu_fraction", "backend"}


def per_user_limit() -> int:
    return int(getattr(settings, "PORTAL_WORKSPACES_PER_USER", 2))


def _errors(field: str, message: str) -> ValidationError:
    return ValidationError({field: [message]})


def _project_for(actor: Any, project: Project | str) -> Project:
    found = project if isinstance(project, Project) else None
    if found is None:
        found = Project.objects.filter(slug=project).first()
    if found is None or not can_write(actor, found):
        if found is not None and found.memberships.filter(user=actor).exists():
            raise PermissionDenied(f"Your role in project '{found.slug}' cannot start workspaces.")
        raise _errors("project", f"No project {project!s} you can start workspaces in.")
    return found


def _kind_for(kind: WorkspaceKind | str) -> WorkspaceKind:
    found = kind if isinstance(kind, WorkspaceKind) else None
    if found is None:
        found = WorkspaceKind.objects.filter(slug=kind).first()
    if found is None:
        raise _errors("kind", f"There is no workspace kind {kind!s}.")
    if not found.enabled:
        raise _errors("kind", f"{found.name} workspaces are disabled by the administrators.")
    return found


def active_count(user: Any) -> int:
    return Workspace.objects.filter(owner=user, job__state__in=sorted(ACTIVE)).count()


def _check_limit(user: Any) -> None:
    limit = per_user_limit()
    if active_count(user) >= limit:
        raise _errors(
            "kind",
            f"You already have {limit} workspace(s) running or queued, the most one person may "
            "have; stop one first.",
        )


def _default_name(kind: WorkspaceKind) -> str:
    return f"{kind.slug[:20]}-{secrets.token_hex(3)}".lower()


def workspace_start(
    *,
    actor: Any,
    project: Project | str,
    kind: WorkspaceKind | str,
    shape: str = "",
    name: str = "",
    pool: str = "",
    mounts: list[Any] | None = None,
    env: dict[str, Any] | None = None,
    shared: bool = False,
    source: str = "api",
) -> Workspace:
    """Create a workspace and submit its first run."""
    project = _project_for(actor, project)
    kind = _kind_for(kind)
    shape = shape or kind.default_shape
    try:
        check_allowed(shape, kind.allowed_shapes or [kind.default_shape], kind_name=kind.name)
    except ShapeError as exc:
        raise _errors("shape", str(exc)) from exc
    name = name or _default_name(kind)
    if len(name) > NAME_MAX:
        raise _errors("name", f"At most {NAME_MAX} characters.")
    with transaction.atomic():
        _check_limit(actor)
        try:
            with transaction.atomic():
                workspace = Workspace.objects.create(
                    project=project,
                    owner=actor,
                    kind=kind,
                    name=name,
                    shape=shape,
                    pool=pool,
                    mounts=list(mounts or []),
                    env=dict(env or {}),
                    shared=shared,
                )
        except IntegrityError as exc:
            raise _errors(
                "name", f"A workspace named {name!r} exists in project {project.slug}."
            ) from exc
        _submit_run(workspace, actor=actor, source=source)
    return workspace


def workspace_start_again(*, actor: Any, workspace: Workspace, source: str = "api") -> Workspace:
    """A new run with the same kind, shape, volumes and credentials (the volumes' data stayed)."""
    if actor != workspace.owner:
        raise PermissionDenied("Only the workspace's owner can start it.")
    if workspace.job is not None and workspace.job.state in ACTIVE:
        raise _errors("state", "The workspace is already running or queued.")
    _kind_for(workspace.kind)
    _project_for(actor, workspace.project)
    try:
        check_allowed(
            workspace.shape,
            workspace.kind.allowed_shapes or [workspace.kind.default_shape],
            kind_name=workspace.kind.name,
        )
    except ShapeError as exc:
        raise _errors("shape", str(exc)) from exc
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(pk=workspace.pk).first()
        _check_limit(actor)
        _submit_run(workspace, actor=actor, source=source)
    return workspace


def _job_name(workspace: Workspace) -> str:
    return f"ws-{workspace.pk}-{workspace.name}"[:40].rstrip("-")


def _submit_run(workspace: Workspace, *, actor: Any, source: str) -> None:
    kind = workspace.kind
    token = secrets.token_urlsafe(32)
    run = workspace.runs + 1
    shape_fields = check_allowed(
        workspace.shape, kind.allowed_shapes or [kind.default_shape], kind_name=kind.name
    ).job_fields()
    data: dict[str, Any] = {
        **shape_fields,
        "name": _job_name(workspace),
        "image": kind.image,
        "command": launch.command(kind.app, workspace_id=workspace.pk, port=kind.port),
        "env": {**workspace.env, **launch.env_refs(kind.app, workspace_id=workspace.pk, run=run)},
        "mounts": workspace.mounts,
        "pool": workspace.pool,
        "cpu": kind.cpu,
        "memory": kind.memory,
        "max_runtime_minutes": kind.max_lifetime_minutes,
        "termination_grace_seconds": 10,
    }
    try:
        outcome = job_submit(
            actor=actor,
            project=workspace.project,
            data=data,
            source=source,
            # the token Secret workspace_sync writes, which no project credential can name
            portal_credentials=[token_credential_facts(workspace.pk, run, kind.app)],
        )
    except ValidationError as exc:
        raise ValidationError(_workspace_errors(exc)) from exc
    now = timezone.now()
    workspace.job = outcome.job
    workspace.token = token
    workspace.runs += 1
    workspace.last_activity_at = now
    workspace.gpu_idle_warned_at = None
    workspace.stopped_reason = ""
    workspace.save(
        update_fields=[
            "job",
            "token",
            "runs",
            "last_activity_at",
            "gpu_idle_warned_at",
            "stopped_reason",
        ]
    )
    enqueue_sync(workspace.pk)


def _workspace_errors(exc: ValidationError) -> dict[str, list[str]]:
    """A job's validation errors under the workspace's field names."""
    out: dict[str, list[str]] = {}
    for field, messages in exc.message_dict.items():
        if field in _SHAPE_FIELDS:
            target = "shape"
        elif field in ("image", "command", "name"):
            target = "kind"  # the admin's part of the request
        else:
            target = field  # env.*, mounts[i].*, pool: the same names as the workspace's
        out.setdefault(target, []).extend(messages)
    return out


def workspace_stop(
    *, actor: Any, workspace: Workspace, source: str = "api", reason: str = ""
) -> Workspace:
    """Stop the current run (the job is cancelled; its quota frees once the pod is gone)."""
    if actor is not None and actor != workspace.owner and not can_write(actor, workspace.project):
        raise PermissionDenied("Only the owner or a project member can stop this workspace.")
    who = getattr(actor, "username", None) or "the portal"
    reason = reason or f"stopped by {who}"
    job = workspace.job
    if job is None or job.state not in ACTIVE:
        raise _errors("state", "The workspace is not running.")
    try:
        job_stop(job, reason="WorkspaceStopped", message=reason, source=source, actor=actor)
    except InvalidTransition as exc:
        raise _errors("state", "The workspace is not running.") from exc
    Workspace.objects.filter(pk=workspace.pk).update(stopped_reason=reason[:200])
    workspace.stopped_reason = reason[:200]
    enqueue_sync(workspace.pk)
    return workspace


def workspace_touch(workspace_id: int, *, now: datetime.datetime | None = None) -> None:
    """Record browser activity through the proxy (at most one write per touch interval)."""
    now = now or timezone.now()
    every = float(getattr(settings, "PORTAL_WORKSPACE_TOUCH_SECONDS", 30.0))
    Workspace.objects.filter(pk=workspace_id, last_activity_at__lt=now - _seconds(every)).update(
        last_activity_at=now
    )


def _seconds(value: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=value)


# --- the Service, kept level-triggered ---------------------------------------------------


def enqueue_sync(workspace_id: int) -> None:
    def send() -> None:
        try:
            celery_app.send_task("workspaces.tasks.sync", args=[workspace_id])
        except Exception:  # broker down: the periodic cull pass syncs it
            log.warning("workspace %s: could not enqueue its sync", workspace_id)

    transaction.on_commit(send)


def workspace_sync(workspace_id: int) -> str:
    """Make the Service and the token Secret match the run: present while the job is active,
    gone afterwards."""
    workspace = (
        Workspace.objects.select_related("project", "kind", "job").filter(pk=workspace_id).first()
    )
    if workspace is None:
        return "gone"
    ns = workspace.project.namespace
    job = workspace.job
    if job is not None and job.state in ACTIVE:
        try:
            _apply_run_objects(workspace, job)
        except PermanentKubeError as exc:
            if exc.status != 404:
                raise
            # Secrets and Services are always served: the project's namespace is not there yet
            # (the quota sync creates it, as for the job itself). The task retries.
            raise RetryableKubeError(f"not ready yet: {exc.message}", status=404) from exc
        _delete_token_secret(workspace, workspace.runs - 1)  # if the last run's stop did not
        return "applied"
    kube.delete("v1", "Service", service_name(workspace.pk), ns)
    _delete_token_secret(workspace, workspace.runs)
    return "deleted"


def _apply_run_objects(workspace: Workspace, job: Any) -> None:
    """The run's token Secret, then its Service. The token first: the pod's container waits
    (CreateContainerConfigError) until the Secret exists."""
    ns = workspace.project.namespace
    kube.apply(
        token_secret_manifest(
            workspace_id=workspace.pk,
            run=workspace.runs,
            job_id=job.pk,
            project_slug=workspace.project.slug,
            namespace=ns,
            values=launch.secret_values(workspace.kind.app, token=workspace.token),
        )
    )
    kube.apply(
        service_manifest(
            workspace_id=workspace.pk,
            job_id=job.pk,
            project_slug=workspace.project.slug,
            namespace=ns,
            port=workspace.kind.port,
        )
    )


def _delete_token_secret(workspace: Workspace, run: int) -> None:
    if run < 1:
        return
    ns = workspace.project.namespace
    secret = kube.get("v1", "Secret", token_secret_name(workspace.pk, run), ns)
    if is_token_secret(secret, workspace.pk):  # only ever the portal's own
        kube.delete_object(secret)


def token_credential_facts(workspace_id: int, run: int, app: str) -> CredentialFacts:
    """What the job's validation knows of a run's token Secret (its name and keys, no value)."""
    name = launch.token_credential(workspace_id, run)
    return CredentialFacts(name=name, kind=SECRET_KIND, keys=launch.secret_keys(app))


# --- idle culling -------------------------------------------------------------------------


def idle_since(
    workspace: Workspace, *, kernel_activity: datetime.datetime | None
) -> datetime.datetime | None:
    """The latest sign of use: browser traffic through the proxy or kernel activity."""
    times = [t for t in (workspace.last_activity_at, kernel_activity) if t is not None]
    if workspace.job is not None and workspace.job.state == JobState.RUNNING:
        times.append(workspace.job.state_changed_at)
    return max(times) if times else None


def workspace_cull(*, now: datetime.datetime | None = None, kernel_activity=None) -> list[int]:
    """Stop every running workspace idle for longer than its kind's idle timeout; returns their
    ids. `kernel_activity(workspace)` reads Jupyter's last_activity (None when unknown)."""
    from workspaces import upstream  # the cluster read, kept out of pure callers' imports

    now = now or timezone.now()
    read = kernel_activity or upstream.kernel_last_activity
    stopped: list[int] = []
    running = Workspace.objects.select_related("kind", "project", "job", "owner").filter(
        job__state=JobState.RUNNING
    )
    for workspace in running:
        timeout = _seconds(workspace.kind.idle_timeout_minutes * 60)
        latest = idle_since(workspace, kernel_activity=None)
        if latest is not None and now - latest < timeout:
            continue
        try:
            kernel = read(workspace)
        except KubeError as exc:
            log.warning("workspace %s: kernel activity unknown: %s", workspace.pk, exc)
            continue
        latest = idle_since(workspace, kernel_activity=kernel)
        if latest is not None and now - latest < timeout:
            continue
        minutes = workspace.kind.idle_timeout_minutes
        try:
            workspace_stop(
                actor=None,
                workspace=workspace,
                source=SOURCE,
                reason=f"stopped after {minutes} minutes without activity",
            )
        except ValidationError:
            continue  # stopped meanwhile
        stopped.append(workspace.pk)
    return stopped


def sync_all() -> int:
    """The Service of every workspace whose run is active or just ended (a lost message)."""
    ids = (
        Workspace.objects.filter(job__isnull=False)
        .exclude(
            job__state__in=[JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED],
            job__updated_at__lt=timezone.now() - _seconds(3600),
        )
        .values_list("pk", flat=True)
    )
    done = 0
    for pk in ids:
        try:
            workspace_sync(pk)
            done += 1
        except KubeError as exc:
            log.warning("workspace %s: sync failed: %s", pk, exc)
    return done


def warn_gpu_idle() -> int:
    """Mark running workspaces whose GPU the metrics found idle (gpumetrics' idle warning on the
    run's job): the workspace page says so, well before the idle timeout stops it."""
    return Workspace.objects.filter(
        job__state=JobState.RUNNING,
        gpu_idle_warned_at__isnull=True,
        job__gpu_summary__idle_warned_at__isnull=False,
    ).update(gpu_idle_warned_at=timezone.now())
