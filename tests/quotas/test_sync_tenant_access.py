"""The quota sync writes each project namespace's NetworkPolicy and (with PORTAL_TENANT_ROLE)
the RoleBinding granting the portal its tenant role there, under the sync's ownership rules:
it changes only what carries its labels, and what it cannot prove it owns is left alone."""

from __future__ import annotations

import pytest

from tests.quotas.test_sync_kubesim import _org

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db]


@pytest.fixture
def cluster(kubesim_fresh, settings):
    """A kubesim of this test's own (API machinery and CRDs), the portal's client pointed at it."""
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(kubesim_fresh.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    yield kubesim_fresh
    reset_api_client()


NETWORKING = "networking.k8s.io/v1"
RBAC = "rbac.authorization.k8s.io/v1"


def _policy(namespace):
    from portal.kube import apply as kube
    from quotas import manifests as qm

    return kube.get(NETWORKING, "NetworkPolicy", qm.NETWORK_POLICY_NAME, namespace)


def _binding(namespace):
    from portal.kube import apply as kube
    from quotas import manifests as qm

    return kube.get(RBAC, "RoleBinding", qm.TENANT_ROLE_BINDING_NAME, namespace)


def test_each_project_namespace_gets_its_policy_and_the_portals_role_binding(cluster, settings):
    from quotas import sync

    settings.PORTAL_TENANT_ROLE = "gpu-portal-tenant"
    settings.PORTAL_NAMESPACE = "gpu-portal"
    _org(("vision", "speech"))
    report = sync.sync_quota_objects()
    assert report.errors == []
    for namespace in ("gp-vision", "gp-speech"):
        policy = _policy(namespace)
        assert policy is not None
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        binding = _binding(namespace)
        assert binding["roleRef"]["name"] == "gpu-portal-tenant"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpu-portal", "namespace": "gpu-portal"}
        ]
    # The server keeps them as written: the next sync finds nothing to apply.
    again = sync.sync_quota_objects()
    assert (again.applied, again.deleted, again.errors) == (0, 0, [])


def test_a_policy_or_binding_the_portal_did_not_make_is_reported_and_left_alone(cluster, settings):
    from portal.kube import apply as kube
    from quotas import manifests as qm
    from quotas import sync

    settings.PORTAL_TENANT_ROLE = "gpu-portal-tenant"
    _org(("vision",))
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gp-vision"}})
    theirs = {
        "apiVersion": NETWORKING,
        "kind": "NetworkPolicy",
        "metadata": {"name": qm.NETWORK_POLICY_NAME, "namespace": "gp-vision"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},  # deny all ingress
    }
    kube.apply(theirs, field_manager="platform-team")
    report = sync.sync_quota_objects()
    assert f"NetworkPolicy gp-vision/{qm.NETWORK_POLICY_NAME}" in report.conflicts
    live = _policy("gp-vision")
    assert "ingress" not in live["spec"]  # theirs, unchanged
    assert "app.kubernetes.io/managed-by" not in (live["metadata"].get("labels") or {})


def test_switching_the_policy_off_deletes_only_the_portals_policies(cluster, settings):
    from portal.kube import apply as kube
    from quotas import sync

    _org(("vision", "speech"))
    sync.sync_quota_objects()
    kube.apply(
        {
            "apiVersion": NETWORKING,
            "kind": "NetworkPolicy",
            "metadata": {"name": "allow-metrics", "namespace": "gp-vision"},
            "spec": {"podSelector": {}, "ingress": [{}]},
        },
        field_manager="platform-team",
    )
    settings.PORTAL_TENANT_NETWORK_POLICY = False
    report = sync.sync_quota_objects()
    assert report.deleted == 2
    assert _policy("gp-vision") is None
    assert _policy("gp-speech") is None
    assert kube.get(NETWORKING, "NetworkPolicy", "allow-metrics", "gp-vision") is not None


def test_switching_the_tenant_role_off_leaves_the_bindings_in_place(cluster, settings):
    from quotas import sync

    settings.PORTAL_TENANT_ROLE = "gpu-portal-tenant"
    _org(("vision",))
    sync.sync_quota_objects()
    settings.PORTAL_TENANT_ROLE = ""
    report = sync.sync_quota_objects()
    assert report.deleted == 0
    assert _binding("gp-vision") is not None


def test_an_orphaned_namespace_keeps_its_policy_and_binding(cluster, settings):
    from jobs.models import Job
    from quotas import sync
    from tenants import services

    settings.PORTAL_TENANT_ROLE = "gpu-portal-tenant"
    _, _, projects = _org(("vision", "speech", "audio", "robotics"))
    sync.sync_quota_objects()
    Job.objects.filter(project=projects["vision"]).delete()
    services.project_delete(actor=None, project=projects["vision"])
    report = sync.sync_quota_objects()
    assert report.orphaned == ["gp-vision"]
    # What lives in the namespace stays with it, the portal's access and isolation included.
    assert _policy("gp-vision") is not None
    assert _binding("gp-vision") is not None
