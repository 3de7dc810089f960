"""Reads of pools and quotas, with the numbers computed by quotas.arithmetic."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet, Sum

from quotas import arithmetic
from quotas.models import DepartmentQuota, GpuPool, ProjectQuota
from tenants.models import Project


@dataclass(frozen=True)
class QuotaRow:
    """One line of a project's quota table: a resource in a pool, guaranteed and maximum."""

    pool_slug: str
    pool_name: str
    gpu_model: str
    resource: str
    nominal: int
    borrowing_limit: int | None
    maximum: int
    over_quota_weight: int | None = None  # KAI pools; None = the pool's


def quota_rows_for_projects(*, projects: Iterable[Project]) -> dict[int, list[QuotaRow]]:
    """Project id → its quota rows, sorted by pool slug then resource ("gpu" first).

    Every given project has an entry (an empty list when it has no quota). The maximum includes
    what the project may borrow from the other projects of its department (its cohort), so the
    cohort sums are read for the whole departments, not only for the given projects. Three
    queries whatever the number of projects.
    """
    projects = list(projects)
    rows: dict[int, list[QuotaRow]] = {project.pk: [] for project in projects}
    if not projects:
        return rows
    department_ids = {project.department_id for project in projects}
    quotas = list(
        ProjectQuota.objects.filter(project_id__in=rows.keys()).select_related("pool", "project")
    )
    cohort_sums = {
        (department_id, pool_id, resource): total
        for department_id, pool_id, resource, total in ProjectQuota.objects.filter(
            project__department_id__in=department_ids
        )
        .values("project__department_id", "pool_id", "resource")
        .annotate(total=Sum("nominal"))
        .values_list("project__department_id", "pool_id", "resource", "total")
        .order_by()
    }
    caps = {
        (department_id, pool_id, resource): limit
        for department_id, pool_id, resource, limit in DepartmentQuota.objects.filter(
            department_id__in=department_ids
        ).values_list("department_id", "pool_id", "resource", "limit")
    }
    for quota in quotas:
        cohort = (quota.project.department_id, quota.pool_id, quota.resource)
        amount = arithmetic.usable_amount(
            nominal=quota.nominal,
            borrowing_limit=quota.borrowing_limit,
            cohort_nominal=cohort_sums.get(cohort, quota.nominal),
            department_cap=caps.get(cohort),
        )
        rows[quota.project_id].append(
            QuotaRow(
                pool_slug=quota.pool.slug,
                pool_name=quota.pool.name,
                gpu_model=quota.pool.gpu_model,
                resource=quota.resource,
                nominal=quota.nominal,
                borrowing_limit=quota.borrowing_limit,
                maximum=amount.maximum,
                over_quota_weight=quota.over_quota_weight,
            )
        )
    for project_rows in rows.values():
        project_rows.sort(key=lambda r: (r.pool_slug, arithmetic.resource_sort_key(r.resource)))
    return rows


def pool_list() -> QuerySet[GpuPool]:
    """All pools, by slug."""
    return GpuPool.objects.order_by("slug")


def quota_entries(*, pool_ids: Iterable[int] | None = None) -> list[arithmetic.QuotaEntry]:
    """Project quotas as arithmetic.QuotaEntry (keys are slugs), for some pools or all."""
    queryset = ProjectQuota.objects.all()
    if pool_ids is not None:
        queryset = queryset.filter(pool_id__in=list(pool_ids))
    return [
        arithmetic.QuotaEntry(
            project=project,
            department=department,
            pool=pool,
            resource=resource,
            nominal=nominal,
            borrowing_limit=borrowing_limit,
        )
        for project, department, pool, resource, nominal, borrowing_limit in queryset.values_list(
            "project__slug",
            "project__department__slug",
            "pool__slug",
            "resource",
            "nominal",
            "borrowing_limit",
        )
    ]


def pool_subscriptions(*, pools: Iterable[GpuPool]) -> dict[int, arithmetic.PoolSubscription]:
    """Pool id → how much of it the nominal quotas promise; one query for any number of pools."""
    pools = list(pools)
    by_slug: dict[str, list[arithmetic.QuotaEntry]] = defaultdict(list)
    for entry in quota_entries(pool_ids=[pool.pk for pool in pools]):
        by_slug[entry.pool].append(entry)
    return {
        pool.pk: arithmetic.pool_subscription(
            pool=pool.slug,
            gpu_model=pool.gpu_model,
            capacity_gpus=pool.total_gpus,
            quotas=by_slug[pool.slug],
        )
        for pool in pools
    }


def pool_oversubscription(*, pool: GpuPool) -> arithmetic.PoolSubscription:
    """The subscription of one pool; ``.oversubscribed`` and ``.message`` say whether to warn."""
    return pool_subscriptions(pools=[pool])[pool.pk]


def department_cap_violations() -> list[arithmetic.CapViolation]:
    """Department caps exceeded by their projects' nominal (e.g. after edits outside the admin)."""
    caps = [
        arithmetic.DepartmentCap(department=d, pool=p, resource=r, limit=limit)
        for d, p, r, limit in DepartmentQuota.objects.values_list(
            "department__slug", "pool__slug", "resource", "limit"
        )
    ]
    return arithmetic.department_cap_violations(quota_entries(), caps)
