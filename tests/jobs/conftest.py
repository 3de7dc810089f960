"""Fixtures for job tests: a job factory on top of the shared personas; for the reconcile
suites, a kubesim per test module (`cluster`) and an organisation synced into it (`org`)."""

import time

import pytest
from kubesim.testing import KubesimProcess

from tests.jobs.kubesim_org import H100


@pytest.fixture
def make_job(personas):
    from jobs.models import Job

    counter = {"n": 0}

    def make(**overrides):
        counter["n"] += 1
        fields = {
            "project": personas.project_a,
            "submitter": personas.member,
            "name": f"job-{counter['n']}",
            "kind": "single",
            "image": "pytorch/pytorch:2.4.0",
            "command": ["python", "train.py"],
            "env": {},
            "gpus": 1,
            "replicas": 1,
            "cpu": "4",
            "memory": "16Gi",
            "priority": "normal",
            "max_runtime_minutes": 60,
            "backend": "kueue",
        }
        fields.update(overrides)
        return Job.objects.create(**fields)

    return make


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with KubesimProcess(speed=100, workdir=tmp_path_factory.mktemp("ks-reconcile")) as server:
        yield server


@pytest.fixture
def org(cluster, settings, db):
    """A department with two projects, an H100 pool, priorities, and quotas synced in."""
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
    project = ProjectFactory(slug=f"p{int(time.time() * 1000) % 10**8}", department=dept)
    pool = GpuPoolFactory(
        slug="h100",
        gpu_model=H100,
        node_labels={"nvidia.com/gpu.product": H100},
        node_count=3,
        mig_profiles=["1g.10gb"],
    )
    ProjectQuotaFactory(project=project, pool=pool, resource="gpu", nominal=16)
    ProjectQuotaFactory(project=project, pool=pool, resource="1g.10gb", nominal=4)
    ensure_priority_classes()
    user = UserFactory(username=f"u-{project.slug}")
    MembershipFactory(user=user, project=project, role="member")
    report = sync_quota_objects()
    assert report.errors == []
    return {"project": project, "user": user, "pool": pool}
