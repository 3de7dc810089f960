"""jobs.selectors.pool_facts_for_project agrees with the quota page's numbers."""

import pytest

pytestmark = pytest.mark.django_db


def test_pool_facts_match_the_quota_rows_including_borrowing_and_caps(personas):
    from jobs.selectors import pool_facts_for_project
    from quotas.selectors import quota_rows_for_projects
    from tests.factories import GpuPoolFactory, ProjectFactory, ProjectQuotaFactory

    a100 = GpuPoolFactory(slug="a100", gpu_model="NVIDIA-A100-SXM4-40GB", gpus_per_node=4)
    sibling = ProjectFactory(slug="sibling", department=personas.project_a.department)
    ProjectQuotaFactory(project=sibling, pool=personas.pool, resource="gpu", nominal=6)
    ProjectQuotaFactory(project=personas.project_a, pool=a100, resource="gpu", nominal=2)
    ProjectQuotaFactory(
        project=personas.project_a, pool=personas.pool, resource="1g.10gb", nominal=3
    )
    from quotas.models import DepartmentQuota

    DepartmentQuota.objects.create(
        department=personas.project_a.department, pool=personas.pool, resource="gpu", limit=14
    )
    facts = {f.slug: f for f in pool_facts_for_project(project=personas.project_a)}
    rows = quota_rows_for_projects(projects=[personas.project_a])[personas.project_a.pk]
    assert {(r.pool_slug, r.resource): r.maximum for r in rows} == {
        (slug, resource): maximum
        for slug, fact in facts.items()
        for resource, maximum in fact.maximum.items()
    }
    # 8 guaranteed + borrowing limit 4 from the sibling's 6, within the department cap of 14.
    assert facts["h100"].maximum["gpu"] == 12
    assert facts["a100"].gpus_per_node == 4
    assert facts["h100"].mig_profiles == ("1g.10gb", "3g.40gb")
