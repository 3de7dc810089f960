"""Walk every endpoint of the API router as every persona and assert each answer.

The endpoint list is derived from `portal.api.router`, so registering a new viewset or action
without stating here who may call it fails `test_every_routed_action_has_expectations`.
Personas (tests/conftest.py): project A ("alpha") has an admin, a member and a viewer; the
outsider is admin of project B ("beta"); staff administer everything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.urls import reverse

from tests.conftest import PERSONA_NAMES


@dataclass(frozen=True)
class Endpoint:
    basename: str
    action: str
    method: str
    detail: bool
    route_name: str

    @property
    def id(self) -> str:
        return f"{self.basename}-{self.action}"


def routed_endpoints() -> list[Endpoint]:
    import portal.urls  # noqa: F401 - importing the URLconf registers every app's viewsets
    from portal.api import router

    endpoints = []
    for _prefix, viewset, basename in router.registry:
        for route in router.get_routes(viewset):
            for method, action in router.get_method_map(viewset, route.mapping).items():
                endpoints.append(
                    Endpoint(
                        basename=basename,
                        action=action,
                        method=method,
                        detail=route.detail,
                        route_name=route.name.format(basename=basename),
                    )
                )
    return endpoints


@dataclass
class Case:
    """How to call one basename's endpoints and what each persona should get back."""

    # The lookup value of the object in project A that detail actions target.
    target: Callable[[Any], str]
    # Is the target in a list response's results? (None: the list is not paginated rows)
    listed: Callable[[Any, list[dict]], bool] | None
    # Request body per write action.
    payloads: dict[str, Callable[[Any], dict]] = field(default_factory=dict)
    # action -> {persona: expected status}
    expect: dict[str, dict[str, int]] = field(default_factory=dict)
    # action -> check of the database after a successful write (given personas, persona name)
    after: dict[str, Callable[[Any, str], None]] = field(default_factory=dict)
    # URL kwargs of a nested route (e.g. /jobs/{job_pk}/metrics/), given personas
    url_kwargs: Callable[[Any], dict[str, str]] | None = None
    # Called with the test's request before the call (e.g. to point the portal at a cluster).
    setup: Callable[[Any], None] | None = None


def _bob_membership(p) -> Any:
    from tenants.models import Membership

    return Membership.objects.get(project=p.project_a, user=p.member)


def _new_user_payload(p) -> dict:
    from tests.factories import UserFactory

    return {"project": "alpha", "user": UserFactory(username="newcomer").username, "role": "viewer"}


def _assert_newcomer_added(p, persona: str) -> None:
    from tenants.models import Membership

    assert Membership.objects.get(project=p.project_a, user__username="newcomer").role == "viewer"


def _assert_bob_is_viewer(p, persona: str) -> None:
    assert _bob_membership(p).role == "viewer"


def _assert_bob_removed(p, persona: str) -> None:
    from tenants.models import Membership

    assert not Membership.objects.filter(project=p.project_a, user=p.member).exists()


def _job_in_a(p) -> Any:
    """A submitted single-GPU job of project A (created once per test)."""
    from jobs.models import Job

    job, _ = Job.objects.get_or_create(
        project=p.project_a,
        name="train-1",
        defaults={
            "submitter": p.member,
            "kind": "single",
            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": ["python", "train.py"],
            "gpus": 1,
            "pool": p.pool,
            "cpu": "8",
            "memory": "64Gi",
            "max_runtime_minutes": 60,
            "backend": "kueue",
        },
    )
    return job


def _job_payload(p) -> dict:
    return {
        "project": "alpha",
        "name": "matrix-job",
        "kind": "single",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "gpus": 1,
        "pool": "h100",
    }


def _assert_job_submitted(p, persona: str) -> None:
    from jobs.models import Job

    job = Job.objects.get(project=p.project_a, name="matrix-job")
    assert job.submitter == p.by_name(persona)
    assert job.state == "submitted"


def _assert_job_resubmitted(p, persona: str) -> None:
    from jobs.models import Job

    again = Job.objects.filter(project=p.project_a).exclude(pk=_job_in_a(p).pk).get()
    assert again.submitter == p.by_name(persona)
    assert (again.image, again.command) == (_job_in_a(p).image, _job_in_a(p).command)


def _assert_job_cancelled(p, persona: str) -> None:
    _job_in_a(p).refresh_from_db()
    assert _job_in_a(p).state == "cancelled"


def _volume_in_a(p) -> Any:
    """A data volume (an existing claim) of project A."""
    from volumes.models import DataVolume

    volume, _ = DataVolume.objects.get_or_create(
        project=p.project_a,
        name="shared-data",
        defaults={"kind": "existing", "claim_name": "shared-pvc", "mount_path": "/data"},
    )
    return volume


def _volume_payload(p) -> dict:
    return {
        "project": "alpha",
        "name": "matrix-vol",
        "kind": "existing",
        "claim_name": "matrix-pvc",
        "mount_path": "/matrix",
    }


def _assert_volume_created(p, persona: str) -> None:
    from volumes.models import DataVolume

    volume = DataVolume.objects.get(project=p.project_a, name="matrix-vol")
    assert volume.created_by == p.by_name(persona)


def _assert_volume_described(p, persona: str) -> None:
    assert _volume_in_a(p).description == "matrix"


def _assert_volume_removed(p, persona: str) -> None:
    from volumes.models import DataVolume

    assert not DataVolume.objects.filter(project=p.project_a, name="shared-data").exists()


def _credential_in_a(p) -> Any:
    """A secret credential of project A (the row; its Secret is written by a create)."""
    from credentials.models import Credential

    credential, _ = Credential.objects.get_or_create(
        project=p.project_a, name="hf", defaults={"kind": "secret", "keys": ["token"]}
    )
    return credential


def _with_kubesim(request) -> None:
    # Credential writes go to the cluster at once: the session's API-only kubesim.
    from tests.credentials.conftest import point_at_kubesim

    point_at_kubesim(request.getfixturevalue("kubesim_api"), request.getfixturevalue("settings"))


def _assert_credential_created(p, persona: str) -> None:
    from credentials.models import Credential

    assert Credential.objects.get(project=p.project_a, name="matrix").created_by == p.by_name(
        persona
    )


def _array_in_a(p) -> Any:
    """A two-element array of project A: element 0 failed, element 1 still submitted."""
    from jobs.models import Job, JobArray

    array, created = JobArray.objects.get_or_create(
        project=p.project_a,
        name="sweep",
        defaults={"submitter": p.member, "count": 2, "parallelism": 2, "sweep": {"lr": [1, 2]}},
    )
    if created:
        for index, state in enumerate(("failed", "submitted")):
            Job.objects.create(
                project=p.project_a,
                submitter=p.member,
                name=f"sweep-{index}",
                kind="single",
                image="nvcr.io/nvidia/pytorch:24.05-py3",
                gpus=1,
                cpu="8",
                memory="64Gi",
                max_runtime_minutes=60,
                backend="kueue",
                state=state,
                array=array,
                array_index=index,
                params={"lr": index + 1},
            )
    return array


def _assert_array_cancelled(p, persona: str) -> None:
    from jobs.models import Job

    assert Job.objects.get(array=_array_in_a(p), array_index=1).state == "cancelled"


def _assert_element_resubmitted(p, persona: str) -> None:
    from jobs.models import Job

    assert Job.objects.get(array=_array_in_a(p), array_index=0, superseded=False).state == (
        "submitted"
    )


def _workspace_in_a(p) -> Any:
    """A running JupyterLab workspace of the member in project A, shared with the project."""
    from workspaces.models import Workspace, WorkspaceKind

    job = _job_in_a(p)
    kind = WorkspaceKind.objects.get(slug="jupyterlab")
    workspace, _ = Workspace.objects.get_or_create(
        project=p.project_a,
        name="nb",
        defaults={"owner": p.member, "kind": kind, "shape": "gpu:1", "shared": True, "job": job},
    )
    return workspace


def _assert_workspace_started(p, persona: str) -> None:
    from workspaces.models import Workspace

    started = Workspace.objects.filter(project=p.project_a, owner=p.by_name(persona)).last()
    assert started.job.state == "submitted"
    assert started.job.gpus == 1


def _assert_workspace_stopped(p, persona: str) -> None:
    assert _workspace_in_a(p).job.state == "cancelled"


def _template_in_a(p) -> Any:
    from jobs.models import JobTemplate

    template, _ = JobTemplate.objects.get_or_create(
        project=p.project_a,
        name="nightly",
        defaults={"fields": {"kind": "single", "image": "busybox", "gpus": 1}},
    )
    return template


def _assert_template_saved(p, persona: str) -> None:
    from jobs.models import JobTemplate

    template = JobTemplate.objects.get(project=p.project_a, name="matrix-tpl")
    assert template.created_by == p.by_name(persona)


def _assert_template_renamed(p, persona: str) -> None:
    from jobs.models import JobTemplate

    assert JobTemplate.objects.filter(project=p.project_a, name="renamed").exists()


def _assert_template_gone(p, persona: str) -> None:
    from jobs.models import JobTemplate

    assert not JobTemplate.objects.filter(project=p.project_a, name="nightly").exists()


def _audit_event_in_a(p) -> Any:
    from audit.models import AuditEvent
    from audit.services import record

    event = AuditEvent.objects.filter(project=p.project_a).first()
    return event or record("job.cancel", actor=p.member, project=p.project_a)


def _member_limit_in_a(p) -> Any:
    from governance.models import MemberGpuLimit

    return MemberGpuLimit.objects.get_or_create(
        project=p.project_a, pool=p.pool, user=p.member, defaults={"max_gpus": 2}
    )[0]


def _quota_request_in_a(p) -> Any:
    import datetime

    from governance.models import QuotaRequest

    return QuotaRequest.objects.get_or_create(
        project=p.project_a,
        pool=p.pool,
        reason="matrix",
        defaults={
            "gpus": 2,
            "until": datetime.datetime.now(tz=datetime.UTC).date() + datetime.timedelta(days=7),
            "requester": p.admin,
        },
    )[0]


def _quota_request_payload(p) -> dict:
    import datetime

    until = datetime.datetime.now(tz=datetime.UTC).date() + datetime.timedelta(days=7)
    return {"project": "alpha", "pool": "h100", "gpus": 1, "until": str(until), "reason": "more"}


def _webhook_of_member(p) -> Any:
    from notifications.models import WebhookEndpoint

    return WebhookEndpoint.objects.get_or_create(
        user=p.member, name="team", defaults={"url": "https://8.8.8.8/hook", "secret": "s"}
    )[0]


def _assert_waiting_minutes_set(p, persona: str) -> None:
    from notifications.selectors import stored_waiting_minutes

    assert stored_waiting_minutes(p.by_name(persona)) == 45


READ_ALL_IN_PROJECT = {"outsider": 404, "viewer": 200, "member": 200, "admin": 200, "staff": 200}
LIST_OK = dict.fromkeys(PERSONA_NAMES, 200)
ADMINS_ONLY = {"outsider": 404, "viewer": 403, "member": 403, "admin": 200, "staff": 200}
WRITERS = {"outsider": 404, "viewer": 403, "member": 200, "admin": 200, "staff": 200}
STAFF_ONLY = {"outsider": 403, "viewer": 403, "member": 403, "admin": 403, "staff": 200}
# One's own rows (notification webhooks): the member's endpoint is nobody else's business.
OWNER_ONLY = {"outsider": 404, "viewer": 404, "member": 200, "admin": 404, "staff": 404}


def _assert_alpha_guaranteed_5(p, persona: str) -> None:
    from quotas.models import ProjectQuota

    assert ProjectQuota.objects.get(project=p.project_a, pool=p.pool, resource="gpu").nominal == 5


CASES: dict[str, Case] = {
    "projects": Case(
        target=lambda p: p.project_a.slug,
        listed=lambda p, results: any(r["slug"] == "alpha" for r in results),
        expect={"list": LIST_OK, "retrieve": READ_ALL_IN_PROJECT},
    ),
    "memberships": Case(
        target=lambda p: str(_bob_membership(p).pk),
        listed=lambda p, results: any(r["id"] == _bob_membership(p).pk for r in results),
        payloads={
            "create": _new_user_payload,
            "update": lambda p: {"role": "viewer"},
            "partial_update": lambda p: {"role": "viewer"},
        },
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            # The outsider names a project they cannot see: the same answer as a missing one.
            "create": {"outsider": 400, "viewer": 403, "member": 403, "admin": 201, "staff": 201},
            "update": ADMINS_ONLY,
            "partial_update": ADMINS_ONLY,
            "destroy": {**ADMINS_ONLY, "admin": 204, "staff": 204},
        },
        after={
            "create": _assert_newcomer_added,
            "update": _assert_bob_is_viewer,
            "partial_update": _assert_bob_is_viewer,
            "destroy": _assert_bob_removed,
        },
    ),
    "pools": Case(
        target=lambda p: p.pool.slug,
        listed=lambda p, results: any(r["slug"] == "h100" for r in results),
        # Pools are the cluster's catalogue, not tenant data: every signed-in user reads them.
        expect={"list": LIST_OK, "retrieve": LIST_OK},
    ),
    "jobs": Case(
        target=lambda p: str(_job_in_a(p).pk),
        listed=lambda p, results: any(r["id"] == _job_in_a(p).pk for r in results),
        payloads={"create": _job_payload},
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "manifest": READ_ALL_IN_PROJECT,
            # The job has not started a pod: members are told so (409), outsiders see nothing.
            "logs": {"outsider": 404, "viewer": 409, "member": 409, "admin": 409, "staff": 409},
            "create": {"outsider": 400, "viewer": 403, "member": 201, "admin": 201, "staff": 201},
            "cancel": WRITERS,
            "resubmit": {"outsider": 404, "viewer": 403, "member": 201, "admin": 201, "staff": 201},
        },
        after={
            "create": _assert_job_submitted,
            "cancel": _assert_job_cancelled,
            "resubmit": _assert_job_resubmitted,
        },
    ),
    "volumes": Case(
        target=lambda p: str(_volume_in_a(p).pk),
        listed=lambda p, results: any(r["id"] == _volume_in_a(p).pk for r in results),
        payloads={
            "create": _volume_payload,
            "update": lambda p: {"description": "matrix"},
            "partial_update": lambda p: {"description": "matrix"},
        },
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "create": {"outsider": 400, "viewer": 403, "member": 403, "admin": 201, "staff": 201},
            "update": ADMINS_ONLY,
            "partial_update": ADMINS_ONLY,
            "destroy": ADMINS_ONLY,
            # Without a cluster the sync records the error on the volume (still a 200).
            "sync": ADMINS_ONLY,
        },
        after={
            "create": _assert_volume_created,
            "update": _assert_volume_described,
            "partial_update": _assert_volume_described,
            "destroy": _assert_volume_removed,
        },
    ),
    "credentials": Case(
        target=lambda p: str(_credential_in_a(p).pk),
        listed=lambda p, results: any(r["name"] == "hf" for r in results),
        payloads={
            "create": lambda p: {
                "project": "alpha",
                "name": "matrix",
                "kind": "secret",
                "values": {"token": "matrix-value"},
            },
            "update": lambda p: {"values": {"token": "new-value"}},
            "partial_update": lambda p: {"values": {"token": "new-value"}},
        },
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "create": {"outsider": 400, "viewer": 403, "member": 403, "admin": 201, "staff": 201},
            "update": ADMINS_ONLY,
            "partial_update": ADMINS_ONLY,
            "destroy": {**ADMINS_ONLY, "admin": 204, "staff": 204},
        },
        after={"create": _assert_credential_created},
        setup=_with_kubesim,
    ),
    "arrays": Case(
        target=lambda p: str(_array_in_a(p).pk),
        listed=lambda p, results: any(r["id"] == _array_in_a(p).pk for r in results),
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "cancel": WRITERS,
            "resubmit_failed": WRITERS,
        },
        after={"cancel": _assert_array_cancelled, "resubmit_failed": _assert_element_resubmitted},
    ),
    "workspaces": Case(
        target=lambda p: str(_workspace_in_a(p).pk),
        # Shared with the project's writers only: viewers do not list it (checked in the
        # workspaces tests), so the generic "listed" check does not apply.
        listed=None,
        payloads={"create": lambda p: {"project": "alpha", "kind": "jupyterlab", "shape": "gpu:1"}},
        expect={
            "list": LIST_OK,
            "retrieve": {**READ_ALL_IN_PROJECT, "viewer": 404},
            "create": {"outsider": 400, "viewer": 403, "member": 201, "admin": 201, "staff": 201},
            "stop": {**WRITERS, "viewer": 404},
            # Only the owner starts it again, and only once it stopped (it is running here).
            "start": {"outsider": 404, "viewer": 404, "member": 400, "admin": 403, "staff": 403},
        },
        after={"create": _assert_workspace_started, "stop": _assert_workspace_stopped},
    ),
    "workspace-kinds": Case(
        target=lambda p: "jupyterlab",
        listed=lambda p, results: any(r["slug"] == "jupyterlab" for r in results),
        expect={"list": LIST_OK, "retrieve": dict.fromkeys(PERSONA_NAMES, 200)},
    ),
    "templates": Case(
        target=lambda p: str(_template_in_a(p).pk),
        listed=lambda p, results: any(r["id"] == _template_in_a(p).pk for r in results),
        payloads={
            "create": lambda p: {
                "project": "alpha",
                "name": "matrix-tpl",
                "fields": {"kind": "single", "image": "busybox", "gpus": 2},
            },
            "partial_update": lambda p: {"name": "renamed"},
        },
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "create": {"outsider": 400, "viewer": 403, "member": 201, "admin": 201, "staff": 201},
            "partial_update": WRITERS,
            "destroy": {**WRITERS, "member": 204, "admin": 204, "staff": 204},
        },
        after={
            "create": _assert_template_saved,
            "partial_update": _assert_template_renamed,
            "destroy": _assert_template_gone,
        },
    ),
    # The audit trail: project admins and staff; the list is narrowed (tests/audit).
    "audit": Case(
        target=lambda p: str(_audit_event_in_a(p).pk),
        listed=None,
        expect={"list": LIST_OK, "retrieve": {**ADMINS_ONLY, "viewer": 404, "member": 404}},
    ),
    # GPU metrics (gpumetrics): nested under a job and a project.
    "job-metrics": Case(
        target=lambda p: str(_job_in_a(p).pk),
        listed=None,
        url_kwargs=lambda p: {"job_pk": str(_job_in_a(p).pk)},
        expect={"list": READ_ALL_IN_PROJECT},
    ),
    "project-usage": Case(
        target=lambda p: p.project_a.slug,
        listed=None,
        url_kwargs=lambda p: {"project_slug": p.project_a.slug},
        expect={"list": READ_ALL_IN_PROJECT},
    ),
    # Governance: GPU limits per member, temporary quota requests (decided by staff only).
    "member-limits": Case(
        target=lambda p: str(_member_limit_in_a(p).pk),
        listed=lambda p, results: any(r["id"] == _member_limit_in_a(p).pk for r in results),
        payloads={"create": lambda p: {"project": "alpha", "pool": "h100", "max_gpus": 4}},
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "create": {"outsider": 400, "viewer": 403, "member": 403, "admin": 201, "staff": 201},
            "destroy": {**ADMINS_ONLY, "admin": 204, "staff": 204},
        },
    ),
    "quota-requests": Case(
        target=lambda p: str(_quota_request_in_a(p).pk),
        listed=lambda p, results: any(r["id"] == _quota_request_in_a(p).pk for r in results),
        payloads={"create": _quota_request_payload, "refuse": lambda p: {"note": "not now"}},
        expect={
            "list": LIST_OK,
            "retrieve": READ_ALL_IN_PROJECT,
            "create": {"outsider": 400, "viewer": 403, "member": 403, "admin": 201, "staff": 201},
            "approve": {**ADMINS_ONLY, "admin": 403},
            "refuse": {**ADMINS_ONLY, "admin": 403},
        },
    ),
    # The planner: a forecast takes a submission's fields (a viewer may not submit: 403).
    "forecast": Case(
        target=lambda p: p.project_a.slug,
        listed=None,
        payloads={"list": lambda p: {"project": "alpha", "kind": "single", "gpus": 1}},
        expect={"list": {**WRITERS, "outsider": 400}},
    ),
    "job-advice": Case(
        target=lambda p: str(_job_in_a(p).pk),
        listed=None,
        url_kwargs=lambda p: {"job_pk": str(_job_in_a(p).pk)},
        expect={"list": READ_ALL_IN_PROJECT},
    ),
    # Notifications: everyone's own settings and webhook endpoints.
    "notification-settings": Case(
        target=lambda p: "",
        listed=None,
        payloads={
            "create": lambda p: {
                "waiting_minutes": 45,
                "preferences": {"job.ended": {"webhook": False}},
            }
        },
        expect={"list": LIST_OK, "create": LIST_OK},
        after={"create": _assert_waiting_minutes_set},
    ),
    "notification-webhooks": Case(
        target=lambda p: str(_webhook_of_member(p).pk),
        listed=None,
        payloads={
            "create": lambda p: {"name": "mine", "url": "https://8.8.4.4/hook"},
            "partial_update": lambda p: {"active": False},
        },
        expect={
            "list": LIST_OK,
            "retrieve": OWNER_ONLY,
            "create": dict.fromkeys(PERSONA_NAMES, 201),
            "partial_update": OWNER_ONLY,
            "destroy": {**OWNER_ONLY, "member": 204},
        },
    ),
    "notification-deliveries": Case(
        target=lambda p: "",
        listed=None,
        expect={"list": LIST_OK},
    ),
    "whatif": Case(
        target=lambda p: p.project_a.slug,
        listed=None,
        payloads={
            "create": lambda p: {},
            "apply": lambda p: {"quotas": [{"project": "alpha", "pool": "h100", "nominal": 5}]},
        },
        expect={"create": STAFF_ONLY, "apply": STAFF_ONLY},
        after={"apply": _assert_alpha_guaranteed_5},
    ),
}

ENDPOINTS = routed_endpoints()


def test_every_routed_action_has_expectations():
    routed = {(e.basename, e.action) for e in ENDPOINTS}
    declared = {(basename, action) for basename, case in CASES.items() for action in case.expect}
    assert routed - declared == set(), "routed but not covered by the matrix: add them to CASES"
    assert declared - routed == set(), "declared in CASES but not routed"
    for basename, case in CASES.items():
        for action, by_persona in case.expect.items():
            assert set(by_persona) == set(PERSONA_NAMES), (basename, action)


def test_every_viewset_is_tenant_scoped_or_a_read_only_catalogue():
    from portal.api import (
        ClusterReadOnlyViewSet,
        OwnerScopedViewSet,
        TenantScopedViewSet,
        router,
    )

    for _prefix, viewset, basename in router.registry:
        if issubclass(viewset, TenantScopedViewSet):
            # Query shaping goes in shape_queryset; get_queryset must stay the tenancy filter.
            assert viewset.get_queryset is TenantScopedViewSet.get_queryset, basename
            continue
        if issubclass(viewset, OwnerScopedViewSet):
            # One user's own rows (notification settings and webhooks), filtered the same way.
            assert viewset.get_queryset is OwnerScopedViewSet.get_queryset, basename
            continue
        assert issubclass(viewset, ClusterReadOnlyViewSet), basename
        writes = {"create", "update", "partial_update", "destroy"}
        assert not any(hasattr(viewset, action) for action in writes), basename


def _url(endpoint: Endpoint, personas) -> str:
    if not endpoint.detail:
        nested = CASES[endpoint.basename].url_kwargs
        return reverse(endpoint.route_name, kwargs=nested(personas) if nested else None)
    from portal.api import router

    viewset = next(v for _, v, b in router.registry if b == endpoint.basename)
    lookup = getattr(viewset, "lookup_url_kwarg", None) or viewset.lookup_field
    return reverse(endpoint.route_name, kwargs={lookup: CASES[endpoint.basename].target(personas)})


@pytest.mark.parametrize("persona", PERSONA_NAMES)
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.id)
def test_endpoint_answers_each_persona(endpoint, persona, personas, api_client_for, request):
    case = CASES[endpoint.basename]
    expected = case.expect[endpoint.action][persona]
    if case.setup is not None:
        case.setup(request)
    case.target(personas)  # the object detail actions and list checks are about exists
    url = _url(endpoint, personas)
    payload = case.payloads.get(endpoint.action, lambda p: None)(personas)
    client = api_client_for(personas.by_name(persona))

    response = getattr(client, endpoint.method)(
        url, payload, format="json", HTTP_ACCEPT="application/json"
    )

    assert response.status_code == expected, (persona, endpoint.id, response.content[:300])
    if response.status_code >= 400:
        body = response.json()
        assert isinstance(body["detail"], str)
        assert body["detail"]
        assert isinstance(body["errors"], dict)
    if endpoint.action == "list" and case.listed is not None:
        visible = persona != "outsider" or endpoint.basename in ("pools", "workspace-kinds")
        assert case.listed(personas, response.json()["results"]) is visible
    if response.status_code < 300 and endpoint.action in case.after:
        case.after[endpoint.action](personas, persona)


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e.id)
def test_anonymous_requests_are_refused_with_401(endpoint, personas, api_client):
    response = getattr(api_client, endpoint.method)(
        _url(endpoint, personas), {}, format="json", HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 401
    assert response.json()["errors"] == {}
    assert response["WWW-Authenticate"] == "Token"


def test_api_root_lists_the_registered_endpoints(personas, api_client_for):
    response = api_client_for(personas.viewer).get("/api/v1/")
    assert response.status_code == 200
    assert set(response.json()) >= {"projects", "memberships", "pools"}
