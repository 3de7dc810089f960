"""The quota sync against a real kubesim (HTTPS Kubernetes API with the Kueue/Volcano CRDs).

What must never happen: a sync deleting a tenant's namespace, a sync that read the database
before a project existed deleting that project's objects, or one sync deleting most of what the
portal owns at once.
"""

from __future__ import annotations

import threading
import time

import pytest

pytestmark = [pytest.mark.kubesim]

H100 = "NVIDIA-H100-80GB-HBM3"
KUEUE = "kueue.x-k8s.io/v1beta2"
VOLCANO = "scheduling.volcano.sh/v1beta1"


@pytest.fixture
def cluster(kubesim_fresh, settings):
    """A kubesim of this test's own (API machinery and CRDs), the portal's client pointed at it."""
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(kubesim_fresh.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    yield kubesim_fresh
    reset_api_client()


def _org(project_slugs: tuple[str, ...] = ("vision",)):
    """A department, an H100 pool, the default priority classes and some projects with quota,
    all written through the services."""
    from quotas import services as quota_services
    from tenants import services
    from tests.factories import ensure_priority_classes

    ensure_priority_classes()
    research = services.department_create(actor=None, slug="research", name="Research")
    pool = quota_services.pool_create(
        actor=None, slug="h100", name="H100", gpu_model=H100, node_count=4
    )
    projects = {}
    for slug in project_slugs:
        projects[slug] = _project(slug, research, pool)
    return research, pool, projects


def _project(slug, department, pool):
    from quotas import services as quota_services
    from tenants import services

    project = services.project_create(actor=None, slug=slug, name=slug, department=department)
    quota_services.quota_set(actor=None, project=project, pool=pool, nominal=2)
    return project


def _project_objects(slug: str) -> dict[str, dict | None]:
    from portal.kube import apply as kube
    from quotas import manifests as qm

    namespace = f"gp-{slug}"
    return {
        "Namespace": kube.get("v1", "Namespace", namespace),
        "ClusterQueue": kube.get(KUEUE, "ClusterQueue", qm.cluster_queue_name(slug)),
        "LocalQueue": kube.get(KUEUE, "LocalQueue", qm.local_queue_name(slug), namespace),
        "Queue": kube.get(VOLCANO, "Queue", qm.volcano_project_queue_name(slug, "h100")),
        "ResourceQuota": kube.get("v1", "ResourceQuota", qm.RESOURCE_QUOTA_NAME, namespace),
    }


def _wait_until(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _sync_waiting_for_the_lock() -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_read_the_database_before_a_project_existed_keeps_its_objects(
    cluster, monkeypatch
):
    """Beat's sync reads the database; an admin saves a new project and its own sync runs; then
    beat's sync goes on. Without one-at-a-time, beat's sync deletes what the admin's created."""
    from django.db import connection

    from quotas import sync

    research, pool, _ = _org()
    sync.sync_quota_objects()

    read_the_database = threading.Event()
    carry_on = threading.Event()
    real_quota_model = sync.quota_model

    def quota_model_then_pause():
        model = real_quota_model()
        if threading.current_thread().name == "beat-sync":
            read_the_database.set()
            assert carry_on.wait(60), "the test never let the first sync go on"
        return model

    monkeypatch.setattr(sync, "quota_model", quota_model_then_pause)
    outcomes: dict[str, object] = {}

    def run(name: str) -> None:
        try:
            outcomes[name] = sync.sync_quota_objects(lock_wait=60)
        except Exception as exc:  # reported by the assertions below
            outcomes[name] = exc
        finally:
            connection.close()

    beat = threading.Thread(target=run, args=("beat",), name="beat-sync")
    beat.start()
    try:
        _wait_until(
            lambda: read_the_database.is_set() or not beat.is_alive(),
            timeout=60,
            what="the first sync to read the database",
        )
        assert read_the_database.is_set(), outcomes.get("beat")
        _project("robotics", research, pool)  # committed: the admin's save
        admin_sync = threading.Thread(target=run, args=("admin",), name="admin-sync")
        admin_sync.start()
        # Let the admin's sync go as far as it can: to its end, or to waiting for the lock.
        _wait_until(
            lambda: not admin_sync.is_alive() or _sync_waiting_for_the_lock(),
            timeout=60,
            what="the admin's sync to finish or wait for the lock",
        )
    finally:
        carry_on.set()
        beat.join(60)
    admin_sync.join(60)
    assert not beat.is_alive()
    assert not admin_sync.is_alive()
    for name in ("beat", "admin"):
        assert isinstance(outcomes[name], sync.SyncReport), outcomes[name]
        assert outcomes[name].errors == [], outcomes[name]
    assert outcomes["beat"].deleted == 0
    assert outcomes["beat"].orphaned == []
    objects = _project_objects("robotics")
    assert all(obj is not None for obj in objects.values()), objects
    assert sync.ORPHAN_LABEL not in objects["Namespace"]["metadata"].get("labels", {})


@pytest.mark.django_db
def test_a_deleted_projects_namespace_is_marked_and_kept_never_deleted(cluster, admin_client):
    from quotas import sync
    from quotas.models import OrphanedNamespace, QuotaSyncStatus
    from tenants import services

    research, pool, projects = _org(("vision", "speech"))
    sync.sync_quota_objects()
    services.project_delete(actor=None, project=projects["vision"])

    report = sync.sync_quota_objects()

    assert report.orphaned == ["gp-vision"]
    assert report.refused == ""
    objects = _project_objects("vision")
    namespace = objects["Namespace"]
    assert namespace is not None, "the sync deleted a namespace"
    assert namespace["metadata"]["labels"][sync.ORPHAN_LABEL] == "true"
    assert (
        "never deletes namespaces"
        in namespace["metadata"]["annotations"][sync.ORPHAN_NOTE_ANNOTATION]
    )
    # What lives in the namespace stays with it; the cluster-wide queues of the project go.
    assert objects["LocalQueue"] is not None
    assert objects["ResourceQuota"] is not None
    assert objects["ClusterQueue"] is None
    assert objects["Queue"] is None
    assert report.deleted == 2
    assert list(OrphanedNamespace.objects.values_list("namespace", "project_slug")) == [
        ("gp-vision", "vision")
    ]
    assert QuotaSyncStatus.objects.get().outcome == "ok"
    # Staff are told, on the project list and on the orphan list.
    page = admin_client.get("/admin/tenants/project/").content.decode()
    assert "Namespaces of deleted projects are kept in the cluster" in page
    assert "gp-vision" in page
    assert "gp-vision" in admin_client.get("/admin/quotas/orphanednamespace/").content.decode()

    # Syncing again changes nothing and still deletes no namespace.
    again = sync.sync_quota_objects()
    assert (again.deleted, again.applied, again.orphaned) == (0, 0, ["gp-vision"])
    assert _project_objects("vision")["Namespace"] is not None

    # The project comes back: the namespace is its own again, unmarked, off the list.
    _project("vision", research, pool)
    sync.sync_quota_objects()
    objects = _project_objects("vision")
    assert all(obj is not None for obj in objects.values()), objects
    labels = objects["Namespace"]["metadata"].get("labels", {})
    annotations = objects["Namespace"]["metadata"].get("annotations") or {}
    assert sync.ORPHAN_LABEL not in labels
    assert sync.ORPHAN_NOTE_ANNOTATION not in annotations
    assert labels["app.kubernetes.io/managed-by"] == "gpu-portal"  # the portal's labels stay
    assert not OrphanedNamespace.objects.exists()


@pytest.mark.django_db
def test_staff_delete_an_orphaned_namespace_explicitly(cluster, admin_client):
    from quotas import sync
    from quotas.models import OrphanedNamespace
    from tenants import services

    _, _, projects = _org(("vision", "speech"))
    sync.sync_quota_objects()
    services.project_delete(actor=None, project=projects["vision"])
    sync.sync_quota_objects()
    orphan = OrphanedNamespace.objects.get()

    response = admin_client.post(
        "/admin/quotas/orphanednamespace/",
        {"action": "delete_in_cluster", "_selected_action": [orphan.pk]},
        follow=True,
    )

    assert response.status_code == 200
    assert "Namespace gp-vision is being deleted." in response.content.decode()
    assert not OrphanedNamespace.objects.exists()
    namespace = _project_objects("vision")["Namespace"]
    assert namespace is None or namespace["metadata"].get("deletionTimestamp")
    assert _project_objects("speech")["Namespace"] is not None


@pytest.mark.django_db
def test_a_sync_that_would_delete_a_large_share_of_the_owned_objects_deletes_nothing(
    cluster, admin_client
):
    """An emptied or wrong database looks like 'nothing is desired': refuse, say so, and let
    staff confirm exactly the refused deletions."""
    from quotas import sync
    from quotas.models import QuotaSyncStatus
    from tenants import services
    from tenants.models import Project

    slugs = ("vision", "speech", "nlp", "robotics")
    _org(slugs)
    first = sync.sync_quota_objects()
    owned = first.applied
    for project in Project.objects.all():
        services.project_delete(actor=None, project=project)

    report = sync.sync_quota_objects()

    assert report.deleted == 0
    # 4 × (ClusterQueue + the project's Volcano queue for h100) + the department's h100 queue.
    assert "Refused to delete 9 of the" in report.refused
    assert sorted(report.refused_deletions) == sorted(
        [f"ClusterQueue gp-{s}" for s in slugs]
        + [f"Queue gp-{s}.h100" for s in slugs]
        + ["Queue gp-dept-research.h100"]
    )
    for slug in slugs:
        objects = _project_objects(slug)
        assert all(obj is not None for obj in objects.values()), (slug, objects)
    status = QuotaSyncStatus.objects.get()
    assert status.outcome == "refused"
    assert f"Refused to delete 9 of the {owned} quota objects" in status.message
    # Visible to staff: on the status page and as a warning on the quota pages.
    page = admin_client.get("/admin/quotas/quotasyncstatus/").content.decode()
    assert "Refused to delete 9 of the" in page
    assert "Deletions refused" in admin_client.get("/admin/quotas/gpupool/").content.decode()

    # Staff confirm: exactly the refused objects go; namespaces still stay.
    confirmed = sync.sync_quota_objects(confirmed_deletions=status.refused_deletions)
    assert confirmed.deleted == 9
    assert confirmed.refused == ""
    for slug in slugs:
        objects = _project_objects(slug)
        assert objects["ClusterQueue"] is None
        assert objects["Queue"] is None
        assert objects["Namespace"] is not None
    assert QuotaSyncStatus.objects.get().outcome == "ok"


@pytest.mark.django_db
def test_removing_one_project_of_a_few_is_not_a_mass_deletion(cluster):
    from quotas import sync
    from tenants import services

    _, _, projects = _org(("vision", "speech"))
    sync.sync_quota_objects()
    services.project_delete(actor=None, project=projects["speech"])
    report = sync.sync_quota_objects()
    assert report.refused == ""
    assert report.deleted == 2


@pytest.mark.django_db
def test_quota_edit_and_delete_touch_only_owned_objects(cluster):
    from jobs.models import Job
    from portal.kube import apply as kube
    from quotas import sync
    from quotas.models import ProjectQuota
    from tenants import services

    _, _, projects = _org()
    sync.sync_quota_objects()
    project = projects["vision"]
    name = f"gp-{project.slug}"
    # An object the portal does not own, in the way of nothing.
    kube.apply(
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": "someone-elses"},
            "spec": {"namespaceSelector": {}},
        }
    )
    # Nothing changed: the resync only lists, it applies nothing.
    again = sync.sync_quota_objects()
    assert (again.applied, again.deleted, again.errors) == (0, 0, [])
    assert again.unchanged > 0
    ProjectQuota.objects.filter(project=project, resource="gpu").update(nominal=12)
    changed = sync.sync_quota_objects()
    # The ClusterQueue, the project's and department's Volcano queues, the ResourceQuota.
    assert changed.applied == 4, changed
    cq = kube.get(KUEUE, "ClusterQueue", name)
    gpu = next(
        r
        for r in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        if r["name"] == "nvidia.com/gpu"
    )
    assert gpu["nominalQuota"] == 12
    # Volcano: one leaf queue per pool (gp-<project>.<pool>).
    queue = kube.get(VOLCANO, "Queue", f"{name}.h100")
    assert queue["spec"]["deserved"]["nvidia.com/gpu"] == "12"
    Job.objects.filter(project=project).delete()
    services.project_delete(actor=None, project=project)
    report = sync.sync_quota_objects()
    # Its ClusterQueue, its Volcano queue for h100 and (its department now has no project) the
    # department's h100 queue; the namespace is kept.
    assert report.deleted == 3
    assert kube.get(KUEUE, "ClusterQueue", name) is None
    assert kube.get(VOLCANO, "Queue", f"{name}.h100") is None
    assert kube.get("v1", "Namespace", name) is not None
    assert kube.get(KUEUE, "ClusterQueue", "someone-elses") is not None


@pytest.mark.django_db
def test_a_namespace_being_deleted_delays_jobs_and_the_sync_instead_of_failing_them(cluster):
    """Staff deleted an orphaned namespace and the project came back before it was gone: the
    API server answers 403 "being terminated". That is a wait (retried), not a rejection."""
    from kubernetes import client as k8s

    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_submit
    from portal.kube import apply as kube
    from portal.kube.apply import RetryableKubeError
    from quotas import sync
    from tests.factories import MembershipFactory, UserFactory

    _, _, projects = _org()
    sync.sync_quota_objects()
    project = projects["vision"]
    user = UserFactory(username="vision-member")
    MembershipFactory(user=user, project=project, role="member")
    api_client = cluster.api_client()
    core = k8s.CoreV1Api(api_client)
    # Something in the namespace with a finalizer keeps it Terminating until released.
    core.create_namespaced_config_map(
        "gp-vision", {"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}
    )
    core.delete_namespace("gp-vision")
    assert kube.get("v1", "Namespace", "gp-vision")["status"]["phase"] == "Terminating"

    job = job_submit(
        actor=user,
        project=project,
        data={"image": "busybox:1.36", "command": ["true"], "kind": "single", "gpus": 1},
    ).job
    with pytest.raises(RetryableKubeError, match="being terminated"):
        job_reconcile(job_id=job.pk)
    job.refresh_from_db()
    assert job.state != "failed"
    with pytest.raises(RetryableKubeError, match="being terminated"):
        sync.sync_quota_objects()

    # The namespace finishes terminating; the next sync re-creates it and the job goes in.
    core.patch_namespaced_config_map("held", "gp-vision", {"metadata": {"finalizers": None}})
    _wait_until(
        lambda: kube.get("v1", "Namespace", "gp-vision") is None,
        timeout=30,
        what="the namespace to be gone",
    )
    api_client.close()
    sync.sync_quota_objects()
    assert job_reconcile(job_id=job.pk) != "rejected"
    job.refresh_from_db()
    assert job.state != "failed"
    assert kube.list_owned("batch/v1", "Job", namespace="gp-vision")
