"""Quota reads: the rows H2's API and home page show, and pool subscription."""

from quotas import services
from quotas.models import ProjectQuota
from quotas.selectors import (
    QuotaRow,
    department_cap_violations,
    pool_list,
    pool_oversubscription,
    pool_subscriptions,
    quota_rows_for_projects,
)
from tenants.models import Project


def _set(org, project, pool, nominal, borrowing_limit=None, resource="gpu"):
    services.quota_set(
        actor=None,
        project=getattr(org, project),
        pool=getattr(org, pool),
        resource=resource,
        nominal=nominal,
        borrowing_limit=borrowing_limit,
    )


def test_quota_rows_carry_guaranteed_and_maximum_sorted_by_pool_then_resource(org):
    _set(org, "vision", "h100", 8, 4)
    _set(org, "vision", "h100", 7, 0, resource="1g.10gb")
    _set(org, "vision", "h100", 3, None, resource="2g.20gb")
    _set(org, "vision", "a100", 4, None)
    _set(org, "nlp", "h100", 8, None)
    _set(org, "nlp", "h100", 3, None, resource="2g.20gb")
    _set(org, "infra", "h100", 16, None)  # another department lends nothing to research

    rows = quota_rows_for_projects(projects=[org.vision, org.nlp, org.infra])
    assert rows[org.vision.pk] == [
        QuotaRow("a100", "A100 40GB", "NVIDIA-A100-SXM4-40GB", "gpu", 4, None, 4),
        QuotaRow("h100", "H100 80GB", "NVIDIA-H100-80GB-HBM3", "gpu", 8, 4, 12),
        QuotaRow("h100", "H100 80GB", "NVIDIA-H100-80GB-HBM3", "1g.10gb", 7, 0, 7),
        QuotaRow("h100", "H100 80GB", "NVIDIA-H100-80GB-HBM3", "2g.20gb", 3, None, 6),
    ]
    assert [(r.resource, r.nominal, r.maximum) for r in rows[org.nlp.pk]] == [
        ("gpu", 8, 16),
        ("2g.20gb", 3, 6),
    ]
    assert [(r.resource, r.maximum) for r in rows[org.infra.pk]] == [("gpu", 16)]


def test_maximum_counts_cohort_projects_that_are_not_listed_and_department_caps(org):
    _set(org, "vision", "h100", 4)
    _set(org, "nlp", "h100", 12)
    assert quota_rows_for_projects(projects=[org.vision])[org.vision.pk][0].maximum == 16
    services.department_quota_set(actor=None, department=org.research, pool=org.h100, limit=16)
    # a cap set below the sum outside the services (e.g. in SQL) still bounds the maximum
    ProjectQuota.objects.filter(project=org.nlp).update(nominal=20)
    assert quota_rows_for_projects(projects=[org.vision])[org.vision.pk][0].maximum == 16
    assert [v.needed for v in department_cap_violations()] == [24]


def test_projects_without_quotas_get_an_empty_list(org):
    assert quota_rows_for_projects(projects=[org.vision]) == {org.vision.pk: []}
    assert quota_rows_for_projects(projects=[]) == {}


def test_quota_rows_take_a_constant_number_of_queries(org, django_assert_num_queries):
    from tenants.models import Department

    for i in range(12):
        department = Department.objects.create(slug=f"d{i}", name=f"D{i}")
        project = Project.objects.create(slug=f"p{i}", name=f"P{i}", department=department)
        services.quota_set(actor=None, project=project, pool=org.h100, nominal=1)
        services.quota_set(actor=None, project=project, pool=org.a100, nominal=1)
    projects = list(Project.objects.all())
    with django_assert_num_queries(3):
        rows = quota_rows_for_projects(projects=projects)
    assert sum(len(r) for r in rows.values()) == 24
    with django_assert_num_queries(3):
        quota_rows_for_projects(projects=projects[:1])


def test_pool_oversubscription_and_list(org, django_assert_num_queries):
    _set(org, "vision", "h100", 24)
    _set(org, "nlp", "h100", 14, resource="1g.10gb")
    sub = pool_oversubscription(pool=org.h100)
    assert (sub.needed_gpus, sub.capacity_gpus, sub.oversubscribed) == (26, 32, False)
    _set(org, "infra", "h100", 7)
    sub = pool_oversubscription(pool=org.h100)
    assert sub.oversubscribed
    assert sub.message.startswith("Pool h100 is over-subscribed: 33 of 32 GPUs guaranteed")
    pools = list(pool_list())
    assert [p.slug for p in pools] == ["a100", "h100"]
    with django_assert_num_queries(1):
        subs = pool_subscriptions(pools=pools)
    assert subs[org.a100.pk].needed_gpus == 0
