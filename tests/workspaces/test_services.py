"""Starting and stopping workspaces through the job machinery (kubesim, in-process)."""

import json

import pytest
from django.core.exceptions import ValidationError

from tests.jobs.kubesim_org import reconcile_until
from tests.workspaces.conftest import JUPYTER

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


def _start(org, **kw):
    from workspaces.services import workspace_start

    kw.setdefault("kind", JUPYTER)
    kw.setdefault("shape", "mig:1g.10gb")
    return workspace_start(actor=org["user"], project=org["project"], **kw)


def _services(org, ws):
    from portal.kube import apply as kube

    return kube.list_owned(
        "v1",
        "Service",
        namespace=org["project"].namespace,
        selector=f"gpu-portal.io/workspace-id={ws.pk}",
    )


def _wait_for_status(ws, timeout=60.0):
    import time

    from portal.kube.apply import RetryableKubeError
    from workspaces.upstream import kernel_last_activity

    deadline = time.monotonic() + timeout
    while True:
        try:
            return kernel_last_activity(ws)
        except RetryableKubeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _token_secret(org, ws, *, run):
    """The values of the run's token Secret in the cluster (None when there is none)."""
    from credentials.manifests import decode_data
    from portal.kube import apply as kube
    from workspaces.manifests import token_secret_name

    found = kube.get("v1", "Secret", token_secret_name(ws.pk, run), org["project"].namespace)
    return None if found is None else decode_data(found)


def test_a_workspace_runs_as_a_job_with_a_service_and_stops_and_starts_again(org):
    from jobs.reconcile.services import job_reconcile
    from jobs.selectors import job_manifests
    from workspaces.selectors import state_of
    from workspaces.services import workspace_start_again, workspace_stop, workspace_sync

    ws = _start(org, name="nb")
    job = ws.job
    assert (job.kind, job.mig_profile, job.image) == ("mig", "1g.10gb", ws.kind.image)
    assert f"--ServerApp.base_url=/ws/{ws.pk}/" in job.command
    # The token is in neither the job nor its manifest (the project's members read both): the
    # run's env takes it from a Secret of the workspace's own.
    assert job.env["JUPYTER_TOKEN"] == {"secret": f"workspace.{ws.pk}.1", "key": "JUPYTER_TOKEN"}
    assert ws.token not in json.dumps(job_manifests(job))
    assert job.max_runtime_minutes == ws.kind.max_lifetime_minutes
    assert state_of(ws) == "queued"

    assert workspace_sync(ws.pk) == "applied"
    assert len(_services(org, ws)) == 1
    assert _token_secret(org, ws, run=1) == {"JUPYTER_TOKEN": ws.token}
    reconcile_until(job, {"running"})
    ws.refresh_from_db()
    assert state_of(ws) == "running"
    # kubesim runs the real Jupyter server; the portal reads its activity through the API
    # server's service proxy with the workspace's token.
    assert _wait_for_status(ws) is not None

    workspace_stop(actor=org["user"], workspace=ws)
    assert job_reconcile(job_id=job.pk) == "deleted"
    assert workspace_sync(ws.pk) == "deleted"
    assert _services(org, ws) == []
    assert _token_secret(org, ws, run=1) is None
    ws.refresh_from_db()
    assert state_of(ws) == "stopped"
    assert ws.stopped_reason == f"stopped by {org['user'].username}"

    first_token = ws.token
    workspace_start_again(actor=org["user"], workspace=ws)
    ws.refresh_from_db()
    assert ws.runs == 2
    assert ws.job_id != job.pk
    assert ws.token != first_token
    assert ws.job.mig_profile == "1g.10gb"
    assert ws.job.env["JUPYTER_TOKEN"]["secret"] == f"workspace.{ws.pk}.2"
    assert workspace_sync(ws.pk) == "applied"
    assert _token_secret(org, ws, run=2) == {"JUPYTER_TOKEN": ws.token}


def test_bad_requests_are_refused_with_the_reason(org, settings):
    from workspaces.models import WorkspaceKind

    with pytest.raises(ValidationError) as exc:
        _start(org, shape="gpu:4")
    assert "does not allow gpu:4" in exc.value.message_dict["shape"][0]

    with pytest.raises(ValidationError) as exc:
        _start(org, shape="fraction:0.5")
    # The job validation's reason: this project's pool runs on Kueue, not KAI.
    assert "KAI" in " ".join(exc.value.message_dict["shape"]), exc.value.message_dict

    WorkspaceKind.objects.filter(slug="code-server").update(enabled=False)
    with pytest.raises(ValidationError) as exc:
        _start(org, kind="code-server", shape="gpu:1")
    assert "disabled by the administrators" in exc.value.message_dict["kind"][0]

    settings.PORTAL_WORKSPACES_PER_USER = 1
    _start(org, name="first")
    with pytest.raises(ValidationError) as exc:
        _start(org, name="second")
    assert "You already have 1 workspace(s)" in exc.value.message_dict["kind"][0]


def test_idle_workspaces_are_stopped_and_busy_ones_kept(org):
    import datetime

    from django.utils import timezone

    from jobs.states import JobState
    from workspaces.models import Workspace
    from workspaces.services import workspace_cull

    idle, busy = _start(org, name="idle"), _start(org, name="busy", shape="gpu:1")
    long_ago = timezone.now() - datetime.timedelta(hours=3)
    for ws in (idle, busy):
        type(ws.job).objects.filter(pk=ws.job_id).update(
            state=JobState.RUNNING, state_changed_at=long_ago
        )
    Workspace.objects.filter(pk__in=[idle.pk, busy.pk]).update(last_activity_at=long_ago)

    def kernel(ws):  # Jupyter's last_activity: the busy one's kernel ran a minute ago
        return timezone.now() - datetime.timedelta(minutes=1) if ws.pk == busy.pk else None

    assert workspace_cull(kernel_activity=kernel) == [idle.pk]
    idle.refresh_from_db()
    assert idle.job.state == "cancelled"
    assert "without activity" in idle.stopped_reason


def test_a_waiting_workspaces_page_says_when_it_will_likely_start(org, client):
    from workspaces.services import workspace_stop

    ws = _start(org, name="nb")
    client.force_login(org["user"])
    page = client.get(f"/workspaces/{ws.pk}/").content.decode()
    assert "Queued" in page
    assert "Forecast: starts now (pool " in page  # the project's MIG quota is free
    workspace_stop(actor=org["user"], workspace=ws)
    stopped = client.get(f"/workspaces/{ws.pk}/").content.decode()
    assert "Forecast:" not in stopped


def test_a_sync_before_the_projects_namespace_exists_is_retried_not_dropped(org):
    """The quota sync creates a new project's namespace; a workspace started before it is
    synced again (RetryableKubeError: the task retries), as its job's reconcile is."""
    from portal.kube.apply import RetryableKubeError
    from tests.factories import MembershipFactory, ProjectFactory, ProjectQuotaFactory
    from workspaces.services import workspace_start, workspace_sync

    fresh = ProjectFactory(slug=f"{org['project'].slug}x", department=org["project"].department)
    ProjectQuotaFactory(project=fresh, pool=org["pool"], resource="1g.10gb", nominal=1)
    MembershipFactory(user=org["user"], project=fresh, role="member")
    ws = workspace_start(actor=org["user"], project=fresh, kind=JUPYTER, shape="mig:1g.10gb")
    with pytest.raises(RetryableKubeError, match="not ready yet"):
        workspace_sync(ws.pk)
