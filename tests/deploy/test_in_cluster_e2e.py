"""In-cluster mode, end to end, with RBAC enforced: the portal as deploy/'s service account.

kubesim runs its simulated cluster with --rbac; deploy/'s RBAC objects are applied to it, and
every portal process authenticates with a TokenRequest token of the ServiceAccount
gpu-portal/gpu-portal, read from a file with the cluster's CA from another, exactly the code path
of PORTAL_KUBE_IN_CLUSTER in a pod (PORTAL_KUBE_TOKEN_FILE / _CA_FILE / _HOST point it at them).

1. The whole flow passes: a Celery worker and the cluster watcher (subprocesses) and the portal
   itself sync the quota objects (with each project's NetworkPolicy and the RoleBinding of the
   tenant role), run single, MIG and gang jobs (Kueue and Volcano) to success, scrape the
   dcgm-exporters through the pod proxy, serve logs, and write a credential's Secret.
2. Removing any one rule of deploy/'s roles makes some step fail with a message naming the
   permission, where staff or the user sees it (a job's status, the quota sync status, an API
   answer, the exporter status, the cluster page), and never with an unhandled exception. One
   kubesim for all cases: each re-applies the reduced role and drives the services in-process.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubesim.testing import KubesimProcess

from tests.deploy.conftest import PORTAL_NAMESPACE, kubectl, render, to_yaml
from tests.e2e.conftest import Worker, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.kubesim]

REPO = Path(__file__).resolve().parents[2]
SERVICE_ACCOUNT = "gpu-portal"
USERNAME = f"system:serviceaccount:{PORTAL_NAMESPACE}:{SERVICE_ACCOUNT}"
RBAC_KINDS = ("ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
H100 = "NVIDIA-H100-80GB-HBM3"
# Opaque programs (python train.py) run this many simulated seconds: 6 s at speed 100.
DURATION = 600
# The sim's clock runs 100 times faster than the wall: a month of token is seven hours of test.
TOKEN_SECONDS = 30 * 86400
KUEUE = "kueue.x-k8s.io/v1beta2"


@dataclass
class InCluster:
    server: KubesimProcess
    token_file: Path

    def env(self) -> dict[str, str]:
        """The portal's settings for in-cluster mode as deploy/ sets them, pointed at kubesim."""
        return {
            "PORTAL_KUBE_IN_CLUSTER": "true",
            "PORTAL_KUBE_TOKEN_FILE": str(self.token_file),
            "PORTAL_KUBE_CA_FILE": str(self.server.ca_file),
            "PORTAL_KUBE_HOST": self.server.url,
            "KUBECONFIG": str(self.token_file.parent / "no-kubeconfig"),  # must not be needed
            "PORTAL_TENANT_ROLE": "gpu-portal-tenant",
            "PORTAL_NAMESPACE": PORTAL_NAMESPACE,
            "PORTAL_SERVICE_ACCOUNT": SERVICE_ACCOUNT,
            "PORTAL_WATCHER_LEASE_NAMESPACE": PORTAL_NAMESPACE,
            "PORTAL_METRICS_ACCESS": "proxy",
            "PORTAL_KUBE_QPS": "0",
        }

    def admin_get(self, path: str) -> dict | None:
        """An object read with the admin's token (the test's view, not the portal's)."""
        status, data = self.server.request("GET", path)
        return data if status == 200 and isinstance(data, dict) else None

    def apply(self, objects: list[dict]) -> None:
        kubectl("apply", "-f", "-", stdin=to_yaml(objects), kubeconfig=self.server.kubeconfig)


def deploy_rbac() -> list[dict]:
    return [o for o in render("external") if o["kind"] in RBAC_KINDS]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ks-in-cluster")
    with KubesimProcess(
        rbac=True,
        speed=100,
        workdir=workdir,
        extra_args=["--default-duration", str(DURATION)],
    ) as server:
        found = {(o["kind"], o["metadata"]["name"]): o for o in render("external")}
        portal = InCluster(server, workdir / "token")
        portal.apply(
            [
                found[("Namespace", PORTAL_NAMESPACE)],
                found[("ServiceAccount", SERVICE_ACCOUNT)],
                *deploy_rbac(),
            ]
        )
        portal.token_file.write_text(
            server.service_account_token(
                PORTAL_NAMESPACE, SERVICE_ACCOUNT, expiration_seconds=TOKEN_SECONDS, create=False
            )
        )
        yield portal


def _reset_clients() -> None:
    from portal.kube import discovery, nodes
    from portal.kube.client import reset_api_client
    from portal.kube.metrics import reset_scrape_clients

    reset_api_client()
    reset_scrape_clients()
    discovery.forget()
    nodes.forget()


@pytest.fixture
def as_portal(cluster, settings):
    """This process (the API views and services the test calls) configured as the pods are."""
    for name, value in cluster.env().items():
        current = getattr(settings, name, None)
        if isinstance(current, bool):
            value = value == "true"
        elif isinstance(current, float):
            value = float(value)
        elif isinstance(current, int):
            value = int(value)
        setattr(settings, name, value)
    # The rule-removal cases leave earlier cases' objects behind: deleting them is routine here.
    settings.PORTAL_QUOTA_SYNC_MAX_DELETE_COUNT = 1000
    _reset_clients()
    yield cluster
    _reset_clients()


def _org(tag: str) -> dict:
    """A department, an H100 pool with MIG, a project with quota, an admin and a member, and a
    staff user; `tag` makes every name new, so the quota sync creates each kind of object."""
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        MembershipFactory,
        ProjectFactory,
        ProjectQuotaFactory,
        UserFactory,
        ensure_priority_classes,
    )

    ensure_priority_classes()
    department = DepartmentFactory(slug=f"dept-{tag}", name=f"Dept {tag}")
    project = ProjectFactory(slug=tag, name=tag, department=department)
    pool = GpuPoolFactory(
        slug=f"h100-{tag}",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=3,
        mig_profiles=["1g.10gb"],
    )
    ProjectQuotaFactory(project=project, pool=pool, resource="gpu", nominal=16)
    ProjectQuotaFactory(project=project, pool=pool, resource="1g.10gb", nominal=4)
    # A DRA-managed pool: its jobs bring a ResourceClaimTemplate each.
    dra_pool = GpuPoolFactory(
        slug=f"dra-{tag}",
        gpu_model=H100,
        node_labels={"nvidia.com/dra-driver-gpu.enabled": "true"},
        node_count=1,
        gpus_per_node=2,
        dra_managed=True,
    )
    ProjectQuotaFactory(project=project, pool=dra_pool, resource="gpu", nominal=2)
    admin = UserFactory(username=f"admin-{tag}")
    member = UserFactory(username=f"member-{tag}")
    staff = UserFactory(username=f"staff-{tag}", is_staff=True, is_superuser=True)
    MembershipFactory(user=admin, project=project, role="admin")
    MembershipFactory(user=member, project=project, role="member")
    return {
        "project": project,
        "pool": pool,
        "dra_pool": dra_pool,
        "admin": admin,
        "member": member,
        "staff": staff,
    }


def _api_as(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    return client


JOB_KINDS = {
    "single": {"kind": "single", "gpus": 1},
    "mig": {"kind": "mig", "mig_profile": "1g.10gb"},
    "gang": {"kind": "gang", "gpus": 8, "replicas": 2, "backend": "kueue"},
    "volcano": {"kind": "gang", "gpus": 8, "replicas": 2, "backend": "volcano"},
}


def _submit(client, project: str, spec: dict) -> dict:
    body = {
        "project": project,
        "image": "nvcr.io/nvidia/pytorch:24.08-py3",
        "command": ["python", "train.py"],
        **spec,
    }
    response = client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


# ----------------------------------------------------------------------------- 1. the flow
@pytest.fixture
def broker(redis_server):
    """This process's Celery producer and the subprocesses on the tests' own Redis database
    (this worker's server: a FLUSHDB here must not reach another worker's queue)."""
    import redis

    from portal.celery import app

    url = redis_server.url(1)
    redis.Redis.from_url(url).flushdb()
    saved = (app.conf.broker_url, app.conf.broker_transport_options)
    app.conf.broker_url = url
    app.conf.broker_transport_options = {"visibility_timeout": 3600}
    app._pool = None
    app.amqp._producer_pool = None
    yield url
    app.conf.broker_url, app.conf.broker_transport_options = saved
    app._pool = None
    app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)
def test_the_whole_flow_runs_as_the_service_account(as_portal, broker, tmp_path):
    from django.db import connection

    from credentials.services import credential_create
    from gpumetrics.services import collect
    from jobs.models import Job, JobPod
    from jobs.tasks import resync_jobs
    from quotas.models import QuotaSyncStatus
    from quotas.tasks import sync_quotas
    from tests.e2e.test_watcher_e2e import WatcherProcess

    cluster = as_portal
    db = connection.settings_dict
    user, host, port = db["USER"] or "postgres", db["HOST"] or "127.0.0.1", db["PORT"] or 5432
    env = {
        **os.environ,
        **cluster.env(),
        "DATABASE_URL": f"postgres://{user}@{host}:{port}/{db['NAME']}",
        "CELERY_BROKER_URL": broker,
        "PORTAL_PUBSUB_URL": broker,
        "PYTHONPATH": str(REPO),
        "PORTAL_WORKER_HEARTBEAT_FILE": str(tmp_path / "worker-heartbeat"),
        # pytest-django runs this transactional test after the rule cases, whose objects the
        # sync then deletes: routine here, not the mass deletion the guard is for.
        "PORTAL_QUOTA_SYNC_MAX_DELETE_COUNT": "1000",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    worker = Worker(env, tmp_path / "worker.log").start()
    watcher = WatcherProcess(env, tmp_path, "w1").start()
    try:
        org = _org("alpha")
        namespace = org["project"].namespace

        # this process is the service account: nothing beyond its roles
        from portal.kube import apply as kube
        from portal.kube.apply import PermanentKubeError

        with pytest.raises(PermanentKubeError, match=f'User "{USERNAME}" cannot get'):
            kube.get("v1", "Secret", "anything", "kube-system")

        # quota sync, with the tenant's NetworkPolicy and the portal's RoleBinding
        sync_quotas.delay()
        wait_for(
            lambda: cluster.admin_get(f"/apis/{KUEUE}/namespaces/{namespace}/localqueues/gp-alpha"),
            what="the quota objects",
        )
        status = wait_for(lambda: QuotaSyncStatus.objects.order_by("-pk").first(), what="status")
        assert status.outcome == "ok", status.message
        binding = cluster.admin_get(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/gpu-portal"
        )
        assert binding["subjects"][0]["name"] == SERVICE_ACCOUNT
        assert cluster.admin_get(
            f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/gp-tenant-isolation"
        )

        # GPU metrics: every dcgm-exporter answers through the pod proxy
        report = collect()
        assert report.targets > 0
        assert report.failures == 0

        # single, MIG and gang jobs (Kueue and Volcano) run to success
        client = _api_as(org["member"])
        jobs = {name: _submit(client, "alpha", spec) for name, spec in JOB_KINDS.items()}
        ids = [j["id"] for j in jobs.values()]

        def finished():
            resync_jobs.delay()
            current = dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))
            return all(s in ("succeeded", "failed") for s in current.values()) and current

        final = wait_for(finished, timeout=180, interval=1.0, what="every job to finish")
        assert set(final.values()) == {"succeeded"}, {
            j.pk: (j.state, j.state_message) for j in Job.objects.filter(pk__in=ids)
        }

        # the watcher followed them (only it records pods) and holds its Lease here
        gang = jobs["gang"]["id"]
        wait_for(lambda: JobPod.objects.filter(job_id=gang).count() == 2, what="gang pods")
        lease = cluster.admin_get(
            f"/apis/coordination.k8s.io/v1/namespaces/{PORTAL_NAMESPACE}/leases/gpu-portal-watcher"
        )
        assert lease["spec"]["holderIdentity"] == "w1"
        assert watcher.leader()

        # logs, read through pods/log in the project's namespace
        response = client.get(f"/api/v1/jobs/{jobs['single']['id']}/logs/")
        assert response.status_code == 200, response.content[:500]

        # a credential's Secret, in the project's namespace only
        credential_create(
            actor=org["admin"],
            project="alpha",
            name="wandb",
            kind="secret",
            values={"WANDB_API_KEY": "not-a-real-key"},
        )
        secret = cluster.admin_get(f"/api/v1/namespaces/{namespace}/secrets/gp-cred-wandb")
        assert secret is not None
    finally:
        worker.stop()
        watcher.stop()
        for log in (tmp_path / "worker.log", watcher.log):
            print(f"--- {log.name} ---\n{log.read_text()[-4000:]}")


# ------------------------------------------------------------------- 2. one rule removed
@dataclass(frozen=True)
class RuleCase:
    kind: str
    role: str
    index: int
    rule: dict

    @property
    def id(self) -> str:
        resources = "+".join(self.rule["resources"])
        names = f"[{','.join(self.rule['resourceNames'])}]" if "resourceNames" in self.rule else ""
        return f"{self.role}:{resources}{names}:{'+'.join(self.rule['verbs'])}"

    def denial_phrases(self) -> list[str]:
        """How the API server words a refusal of this rule's permissions. Without `bind`, the
        RBAC registry's escalation check refuses a binding to a role one does not hold."""
        if self.rule["verbs"] == ["bind"]:
            return ["is attempting to grant RBAC permissions not currently held"]
        return [
            f'{USERNAME}" cannot {verb} resource "{resource}"'
            for verb in self.rule["verbs"]
            for resource in self.rule["resources"]
        ]


def _cases() -> list[RuleCase]:
    cases = []
    for obj in deploy_rbac():
        if obj["kind"] not in ("ClusterRole", "Role"):
            continue
        for index, rule in enumerate(obj["rules"]):
            cases.append(RuleCase(obj["kind"], obj["metadata"]["name"], index, rule))
    return cases


CASES = _cases()


@dataclass
class Seen:
    """What one step left where a person sees it, and where that is."""

    step: str
    where: str
    message: str


class Probe:
    """Runs the portal's steps in-process and gathers every message they leave."""

    def __init__(self, cluster: InCluster, tag: str):
        self.cluster = cluster
        self.tag = tag
        self.seen: list[Seen] = []

    def note(self, step: str, where: str, message: str) -> None:
        if message:
            self.seen.append(Seen(step, where, message))

    def run(self, step, **kwargs) -> None:
        from django.core.exceptions import ValidationError
        from rest_framework.exceptions import ValidationError as ApiValidationError

        from credentials.services import ClusterUnavailable
        from portal.kube.apply import KubeError

        try:
            step(**kwargs)
        except (KubeError, ClusterUnavailable, ValidationError, ApiValidationError) as exc:
            # What the caller shows: the task's retry log, the API's 4xx/503 body, the admin's
            # message; a crash would be any other exception, and fails the test.
            self.note(step.__name__, "raised to its caller", str(exc))


def _step_quota_sync(probe: Probe) -> None:
    from portal.kube.apply import KubeError
    from quotas import sync
    from quotas.models import PriorityClass, QuotaSyncStatus

    # A changed description makes the sync write the priority objects too.
    PriorityClass.objects.filter(name="normal").update(description=f"case {probe.tag}")
    with contextlib.suppress(KubeError):  # recorded in the status below, as the task leaves it
        sync.sync_quota_objects(lock_wait=30)
    status = QuotaSyncStatus.objects.order_by("-pk").first()
    if status is not None and status.outcome != "ok":
        probe.note("quota sync", "admin: quota sync status", status.message)


def _step_delete_an_orphaned_namespace(probe: Probe, staff) -> None:
    from quotas.sync import delete_orphaned_namespace

    found = probe.cluster.admin_get("/api/v1/namespaces?labelSelector=gpu-portal.io/orphaned")
    names = [n["metadata"]["name"] for n in (found or {}).get("items", [])]
    if not names:
        return
    try:
        delete_orphaned_namespace(actor=staff, namespace=names[0])
    except Exception as exc:  # the admin action shows each failure as its message
        probe.note("delete orphaned namespace", "admin: action message", str(exc))


def _job_message(job_id: int) -> str:
    from jobs.models import Job, JobEvent

    job = Job.objects.get(pk=job_id)
    events = " | ".join(JobEvent.objects.filter(job=job).values_list("message", flat=True))
    return f"{job.state}: {job.state_reason}: {job.state_message} [{events}]"


def _step_jobs(probe: Probe, org: dict) -> None:
    from jobs.models import Job
    from jobs.services import job_cancel

    client = _api_as(org["member"])
    for name, spec in JOB_KINDS.items():
        job_id = _submit(client, org["project"].slug, spec)["id"]
        for _ in range(2):  # the first applies, the second reads the status back
            _reconcile(probe, job_id)
        job = Job.objects.get(pk=job_id)
        if job.state_reason in ("NotPermitted", "StatusUnreadable", "Rejected"):
            probe.note(f"{name} job", "the job's status", _job_message(job_id))
    # a DRA job: a device asked by attribute, through the job's own ResourceClaimTemplate
    dra = {"kind": "single", "gpus": 1, "pool": org["dra_pool"].slug}
    job_id = _submit(client, org["project"].slug, {**dra, "device": {"min_memory": "40Gi"}})["id"]
    for _ in range(2):
        _reconcile(probe, job_id)
    if Job.objects.get(pk=job_id).state_reason in ("NotPermitted", "StatusUnreadable", "Rejected"):
        probe.note("dra job", "the job's status", _job_message(job_id))
    # cancel one: its objects are deleted (after keeping its last log lines)
    job = Job.objects.filter(project=org["project"], kind="gang", backend="kueue").first()
    job_cancel(actor=org["member"], job=job)
    _reconcile(probe, job.pk)
    job.refresh_from_db()
    if job.cleanup_pending:
        probe.note("cancel", "the job's status", _job_message(job.pk))


def _reconcile(probe: Probe, job_id: int) -> None:
    from jobs.reconcile.services import job_reconcile
    from portal.kube.apply import KubeError

    try:
        job_reconcile(job_id=job_id)
    except KubeError as exc:
        probe.note(f"reconcile {job_id}", "the task's retry", exc.message)


def _step_workspace_proxy(probe: Probe, org: dict) -> None:
    """What the /ws/<id>/ proxy sends through the API server's service proxy (a workspace's
    Service need not exist: a refusal comes before the API server looks for it)."""
    import httpx
    from django.test import override_settings

    from portal.kube.service_proxy import API_SERVER, service_target
    from tenants.models import namespace_for_slug

    with override_settings(PORTAL_WORKSPACE_ROUTE=API_SERVER):
        target = service_target(namespace_for_slug(org["project"].slug), "gp-ws-0", 8888)
    response = httpx.get(
        target.base_url + "/api/status",
        headers=target.headers,
        verify=target.ssl_context or True,
        timeout=30,
    )
    if response.status_code == 403:
        message = response.json().get("message", response.text)
        probe.note("workspace proxy", "the browser (the API server's Status)", message)


def _step_resync(probe: Probe) -> None:
    from jobs.reconcile.services import resync_jobs

    resync_jobs(enqueue=lambda job_id: None)


def _step_watcher(probe: Probe) -> None:
    from jobs.watcher.informer import Informer
    from jobs.watcher.leader import LeaderElector
    from jobs.watcher.runner import COLLECTIONS
    from portal.kube import watch as kube_watch
    from portal.kube.apply import KubeError

    def read(collection) -> str:
        informer = Informer(collection, lambda change: None, stop=None)  # type: ignore[arg-type]
        try:
            informer.relist()
            events = kube_watch.watch(
                collection.api_version,
                collection.kind,
                resource_version=informer.resource_version,
                label_selector=collection.label_selector,
                timeout_seconds=1,
            )
            next(events, None)
            events.close()
        except KubeError as exc:
            return exc.message
        return ""

    with ThreadPoolExecutor(len(COLLECTIONS)) as pool:
        for collection, message in zip(COLLECTIONS, pool.map(read, COLLECTIONS), strict=True):
            probe.note(f"watch {collection.key}", "the watcher's log and heartbeat", message)
    # leader election: create the Lease, then renew it
    probe.cluster.server.request(
        "DELETE",
        f"/apis/coordination.k8s.io/v1/namespaces/{PORTAL_NAMESPACE}/leases/gpu-portal-watcher",
    )
    elector = LeaderElector(namespace=PORTAL_NAMESPACE, name="gpu-portal-watcher", identity="probe")
    for _ in range(2):
        elector.try_acquire_or_renew()
        probe.note("leader election", "the watcher's log and heartbeat", elector.last_error)
    # queue positions (Kueue's visibility API)
    try:
        kube_watch.pending_workloads(f"gp-{probe.tag}")
    except KubeError as exc:
        probe.note("queue positions", "the watcher's log", exc.message)


def _step_metrics(probe: Probe) -> None:
    from gpumetrics.models import ExporterStatus
    from gpumetrics.tasks import collect

    ExporterStatus.objects.all().delete()  # every exporter scraped, none backing off
    result = collect()
    probe.note("GPU metrics sweep", "the worker's log", result.get("error", ""))
    for error in ExporterStatus.objects.exclude(last_error="").values_list("last_error", flat=True):
        probe.note("GPU metrics scrape", "admin: exporter status", error)


def _step_logs(probe: Probe, org: dict) -> None:
    from jobs.logs import selectors as job_logs
    from jobs.models import Job, JobPod

    job = Job.objects.filter(project=org["project"]).first()
    record = JobPod(job=job, uid="probe", name="gp-no-such-pod", rank=0)
    try:
        job_logs.stream(job, record, tail=10)
    except job_logs.LogsUnavailable as exc:
        if exc.status != 410:  # 410: the pod is gone, so the read itself was allowed
            probe.note("logs", f"the logs API ({exc.status})", str(exc))


def _step_cluster_page(probe: Probe, staff) -> None:
    from jobs.console.cluster_map import cluster_map_for

    probe.note("cluster page", "the cluster page", cluster_map_for(user=staff, max_age=0).error)


def _step_credentials(probe: Probe, org: dict) -> None:
    from credentials.models import Credential
    from credentials.services import credential_create, credential_delete

    probe.run(
        credential_create,
        actor=org["admin"],
        project=org["project"].slug,
        name="token",
        kind="secret",
        values={"TOKEN": "x"},
    )
    credential = Credential.objects.filter(project=org["project"], name="token").first()
    if credential is not None:
        probe.run(credential_delete, actor=org["admin"], credential=credential)


def _step_volumes(probe: Probe, org: dict) -> None:
    from volumes.models import DataVolume
    from volumes.services import volume_create, volume_delete

    probe.run(
        volume_create,
        actor=org["staff"],
        project=org["project"].slug,
        name="shared",
        kind="nfs",
        nfs_server="10.0.0.5",
        nfs_path=f"/exports/{probe.tag}",
        size="10Gi",
        mount_path="/data",
    )
    volume = DataVolume.objects.filter(project=org["project"], name="shared").first()
    if volume is None:
        return
    probe.note(
        "data volume",
        "the volume's sync status",
        volume.sync_message * (volume.sync_state == "error"),
    )
    probe.run(volume_delete, actor=org["staff"], volume=volume, delete_data=True, confirm="shared")


def _run_steps(probe: Probe, org: dict, *, until=None) -> None:
    """Everything the portal does in the cluster, one step per feature, in the order a new
    install meets them; with `until`, no further step once it says the probe has what it
    looks for."""
    steps = [
        lambda: _step_quota_sync(probe),
        lambda: _step_delete_an_orphaned_namespace(probe, org["staff"]),
        lambda: _step_jobs(probe, org),
        lambda: _step_resync(probe),
        lambda: _step_watcher(probe),
        lambda: _step_metrics(probe),
        lambda: _step_logs(probe, org),
        lambda: _step_cluster_page(probe, org["staff"]),
        lambda: _step_credentials(probe, org),
        lambda: _step_volumes(probe, org),
        lambda: _step_workspace_proxy(probe, org),
    ]
    for step in steps:
        step()
        if until is not None and until():
            return


def _reduced(case: RuleCase) -> dict:
    role = next(
        o for o in deploy_rbac() if o["kind"] == case.kind and o["metadata"]["name"] == case.role
    )
    reduced = copy.deepcopy(role)
    del reduced["rules"][case.index]
    return reduced


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES, ids=[f"{c.kind}/{c.id}" for c in CASES])
def test_removing_any_one_rule_fails_a_step_with_a_message_naming_it(as_portal, case, caplog):
    cluster = as_portal
    case_id = f"{case.kind}/{case.id}"
    tag = f"c{CASES.index(case)}"
    org = _org(tag)
    cluster.apply([_reduced(case)])
    probe = Probe(cluster, tag)
    caplog.set_level(logging.WARNING)

    def naming() -> list[Seen]:
        logged = [
            Seen(r.name, "the process log", r.getMessage())
            for r in caplog.records
            if "forbidden" in r.getMessage()
        ]
        return [
            s for s in probe.seen + logged if any(p in s.message for p in case.denial_phrases())
        ]

    try:
        # The first step that names the missing permission is the proof; the steps after it
        # would only add more (the control test below runs them all).
        _run_steps(probe, org, until=naming)
    finally:
        cluster.apply([_role_object(case)])
        _reset_clients()
    found = naming()
    assert found, f"no step named the missing permission; messages: {probe.seen}"
    print(f"\nCASE {case_id}: " + "; ".join(sorted({f"{s.step} → {s.where}" for s in found})))


@pytest.mark.django_db
def test_with_every_rule_no_step_is_refused(as_portal, caplog):
    """The control for the cases above: the same steps with deploy/'s roles whole."""
    probe = Probe(as_portal, "all")
    org = _org("all")
    caplog.set_level(logging.WARNING)
    _run_steps(probe, org)
    logged = [r.getMessage() for r in caplog.records if "forbidden" in r.getMessage()]
    refused = [s for s in probe.seen if "forbidden" in s.message]
    assert (refused, logged) == ([], [])


def _role_object(case: RuleCase) -> dict:
    return next(
        o for o in deploy_rbac() if o["kind"] == case.kind and o["metadata"]["name"] == case.role
    )
