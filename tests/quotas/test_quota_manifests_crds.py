"""The real CRD schemas are enforced on quota objects (kubesim --crds, API machinery only): a
broken ClusterQueue is refused with the schema's message. (That every quota manifest passes the
schemas is checked with the job manifests in tests/jobs/test_manifests_crds.py.)"""

import pytest

from tests.quotas.test_quota_manifests import MODEL

pytestmark = pytest.mark.kubesim


@pytest.fixture
def kube(kubesim_api, settings):
    from portal.kube import apply
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(kubesim_api.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    yield apply
    reset_api_client()


def test_the_schemas_are_enforced(kube):
    from portal.kube.apply import PermanentKubeError
    from quotas.manifests import cluster_queue

    cq = cluster_queue(MODEL.projects[0], MODEL.pools, MODEL.priorities)
    cq["metadata"]["name"] = "broken"
    cq["spec"]["preemption"]["withinClusterQueue"] = "Sometimes"
    with pytest.raises(PermanentKubeError) as info:
        kube.apply(cq)
    assert info.value.status == 422
    assert "withinClusterQueue" in info.value.message
