"""The quota standing behind "why pending": Kueue jobs read their ClusterQueue, Volcano gangs
their project's Volcano Queue; the department lends what its other projects leave unused."""

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.django_db


def _cq(slug, used):
    return {
        "metadata": {"name": f"gp-{slug}", "labels": {"gpu-portal.io/project": slug}},
        "spec": {
            "resourceGroups": [
                {
                    "flavors": [
                        {
                            "name": "gp-pool-h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                        }
                    ]
                }
            ]
        },
        "status": {
            "flavorsUsage": [
                {"name": "gp-pool-h100", "resources": [{"name": "nvidia.com/gpu", "total": used}]}
            ]
        },
    }


def _vq(slug, used):
    """The project's Volcano leaf queue for pool h100 (one queue per project and pool)."""
    return {
        "metadata": {
            "name": f"gp-{slug}.h100",
            "labels": {"gpu-portal.io/project": slug, "gpu-portal.io/pool": "h100"},
        },
        "spec": {"deserved": {"nvidia.com/gpu": "8"}},
        "status": {"allocated": {"nvidia.com/gpu": used}},
    }


def test_standing_reads_the_queue_of_the_jobs_backend():
    from jobs.watcher.queues import project_quotas, standing_for
    from tests.factories import (
        DepartmentFactory,
        GpuPoolFactory,
        ProjectFactory,
        ProjectQuotaFactory,
    )

    research = DepartmentFactory(slug="research")
    vision = ProjectFactory(slug="vision", department=research)
    nlp = ProjectFactory(slug="nlp", department=research)
    pool = GpuPoolFactory(slug="h100")
    ProjectQuotaFactory(project=vision, pool=pool, resource="gpu", nominal=8)
    ProjectQuotaFactory(project=nlp, pool=pool, resource="gpu", nominal=8)
    cqs = {("", "gp-vision"): _cq("vision", "6"), ("", "gp-nlp"): _cq("nlp", "5")}
    vqs = {("", "gp-vision.h100"): _vq("vision", "2"), ("", "gp-nlp.h100"): _vq("nlp", "8")}
    quotas = project_quotas()

    def job(backend):
        return SimpleNamespace(
            project=vision, backend=backend, pool=None, mig_profile="", eligible_pools=["h100"]
        )

    kueue = standing_for(job("kueue"), cqs, quotas, vqs)
    assert (kueue.pool, kueue.in_use, kueue.guaranteed, kueue.department_spare) == (
        "h100",
        6,
        8,
        3,
    )
    volcano = standing_for(job("volcano"), cqs, quotas, vqs)
    assert (volcano.in_use, volcano.guaranteed, volcano.department_spare) == (2, 8, 0)
    # A queue not reported yet: the sentence leaves the department out rather than guess.
    unknown = standing_for(job("kueue"), {("", "gp-vision"): cqs[("", "gp-vision")]}, quotas)
    assert unknown.department_spare is None
