"""Issue 26 against kubesim through the official client: a time-slicing pool holds four 1-share
jobs on one GPU and queues the fifth; MPS pods get the MPS limits; a DRA job asking >= 40 GiB
gets the 80 GB GPU (never a 10 GB MIG device), its claim is allocated and released; a job asking
>= 100 GiB is refused at submission; the pages say which isolation each job has."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubesim.testing import KubesimProcess, wait_for

from tests.jobs.kubesim_org import reconcile_until, submit

pytestmark = [pytest.mark.kubesim, pytest.mark.django_db(transaction=True)]

CLUSTER = Path(__file__).parents[1] / "kubesim" / "sharing" / "cluster.yaml"
SMALL = {"cpu": "1", "memory": "4Gi", "command": ["python", "train.py"]}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # `python train.py` runs until deleted: the shares stay held while the test looks at them
    with KubesimProcess(
        speed=100,
        cluster=CLUSTER,
        workdir=tmp_path_factory.mktemp("ks-sharing"),
        extra_args=["--default-duration", "360000"],
    ) as server:
        yield server


@pytest.fixture
def org(cluster, settings):
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

    settings.KUBECONFIG = str(cluster.kubeconfig)
    settings.PORTAL_KUBE_QPS = 0
    reset_api_client()
    dept = DepartmentFactory(slug="rs", name="Research")
    project = ProjectFactory(slug=f"s{int(time.time() * 1000) % 10**8}", department=dept)
    pools = {
        "ts": GpuPoolFactory(
            slug="ts",
            gpu_model="Tesla-T4",
            node_labels={"nvidia.com/gpu.product": "Tesla-T4-SHARED"},
            node_count=1,
            gpus_per_node=1,
            sharing_mode="time-slicing",
            sharing_replicas=4,
        ),
        "mps": GpuPoolFactory(
            slug="mps",
            gpu_model="NVIDIA-A100-SXM4-40GB",
            node_labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-SHARED"},
            node_count=1,
            gpus_per_node=1,
            sharing_mode="mps",
            sharing_replicas=2,
            mps_memory_limit="20Gi",
        ),
        "dra": GpuPoolFactory(
            slug="dra",
            gpu_model="NVIDIA-H100-80GB-HBM3",
            node_labels={"nvidia.com/dra-driver-gpu.enabled": "true"},
            node_count=1,
            gpus_per_node=2,
            dra_managed=True,
        ),
    }
    for pool in pools.values():
        pool.full_clean()
    ProjectQuotaFactory(project=project, pool=pools["ts"], resource="gpu", nominal=4)
    ProjectQuotaFactory(project=project, pool=pools["mps"], resource="gpu", nominal=2)
    ProjectQuotaFactory(project=project, pool=pools["dra"], resource="gpu", nominal=2)
    ensure_priority_classes()
    user = UserFactory(username=f"u-{project.slug}")
    MembershipFactory(user=user, project=project, role="member")
    assert sync_quota_objects().errors == []
    return {"project": project, "user": user, "pools": pools}


@pytest.fixture
def core(cluster):
    api = cluster.api_client()
    yield client.CoreV1Api(api)
    api.close()


def test_time_slicing_four_shares_run_on_one_gpu_and_a_fifth_queues(org, client, core):
    from jobs.models import Job

    jobs = [submit(org, kind="single", gpus=1, pool="ts", **SMALL) for _ in range(5)]
    for job in jobs[:4]:
        reconcile_until(job, {"running"})
    reconcile_until(jobs[4], {"queued"})

    def gpus_of(job):
        return tuple(
            u for pod in Job.objects.get(pk=job.pk).pod_records.all() for u in pod.gpu_uuids
        )

    def recorded():
        for job in jobs[:4]:
            record_pods(org, core, job)
        return all(gpus_of(job) for job in jobs[:4])

    wait_for(recorded, timeout=30, message="the pods' GPUs to be recorded")
    uuids = {gpus_of(job) for job in jobs[:4]}
    assert len(uuids) == 1  # the same physical GPU
    (gpu,) = next(iter(uuids))
    assert gpu.startswith("GPU-")
    client.force_login(org["user"])
    page = client.get(f"/jobs/{jobs[0].pk}/").content.decode()
    assert "Time-slicing: jobs on this GPU take turns" in page
    assert "shared GPU: figures are for the whole device" in page
    cluster_page = client.get("/cluster/").content.decode()
    assert "shared: 4 of 4" in cluster_page
    for job in jobs[:4]:
        assert f"/jobs/{job.pk}/" in cluster_page


def test_mps_pods_get_the_limits(org, core):
    job = submit(org, kind="single", gpus=1, pool="mps", **SMALL)
    reconcile_until(job, {"running"})

    def annotated():
        (pod,) = core.list_namespaced_pod(
            org["project"].namespace, label_selector=f"gpu-portal.io/job-id={job.pk}"
        ).items
        return (pod.metadata.annotations or {}).get("kubesim.dev/mps-limits")

    wait_for(annotated, timeout=30, message="the MPS limits on the pod")
    limits = json.loads(annotated())
    assert limits["activeThreadPercentage"] == 50
    assert list(limits["pinnedDeviceMemoryLimit"].values()) == ["20480M"]
    refused = submit_errors(org, kind="single", gpus=2, pool="mps", **SMALL)
    assert "failRequestsGreaterThanOne" in " ".join(refused["gpus"])


def record_pods(org, core, job):
    """What the cluster watcher records of the job's pods (jobs.watcher.pod_gpus), stored."""
    from jobs.services import job_record_pods
    from jobs.watcher.pod_gpus import pod_records

    pods = [
        core.api_client.sanitize_for_serialization(p)
        for p in core.list_namespaced_pod(
            org["project"].namespace, label_selector=f"gpu-portal.io/job-id={job.pk}"
        ).items
    ]
    records = pod_records(org["project"].namespace, pods, kai_reservations=dict)
    job_record_pods(job_id=job.pk, records=records, present_uids={r.uid for r in records})
    return records


def submit_errors(org, **data):
    """POST /api/v1/jobs/: a 400 whose body names the fields."""
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(org["user"])
    body = {"project": org["project"].slug, "image": "nvcr.io/nvidia/pytorch:24.08-py3"}
    body.update(data)
    response = api.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400, response.content
    return response.json()["errors"]


def test_dra_job_by_memory_gets_the_80gb_gpu_and_releases_its_claim(org, core, client):
    from jobs.models import Job, JobState
    from jobs.reconcile.services import job_reconcile
    from jobs.services import job_cancel

    too_big = submit_errors(org, kind="single", gpus=1, pool="dra", device={"min_memory": "100Gi"})
    assert too_big["device.min_memory"] == [
        "can never run: the largest GPU in pool dra has 79.6 GiB (NVIDIA-H100-80GB-HBM3)."
    ]
    unknown = submit_errors(org, kind="single", gpus=1, pool="dra", device={"colour": "green"})
    assert "publishes no attribute 'colour'" in unknown["device.colour"][0]

    job = submit(org, kind="single", gpus=1, pool="dra", device={"min_memory": "40Gi"}, **SMALL)
    reconcile_until(job, {"running"})
    namespace = org["project"].namespace
    resource = client_resource(org)
    claims = resource.list_namespaced_resource_claim(namespace).items
    (claim,) = [c for c in claims if c.metadata.name.startswith(f"gp-job-{job.pk}-")]
    (result,) = claim.status.allocation.devices.results
    assert result.device == "gpu-0"  # the whole 80 GB GPU, not a 1g.10gb MIG device
    assert len(claim.status.reserved_for) == 1
    client.force_login(org["user"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "<code>gpu-0</code> on dra-0" in page
    assert "uuid <code>GPU-" in page
    # the watcher's record names the claimed GPU (the kubelet names none for a DRA pod), so the
    # cluster page shows that GPU held by the job
    (uuid,) = re.findall(r"uuid <code>(GPU-[^<]+)</code>", page)
    (record,) = record_pods(org, core, job)
    assert record.gpu_uuids == [uuid]
    cluster_page = client.get("/cluster/").content.decode()
    assert f"/jobs/{job.pk}/" in cluster_page
    job_cancel(actor=org["user"], job=Job.objects.get(pk=job.pk))
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert job_reconcile(job_id=job.pk) == "deleted"

    def released():
        names = {c.metadata.name for c in resource.list_namespaced_resource_claim(namespace).items}
        return claim.metadata.name not in names

    wait_for(released, timeout=30, message="the claim to be deleted with its pod")


def client_resource(org):
    from portal.kube.client import get_api_client

    return client.ResourceV1Api(get_api_client())
