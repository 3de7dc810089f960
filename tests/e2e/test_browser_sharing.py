"""Issue 26 in the browser: each job page says which isolation its GPU gives (time-slicing, a
whole GPU through DRA, a MIG device through DRA), and the cluster page lists the shared GPU's
holders. Screenshots go to tests/artifacts/ (not committed).

The jobs are reconciled in-process against a kubesim with the sharing cluster (one T4 with
4 time-slicing replicas, a DRA node with a whole H100 and one cut into 1g.10gb MIG devices);
the pages come from the portal under uvicorn, reading the same database and cluster.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kubesim.testing import KubesimProcess

from quotas import sharing
from tests.asgi_server import start_asgi_server
from tests.e2e.conftest import screenshot, wait_for
from tests.jobs.kubesim_org import reconcile_until, submit

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CLUSTER = Path(__file__).parents[1] / "kubesim" / "sharing" / "cluster.yaml"
SMALL = {"kind": "single", "gpus": 1, "cpu": "1", "memory": "4Gi"}


@pytest.fixture(scope="module")
def sharing_cluster(tmp_path_factory):
    # `python train.py` runs until deleted: the shares stay held while the pages are read
    with KubesimProcess(
        speed=100,
        cluster=CLUSTER,
        workdir=tmp_path_factory.mktemp("ks-sharing-browser"),
        extra_args=["--default-duration", "360000"],
    ) as server:
        yield server


@pytest.fixture
def org(sharing_cluster, settings):
    from portal.kube.client import reset_api_client
    from quotas.sync import sync_quota_objects
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        MembershipFactory,
        ProjectFactory,
        ProjectQuotaFactory,
        UserFactory,
        ensure_priority_classes,
    )

    settings.KUBECONFIG = str(sharing_cluster.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    project = ProjectFactory(slug="shb", department=DepartmentFactory(slug="rs"))
    ts = GpuPoolFactory(
        slug="ts",
        gpu_model="Tesla-T4",
        node_labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
        node_count=1,
        gpus_per_node=1,
        sharing_mode="time-slicing",
        sharing_replicas=4,
    )
    dra = GpuPoolFactory(
        slug="dra",
        gpu_model="NVIDIA-H100-80GB-HBM3",
        node_labels={"nvidia.com/dra-driver-gpu.enabled": "true"},
        node_count=1,
        gpus_per_node=2,
        dra_managed=True,
        mig_profiles=["1g.10gb"],
    )
    for pool in (ts, dra):
        pool.full_clean()
    ProjectQuotaFactory(project=project, pool=ts, resource="gpu", nominal=4)
    ProjectQuotaFactory(project=project, pool=dra, resource="gpu", nominal=2)
    ProjectQuotaFactory(project=project, pool=dra, resource="1g.10gb", nominal=2)
    ensure_priority_classes()
    user = UserFactory(username="shb-user")
    MembershipFactory(user=user, project=project, role="member")
    assert sync_quota_objects().errors == []
    return {"project": project, "user": user}


@pytest.fixture
def portal_server(tmp_path, sharing_cluster, e2e_redis_url):
    """The portal under uvicorn on this module's cluster; no worker: the test reconciles."""
    server = start_asgi_server(
        tmp_path,
        KUBECONFIG=str(sharing_cluster.kubeconfig),
        PORTAL_PUBSUB_URL=e2e_redis_url,
        CELERY_BROKER_URL=e2e_redis_url,
    )
    yield server
    server.stop()


def record_pods(jobs) -> None:
    """What the cluster watcher does: store each pod with the GPUs it holds (jobs.watcher.pod_gpus:
    the kubelet's annotation, or the device a DRA pod's claim was allocated)."""
    from jobs.services import job_record_pods
    from jobs.watcher.pod_gpus import pod_records
    from portal.kube import apply as kube

    for job in jobs:
        pods = kube.list_objects(
            "v1",
            "Pod",
            namespace=job.project.namespace,
            label_selector=f"gpu-portal.io/job-id={job.pk}",
        )
        records = pod_records(job.project.namespace, pods, kai_reservations=dict)
        job_record_pods(job_id=job.pk, records=records, present_uids={r.uid for r in records})


def test_job_pages_and_cluster_page_say_which_isolation_each_job_has(
    org, sharing_cluster, portal_server, page_for
):
    from jobs.models import JobPod

    shared = [submit(org, pool="ts", name=f"turns-{i}", **SMALL) for i in range(2)]
    whole = submit(org, pool="dra", name="big-memory", device={"min_memory": "40Gi"}, **SMALL)
    mig = submit(
        org, pool="dra", name="slice", kind="mig", mig_profile="1g.10gb", cpu="1", memory="4Gi"
    )
    for job in (*shared, whole, mig):
        reconcile_until(job, {"running"})

    def gpus_recorded():
        record_pods((*shared, whole, mig))  # the job pages' "Where it ran"
        uuids = [tuple(p.gpu_uuids) for p in JobPod.objects.filter(job__in=shared)]
        return set(uuids) if len(uuids) == len(shared) and all(uuids) else None

    uuids = wait_for(gpus_recorded, timeout=30, what="the pods' GPUs to be recorded")
    assert len(uuids) == 1  # both shares on the one T4

    page = page_for(org["user"])
    expected = {
        shared[0]: sharing.ISOLATION[sharing.TIME_SLICING],
        whole: sharing.ISOLATION[sharing.EXCLUSIVE],
        mig: sharing.ISOLATION["mig"],
    }
    for job, sentence in expected.items():
        page.goto(f"{portal_server.url}/jobs/{job.pk}/")
        isolation = page.get_by_test_id("isolation")
        assert isolation.inner_text().startswith(sentence), job.name
        if job is shared[0]:
            assert sharing.WHOLE_DEVICE_NOTE in page.get_by_test_id("sharing-note").inner_text()
        if job is whole:
            assert "min_memory 40Gi" in isolation.inner_text()
            device = page.get_by_test_id("dra-device").inner_text()
            assert re.search(r"gpu-0 on dra-0 .* uuid GPU-", device), device
        if job is mig:
            assert "MIG 1g.10gb" in page.get_by_test_id("dra-device").inner_text()
        screenshot(page, f"sharing-job-{job.name}")

        # The job API says the same (issue 26: isolation and device_request on the detail).
        answer = page.request.get(f"{portal_server.url}/api/v1/jobs/{job.pk}/").json()
        assert answer["isolation"] == job.isolation
        assert answer["device_request"] == ({"min_memory": "40Gi"} if job is whole else {})

    page.goto(f"{portal_server.url}/cluster/")
    gpu = page.locator("#pool-ts").get_by_test_id("shared-gpu")
    assert "shared: 2 of 4" in gpu.inner_text()
    holders = sorted(a.get_attribute("href") for a in gpu.locator("a.holder").all())
    assert holders == sorted(f"/jobs/{job.pk}/" for job in shared)
    pool_sentence = page.locator("#pool-ts").get_by_test_id("pool-isolation").inner_text()
    assert pool_sentence == sharing.ISOLATION[sharing.TIME_SLICING]
    screenshot(page, "sharing-cluster")
