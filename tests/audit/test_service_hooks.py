"""Every write through the services leaves exactly one audit row of its action, with the actor,
the source and request id of the request it served, and the project it touched.

The table names one service call per action (with what it needs set up first); each case runs
inside the audit context a request of the API would set. Credentials write Secrets, so their
cases run against kubesim."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.utils import timezone

from audit.context import audit_context
from audit.models import AuditEvent

JOB = {
    "kind": "single",
    "image": "nvcr.io/nvidia/pytorch:24.08-py3",
    "command": ["python", "train.py"],
    "env": {"EPOCHS": "3", "WANDB_KEY": "never-in-the-trail"},
    "gpus": 1,
}


@dataclass(frozen=True)
class Case:
    action: str
    actor: str  # persona attribute
    project: str  # slug, "" for none
    run: Callable[[Any], Any]
    setup: Callable[[Any], Any] | None = None


# --- the calls ---------------------------------------------------------------------------------


def _submit(p, name: str = "train-1"):
    from jobs.services import job_submit

    return job_submit(actor=p.member, project="alpha", data={**JOB, "name": name}).job


def _cancel(p):
    from jobs.models import Job
    from jobs.services import job_cancel

    job_cancel(actor=p.member, job=Job.objects.get(name="train-1"))


def _array(p):
    from jobs.arrays.services import array_submit

    return array_submit(
        actor=p.member, project="alpha", data={**JOB, "name": "sweep", "array": {"count": 3}}
    )


def _array_cancel(p):
    from jobs.arrays.services import array_cancel
    from jobs.models import JobArray

    array_cancel(actor=p.member, array=JobArray.objects.get(name="sweep"))


def _array_with_a_failure(p):
    from jobs.models import Job

    array = _array(p)
    Job.objects.filter(array=array, array_index=1).update(state="failed")


def _array_resubmit(p):
    from jobs.arrays.services import array_resubmit_failed
    from jobs.models import JobArray

    array_resubmit_failed(actor=p.member, array=JobArray.objects.get(name="sweep"))


def _quota_set(p):
    from quotas.services import quota_set

    quota_set(actor=p.staff, project=p.project_a, pool=p.pool, nominal=12, borrowing_limit=4)


def _quota_delete(p):
    from quotas.services import quota_delete

    quota_delete(actor=p.staff, project=p.project_b, pool=p.pool)


def _pool_update(p):
    from quotas.services import pool_update

    pool_update(actor=p.staff, pool=p.pool, node_count=p.pool.node_count + 1)


def _pool_create(p):
    from quotas.services import pool_create

    pool_create(actor=p.staff, slug="a100", name="A100", gpu_model="NVIDIA-A100", node_count=2)


def _department_cap(p):
    from quotas.services import department_quota_set

    department_quota_set(actor=p.staff, department=p.project_a.department, pool=p.pool, limit=64)


def _membership_add(p):
    from tenants.services import membership_add
    from tests.factories import UserFactory

    membership_add(actor=p.admin, project=p.project_a, user=UserFactory(username="nina"))


def _bob(p):
    from tenants.models import Membership

    return Membership.objects.get(project=p.project_a, user=p.member)


def _membership_role(p):
    from tenants.services import membership_change_role

    membership_change_role(actor=p.admin, membership=_bob(p), role="viewer")


def _membership_remove(p):
    from tenants.services import membership_remove

    membership_remove(actor=p.admin, membership=_bob(p))


def _token_create(p):
    from tenants.services import token_create

    return token_create(actor=p.member)[0]


def _token_revoke(p):
    from knox.models import AuthToken

    from tenants.services import token_revoke

    token_revoke(actor=p.member, token_key=AuthToken.objects.get(user=p.member).token_key)


def _volume(p):
    from volumes.services import volume_create

    return volume_create(
        actor=p.admin,
        project="alpha",
        name="data",
        kind="existing",
        claim_name="data-pvc",
        mount_path="/data",
        apply=False,
    )


def _volume_update(p):
    from volumes.models import DataVolume
    from volumes.services import volume_update

    volume_update(actor=p.admin, volume=DataVolume.objects.get(name="data"), mount_path="/d2")


def _volume_delete(p):
    from volumes.models import DataVolume
    from volumes.services import volume_delete

    volume_delete(actor=p.admin, volume=DataVolume.objects.get(name="data"))


def _member_limit(p):
    from governance.services import member_limit_set

    return member_limit_set(
        actor=p.admin, project="alpha", pool="h100", max_gpus=2, user=p.member.username
    )


def _member_limit_delete(p):
    from governance.models import MemberGpuLimit
    from governance.services import member_limit_delete

    member_limit_delete(actor=p.admin, limit=MemberGpuLimit.objects.get())


def _quota_request(p):
    from governance.services import quota_request_create

    return quota_request_create(
        actor=p.admin,
        project="alpha",
        pool="h100",
        gpus=2,
        until=timezone.localdate() + datetime.timedelta(days=3),
        reason="paper deadline",
    )


def _approve(p):
    from governance.models import QuotaRequest
    from governance.services import quota_request_approve

    quota_request_approve(actor=p.staff, request=QuotaRequest.objects.get(), note="ok")


def _refuse(p):
    from governance.models import QuotaRequest
    from governance.services import quota_request_refuse

    quota_request_refuse(actor=p.staff, request=QuotaRequest.objects.get(), note="no room")


def _whatif_apply(p):
    from planner.services import whatif_apply
    from quotas.arithmetic import QuotaEntry

    whatif_apply(actor=p.staff, proposal=[QuotaEntry("alpha", "research", "h100", "gpu", 10, 4)])


def _webhook(p):
    from notifications.services import create_webhook

    return create_webhook(
        actor=p.member, name="team", url="https://8.8.8.8/services/T0/B0/secretpath"
    )


def _webhook_update(p):
    from notifications.models import WebhookEndpoint
    from notifications.services import update_webhook

    update_webhook(WebhookEndpoint.objects.get(), actor=p.member, active=False)


def _webhook_delete(p):
    from notifications.models import WebhookEndpoint
    from notifications.services import delete_webhook

    delete_webhook(WebhookEndpoint.objects.get(), actor=p.member)


def _template(p):
    from jobs.job_templates.services import template_create

    return template_create(actor=p.member, project=p.project_a, name="base", fields=dict(JOB))


def _template_delete(p):
    from jobs.job_templates.services import template_delete
    from jobs.models import JobTemplate

    template_delete(actor=p.member, template=JobTemplate.objects.get())


CASES = [
    Case("job.submit", "member", "alpha", _submit),
    Case("job.cancel", "member", "alpha", _cancel, setup=_submit),
    Case("array.submit", "member", "alpha", _array),
    Case("array.cancel", "member", "alpha", _array_cancel, setup=_array),
    Case("array.resubmit_failed", "member", "alpha", _array_resubmit, _array_with_a_failure),
    Case("quota.change", "staff", "alpha", _quota_set),
    Case("quota.delete", "staff", "beta", _quota_delete),
    Case("pool.create", "staff", "", _pool_create),
    Case("pool.change", "staff", "", _pool_update),
    Case("department_quota.create", "staff", "", _department_cap),
    Case("membership.add", "admin", "alpha", _membership_add),
    Case("membership.change", "admin", "alpha", _membership_role),
    Case("membership.remove", "admin", "alpha", _membership_remove),
    Case("token.create", "member", "", _token_create),
    Case("token.revoke", "member", "", _token_revoke, setup=_token_create),
    Case("volume.create", "admin", "alpha", _volume),
    Case("volume.change", "admin", "alpha", _volume_update, setup=_volume),
    Case("volume.delete", "admin", "alpha", _volume_delete, setup=_volume),
    Case("member_limit.set", "admin", "alpha", _member_limit),
    Case("member_limit.delete", "admin", "alpha", _member_limit_delete, setup=_member_limit),
    Case("quota_request.create", "admin", "alpha", _quota_request),
    Case("quota_request.approve", "staff", "alpha", _approve, setup=_quota_request),
    Case("quota_request.refuse", "staff", "alpha", _refuse, setup=_quota_request),
    Case("planner.whatif_apply", "staff", "", _whatif_apply),
    Case("webhook.create", "member", "", _webhook),
    Case("webhook.change", "member", "", _webhook_update, setup=_webhook),
    Case("webhook.delete", "member", "", _webhook_delete, setup=_webhook),
    Case("template.create", "member", "alpha", _template),
    Case("template.delete", "member", "alpha", _template_delete, setup=_template),
]


def _run(case: Case, personas, source: str = "api") -> AuditEvent:
    if case.setup is not None:
        case.setup(personas)
    with audit_context(source=source, request_id="req-under-test"):
        case.run(personas)
    rows = list(AuditEvent.objects.filter(action=case.action, request_id="req-under-test"))
    assert len(rows) == 1, (case.action, rows)
    return rows[0]


@pytest.mark.parametrize("case", CASES, ids=[c.action for c in CASES])
def test_each_service_action_writes_one_row(case, personas):
    row = _run(case, personas)
    actor = getattr(personas, case.actor)
    assert (row.actor, row.actor_username) == (actor, actor.username)
    assert (row.source, row.project_slug) == ("api", case.project)
    if case.project:
        assert row.project.slug == case.project
    assert "never-in-the-trail" not in str(row.changes) + row.detail
    assert "secretpath" not in str(row.changes) + row.detail


def test_changes_carry_old_and_new_values(personas):
    row = _run(CASES[[c.action for c in CASES].index("quota.change")], personas)
    assert row.changes == {"nominal": [8, 12]}  # the borrowing limit stayed 4
    row = _run(CASES[[c.action for c in CASES].index("membership.change")], personas)
    assert row.changes == {"role": ["member", "viewer"]}


def test_a_rolled_back_write_leaves_no_row(personas):
    from django.core.exceptions import ValidationError

    from tenants.services import membership_add

    with pytest.raises(ValidationError), audit_context(source="api"):
        membership_add(actor=personas.admin, project=personas.project_a, user=personas.member)
    assert not AuditEvent.objects.filter(action="membership.add").exists()


@pytest.mark.parametrize(
    ("user_agent", "source"), [("gpuportal-cli/1.4", "cli"), ("python-requests/2", "api")]
)
def test_an_api_submission_names_its_source_and_submitter(personas, user_agent, source):
    from rest_framework.test import APIClient

    client = APIClient(HTTP_USER_AGENT=user_agent)
    client.force_authenticate(personas.member)
    response = client.post("/api/v1/jobs/", {**JOB, "project": "alpha"}, format="json")
    assert response.status_code == 201, response.json()
    row = AuditEvent.objects.get(action="job.submit")
    assert (row.actor_username, row.source, row.project_slug) == ("bob", source, "alpha")
    assert row.target_id == str(response.json()["id"])
    assert row.request_id  # the request id the response carried too


def test_an_admin_cancel_action_is_recorded_as_admin(personas):
    from django.test import Client

    job = _submit(personas)
    personas.staff.is_superuser = True
    personas.staff.save()
    client = Client()
    client.force_login(personas.staff)
    response = client.post(
        "/admin/jobs/job/", {"action": "cancel_jobs", "_selected_action": [job.pk]}
    )
    assert response.status_code == 302, response.content[:500]
    row = AuditEvent.objects.get(action="job.cancel")
    assert (row.actor_username, row.source, row.project_slug) == ("sam", "admin", "alpha")


@pytest.fixture
def kube(personas, kubesim_api, settings):
    from tests.credentials.conftest import point_at_kubesim

    point_at_kubesim(kubesim_api, settings)
    return personas


def test_credential_writes_are_recorded_without_values(kube):
    from credentials.models import Credential
    from credentials.services import credential_create, credential_delete, credential_replace

    personas = kube
    with audit_context(source="api", request_id="req-cred"):
        credential = credential_create(
            actor=personas.admin,
            project="alpha",
            name="wandb",
            kind="secret",
            values={"WANDB_API_KEY": "s3cret-value"},
        )
        credential_replace(
            actor=personas.admin, credential=credential, values={"OTHER": "s3cret-two"}
        )
        credential_delete(actor=personas.admin, credential=Credential.objects.get())
    rows = list(AuditEvent.objects.filter(request_id="req-cred").order_by("id"))
    assert [r.action for r in rows] == [
        "credential.create",
        "credential.replace",
        "credential.delete",
    ]
    assert {(r.actor_username, r.project_slug, r.source) for r in rows} == {
        ("alice", "alpha", "api")
    }
    assert rows[1].changes == {"keys": [["WANDB_API_KEY"], ["OTHER", "WANDB_API_KEY"]]}
    assert "s3cret" not in "".join(str(r.changes) + r.detail for r in rows)


def test_submit_again_from_the_page_is_recorded_as_a_resubmit(personas, web_client_for):
    job = _submit(personas)
    client = web_client_for(personas.member)
    form = client.get(f"/jobs/new/?again={job.pk}").content.decode()
    assert f'name="again" value="{job.pk}"' in form
    response = client.post(
        "/jobs/new/",
        {
            "project": "alpha",
            "name": "train-2",
            "kind": "single",
            "image": JOB["image"],
            "command": "python train.py",
            "gpus": "1",
            "priority": "normal",
            "again": str(job.pk),
        },
    )
    assert response.status_code == 302, response.content[:500]
    row = AuditEvent.objects.get(action="job.resubmit")
    assert (row.actor_username, row.source, row.project_slug) == ("bob", "web", "alpha")
    assert row.detail == f"Again of job {job.pk}."


def test_resubmit_through_the_api_makes_a_new_job_recorded_as_a_resubmit_by_the_cli(
    personas, api_client_for
):
    from jobs.models import Job

    job = _submit(personas)
    client = api_client_for(personas.member)
    response = client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/", HTTP_USER_AGENT="gpuportal-cli/0.1.0"
    )
    assert response.status_code == 201, response.content
    again = Job.objects.get(pk=response.json()["id"])
    assert again.pk != job.pk
    assert again.name != job.name
    fields = ("image", "command", "env", "gpus", "pool_id", "priority", "kind")
    assert [getattr(again, f) for f in fields] == [getattr(job, f) for f in fields]
    row = AuditEvent.objects.get(action="job.resubmit")
    assert (row.actor_username, row.source, row.project_slug) == ("bob", "cli", "alpha")
    assert row.detail == f"Again of job {job.pk}."
    assert Job.objects.get(pk=job.pk).state == job.state  # the original is left as it was


def test_resubmit_refuses_a_viewer_hides_another_tenants_job_and_names_a_gone_quota(
    personas, api_client_for
):
    from quotas.models import ProjectQuota

    job = _submit(personas)
    viewer = api_client_for(personas.viewer).post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert viewer.status_code == 403
    outsider = api_client_for(personas.outsider).post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert outsider.status_code == 404
    ProjectQuota.objects.filter(project=personas.project_a).delete()
    gone = api_client_for(personas.member).post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert gone.status_code == 400, gone.content
    assert "quota" in str(gone.json()["errors"]).lower(), gone.json()
    assert not AuditEvent.objects.filter(action="job.resubmit").exists()


def test_reading_a_credentials_keys_is_recorded(personas, api_client_for):
    from credentials.models import Credential

    credential = Credential.objects.create(
        project=personas.project_a, name="hf", kind="secret", keys=["token"]
    )
    response = api_client_for(personas.viewer).get(f"/api/v1/credentials/{credential.pk}/")
    assert response.status_code == 200
    row = AuditEvent.objects.get(action="credential.read_keys")
    assert (row.actor_username, row.source, row.target_id) == ("victor", "api", str(credential.pk))
