"""Writes for pools and quotas. Staff only; every write validates with full_clean and logs.

``actor`` is the user doing the change, or None for the system itself (migrations, seeding).
Validation errors are django ValidationErrors keyed by field, so the admin, the API and scripts
show the same specific messages.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from quotas.models import FULL_GPU, DepartmentQuota, GpuPool, ProjectQuota
from tenants.models import Department, Project

audit = logging.getLogger("portal.audit")

POOL_FIELDS = (
    "name",
    "gpu_model",
    "node_labels",
    "node_count",
    "gpus_per_node",
    "mig_profiles",
    "default_cpu",
    "default_memory",
)


def _actor_name(actor: Any) -> str:
    return "system" if actor is None else actor.get_username()


def _require_staff(actor: Any, doing: str) -> None:
    if actor is not None and not (actor.is_active and actor.is_staff):
        raise PermissionDenied(f"Only staff can {doing}.")


@transaction.atomic
def pool_create(
    *,
    actor: Any,
    slug: str,
    name: str,
    gpu_model: str,
    node_count: int,
    gpus_per_node: int = 8,
    mig_profiles: Iterable[str] = (),
    node_labels: Mapping[str, str] | None = None,
    default_cpu: str = "8",
    default_memory: str = "64Gi",
) -> GpuPool:
    """Create a pool; empty node_labels select its nodes by the GFD product label."""
    _require_staff(actor, "create GPU pools")
    pool = GpuPool(
        slug=slug,
        name=name,
        gpu_model=gpu_model,
        node_count=node_count,
        gpus_per_node=gpus_per_node,
        mig_profiles=list(mig_profiles),
        node_labels=dict(node_labels or {}),
        default_cpu=default_cpu,
        default_memory=default_memory,
    )
    pool.full_clean()
    pool.save()
    audit.info("pool_create actor=%s pool=%s model=%s", _actor_name(actor), slug, pool.gpu_model)
    return pool


@transaction.atomic
def pool_update(*, actor: Any, pool: GpuPool, **changes: Any) -> GpuPool:
    """Change some fields of a pool (see POOL_FIELDS); refuses to drop profiles quotas use."""
    _require_staff(actor, "change GPU pools")
    unknown = sorted(set(changes) - set(POOL_FIELDS))
    if unknown:
        raise TypeError(f"pool_update cannot change {', '.join(unknown)}")
    pool = GpuPool.objects.select_for_update().get(pk=pool.pk)
    for name, value in changes.items():
        setattr(pool, name, value)
    pool.full_clean()
    pool.save()
    audit.info("pool_update actor=%s pool=%s fields=%s", _actor_name(actor), pool.slug, changes)
    return pool


def _lock_department_cap(*, department_id: int, pool: GpuPool, resource: str) -> None:
    # Serialise quota writes under one cap so two concurrent writes cannot together exceed it.
    list(
        DepartmentQuota.objects.select_for_update().filter(
            department_id=department_id, pool=pool, resource=resource
        )
    )


@transaction.atomic
def quota_set(
    *,
    actor: Any,
    project: Project,
    pool: GpuPool,
    resource: str = FULL_GPU,
    nominal: int,
    borrowing_limit: int | None = None,
) -> ProjectQuota:
    """Create or change a project's quota for one resource in one pool."""
    _require_staff(actor, "set quotas")
    _lock_department_cap(department_id=project.department_id, pool=pool, resource=resource)
    quota = (
        ProjectQuota.objects.select_for_update()
        .filter(project=project, pool=pool, resource=resource)
        .first()
    ) or ProjectQuota(project=project, pool=pool, resource=resource)
    quota.nominal = nominal
    quota.borrowing_limit = borrowing_limit
    quota.full_clean()
    quota.save()
    audit.info(
        "quota_set actor=%s project=%s pool=%s resource=%s nominal=%s borrowing_limit=%s",
        _actor_name(actor),
        project.slug,
        pool.slug,
        resource,
        nominal,
        borrowing_limit,
    )
    return quota


@transaction.atomic
def quota_delete(*, actor: Any, project: Project, pool: GpuPool, resource: str = FULL_GPU) -> bool:
    """Remove a project's quota; True when there was one."""
    _require_staff(actor, "delete quotas")
    deleted, _ = ProjectQuota.objects.filter(project=project, pool=pool, resource=resource).delete()
    if deleted:
        audit.info(
            "quota_delete actor=%s project=%s pool=%s resource=%s",
            _actor_name(actor),
            project.slug,
            pool.slug,
            resource,
        )
    return bool(deleted)


@transaction.atomic
def department_quota_set(
    *, actor: Any, department: Department, pool: GpuPool, resource: str = FULL_GPU, limit: int
) -> DepartmentQuota:
    """Create or change a department's cap; refused below what its projects already hold."""
    _require_staff(actor, "set department quotas")
    cap = (
        DepartmentQuota.objects.select_for_update()
        .filter(department=department, pool=pool, resource=resource)
        .first()
    ) or DepartmentQuota(department=department, pool=pool, resource=resource)
    cap.limit = limit
    cap.full_clean()
    cap.save()
    audit.info(
        "department_quota_set actor=%s department=%s pool=%s resource=%s limit=%s",
        _actor_name(actor),
        department.slug,
        pool.slug,
        resource,
        limit,
    )
    return cap


@transaction.atomic
def department_quota_delete(
    *, actor: Any, department: Department, pool: GpuPool, resource: str = FULL_GPU
) -> bool:
    """Remove a department's cap; True when there was one."""
    _require_staff(actor, "delete department quotas")
    deleted, _ = DepartmentQuota.objects.filter(
        department=department, pool=pool, resource=resource
    ).delete()
    if deleted:
        audit.info(
            "department_quota_delete actor=%s department=%s pool=%s resource=%s",
            _actor_name(actor),
            department.slug,
            pool.slug,
            resource,
        )
    return bool(deleted)
