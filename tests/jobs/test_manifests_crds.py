"""Every manifest the portal builds is accepted by the real CRD schemas (kubesim with its vendored
CRDs, API machinery only), and the schemas are really enforced (a broken object is refused)."""

import pytest
from kubesim.testing import KubesimProcess

from jobs.secret_refs import SecretEnv, SecretFile
from tests.jobs.test_manifests import spec
from tests.quotas.test_quota_manifests import MODEL

pytestmark = pytest.mark.kubesim

_CREDENTIAL_PARTS = {
    "secret_env": (SecretEnv("HF_TOKEN", "gp-cred-hf", "token"),),
    "secret_files": (SecretFile("cred-gcp", "gp-cred-gcp", "/var/run/gcp"),),
    "image_pull_secrets": ("gp-cred-ghcr",),
}


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
        {
            "job_id": 4,
            "kind": "gang",
            "replicas": 64,
            "gpus": 8,
            "backend": "volcano",
            "eligible_pools": ("h100",),
            "eligible_pool_labels": ({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},),
            "other_pool_labels": ({"pool": "a100"},),
        },
        {"job_id": 5, "node_selector": {"pool": "h100"}, "runtime_class": "nvidia"},
        {
            "job_id": 6,
            "eligible_pools": ("a100", "h100"),
            "eligible_pool_labels": ({"pool": "a100"}, {"nvidia.com/gpu.product": "H100"}),
        },
        # Credentials (jobs.secret_refs): secretKeyRef env, a secret volume, a pull secret.
        *(
            {"job_id": 7 + n, **backend, **_CREDENTIAL_PARTS}
            for n, backend in enumerate(
                [
                    {},
                    {"kind": "gang", "replicas": 2, "gpus": 8},
                    {
                        "kind": "gang",
                        "replicas": 2,
                        "gpus": 8,
                        "backend": "volcano",
                        "eligible_pools": ("h100",),
                    },
                ]
            )
        ),
    ]
    for overrides in variants:
        for obj in build_job_manifests(spec(**overrides)):
            stored = kube.apply(obj)
            assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
    # Applying everything again is a no-op that keeps one object each.
    for obj in build_job_manifests(spec(job_id=3, kind="gang", replicas=4, gpus=8)):
        kube.apply(obj)
    assert len(kube.list_owned("batch/v1", "Job", namespace="gp-alpha")) == 7


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
