"""Every manifest the portal builds is accepted by the real CRD schemas (kubesim with its vendored
CRDs, API machinery only), and the schemas are really enforced (a broken object is refused)."""

import pytest

from kubesim.testing import KubesimProcess
from tests.jobs.test_manifests import spec
from tests.quotas.test_quota_manifests import MODEL

pytestmark = pytest.mark.kubesim


@pytest.fixture(scope="module")
def api_only(tmp_path_factory):
    with KubesimProcess(no_cluster=True, workdir=tmp_path_factory.mktemp("ks-crds")) as server:
        yield server


@pytest.fixture
def kube(api_only, settings):
    from portal.kube import apply
    from portal.kube.client import reset_api_client

    settings.KUBECONFIG = str(api_only.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    return apply


def test_quota_and_job_manifests_pass_the_crd_schemas(kube):
    from jobs.manifests import build_job_manifests
    from quotas.manifests import desired_quota_objects

    for obj in desired_quota_objects(MODEL):
        stored = kube.apply(obj)
        assert stored["metadata"]["name"] == obj["metadata"]["name"]
    variants = [
        {},
        {"job_id": 2, "kind": "mig", "gpus": 0, "mig_resource": "nvidia.com/mig-1g.10gb"},
        {"job_id": 3, "kind": "gang", "replicas": 4, "gpus": 8},
        {"job_id": 4, "kind": "gang", "replicas": 64, "gpus": 8, "backend": "volcano"},
        {"job_id": 5, "node_selector": {"pool": "h100"}, "runtime_class": "nvidia"},
    ]
    for overrides in variants:
        for obj in build_job_manifests(spec(**overrides)):
            stored = kube.apply(obj)
            assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
    # Applying everything again is a no-op that keeps one object each.
    for obj in build_job_manifests(spec(job_id=3, kind="gang", replicas=4, gpus=8)):
        kube.apply(obj)
    assert len(kube.list_owned("batch/v1", "Job", namespace="gp-alpha")) == 4
