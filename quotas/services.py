"""Writes for pools, quotas, department caps and priority classes, and the quota sync's records.

Staff only; every write validates and logs. The rules that involve other rows (a department's
cap, quotas that use a pool's MIG profiles) live here, not in model ``clean()``: models check
only what the row itself knows. ``*_conflicts`` functions return those rules' errors without
writing, so the admin's forms show them as field errors; the writes re-check them under locks.

``actor`` is the user doing the change, or None for the system itself (migrations, seeding).
Validation errors are django ValidationErrors keyed by field, so the admin, the API and scripts
show the same specific messages.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from audit.services import created, diff, record, removed, snapshot
from quotas import arithmetic
from quotas.models import (
    FULL_GPU,
    DepartmentQuota,
    GpuPool,
    OrphanedNamespace,
    PriorityClass,
    ProjectQuota,
    QuotaSyncStatus,
    related_or_none,
)
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
    "max_shm_size",
    "max_termination_grace_seconds",
    "scheduler",
    "kai_fractions_allowed",
    "kai_fraction_step",
    "gpu_memory_mib",
    "kai_over_quota_weight",
)
# Issue 26: how the pool shares its GPUs (quotas.sharing); kept apart so they merge cleanly.
SHARING_FIELDS = (
    "sharing_mode",
    "sharing_replicas",
    "sharing_rename",
    "sharing_fail_requests_greater_than_one",
    "mps_memory_limit",
    "dra_managed",
    "dra_feature_gates",
)
POOL_FIELDS = POOL_FIELDS + SHARING_FIELDS


def _raise(errors: Mapping[str, list[str]]) -> None:
    if errors:
        raise ValidationError(dict(errors))


def scheduler_change_error(pool: GpuPool, scheduler: str) -> str | None:
    """Why ``pool`` cannot move to ``scheduler`` now: its active jobs were submitted to the old
    scheduler's objects, which the quota sync would remove under them."""
    from jobs.models import Job

    if not pool.pk:
        return None
    current = GpuPool.objects.filter(pk=pool.pk).values_list("scheduler", flat=True).first()
    if current is None or current == scheduler:
        return None
    jobs = Job.objects.active()
    if connection.features.supports_json_field_contains:
        active = jobs.filter(Q(pool_id=pool.pk) | Q(eligible_pools__contains=[pool.slug])).count()
    else:  # SQLite (the demo): no JSON containment lookup; not yet placed jobs are few
        active = jobs.filter(pool_id=pool.pk).count() + sum(
            pool.slug in (eligible or ())
            for eligible in jobs.filter(pool_id__isnull=True).values_list(
                "eligible_pools", flat=True
            )
        )
    if not active:
        return None
    return (
        f"Pool {pool.slug} has {active} active job{'s' if active != 1 else ''} on its current "
        f"scheduler ({current}); change the scheduler once they have finished or been cancelled."
    )


def pool_conflicts(pool: GpuPool) -> dict[str, list[str]]:
    """Existing quotas in MIG profiles a changed pool would stop offering (field errors)."""
    if pool.pk is None:
        return {}
    offered = set(pool.resources)
    in_use: dict[str, set[str]] = {}
    for model, owner in (
        (ProjectQuota, "project__slug"),
        (DepartmentQuota, "department__slug"),
    ):
        rows = model.objects.filter(pool_id=pool.pk).exclude(resource__in=offered)
        for resource, owner_slug in rows.values_list("resource", owner):
            in_use.setdefault(resource, set()).add(owner_slug)
    if not in_use:
        return {}
    details = "; ".join(
        f"{resource} (used by {', '.join(sorted(owners))})"
        for resource, owners in sorted(in_use.items())
    )
    return {
        "mig_profiles": [
            f"Quotas still use profiles this change removes: {details}. Remove those quotas first."
        ]
    }


def project_quota_conflicts(quota: ProjectQuota) -> dict[str, list[str]]:
    """The department cap this quota would break, as a field error on ``nominal``.

    Works for a project not saved yet (an admin add page with inline quotas): it holds nothing.
    """
    project = related_or_none(quota, "project")
    pool = related_or_none(quota, "pool")
    if project is None or pool is None or quota.nominal is None or not quota.resource:
        return {}
    error = department_cap_error(
        department_id=project.department_id,
        pool=pool,
        resource=quota.resource,
        nominal=quota.nominal,
        exclude_project_id=project.pk,
    )
    return {"nominal": [error]} if error else {}


def department_cap_error(
    *, department_id: int, pool: GpuPool, resource: str, nominal: int, exclude_project_id
) -> str | None:
    """Why a project of the department may not hold ``nominal`` of ``resource`` in ``pool``
    next to its department's other projects (quotas.arithmetic words it), or None."""
    cap = (
        DepartmentQuota.objects.filter(department_id=department_id, pool=pool, resource=resource)
        .select_related("department")
        .first()
    )
    if cap is None:
        return None
    others = (
        ProjectQuota.objects.filter(
            project__department_id=department_id, pool=pool, resource=resource
        )
        .exclude(project_id=exclude_project_id)
        .aggregate(total=Sum("nominal"))["total"]
        or 0
    )
    return arithmetic.cap_error_for_quota(
        department=cap.department.slug,
        pool=pool.slug,
        resource=resource,
        limit=cap.limit,
        others_nominal=others,
        nominal=nominal,
    )


def department_quota_conflicts(cap: DepartmentQuota) -> dict[str, list[str]]:
    """A cap below what the department's projects already hold, as a field error on ``limit``."""
    department = related_or_none(cap, "department")
    pool = related_or_none(cap, "pool")
    if department is None or department.pk is None or pool is None or cap.limit is None:
        return {}
    held = (
        ProjectQuota.objects.filter(
            project__department_id=department.pk, pool=pool, resource=cap.resource
        ).aggregate(total=Sum("nominal"))["total"]
        or 0
    )
    error = arithmetic.cap_error_for_limit(
        department=department.slug,
        pool=pool.slug,
        resource=cap.resource,
        limit=cap.limit,
        projects_nominal=held,
    )
    return {"limit": [error]} if error else {}


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
    max_shm_size: str = "64Gi",
    max_termination_grace_seconds: int = 600,
    **kai: Any,
) -> GpuPool:
    """Create a pool; empty node_labels select its nodes by the GFD product label. ``kai``:
    scheduler, kai_fractions_allowed, kai_fraction_step, gpu_memory_mib, kai_over_quota_weight,
    and the sharing options (SHARING_FIELDS)."""
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
        max_shm_size=max_shm_size,
        max_termination_grace_seconds=max_termination_grace_seconds,
    )
    unknown = sorted(set(kai) - set(POOL_FIELDS))
    if unknown:
        raise TypeError(f"pool_create does not take {', '.join(unknown)}")
    for name, value in kai.items():
        setattr(pool, name, value)
    pool.full_clean()
    _raise(pool_conflicts(pool))
    pool.save()
    record(
        "pool.create",
        actor=actor,
        target=pool,
        changes=created(snapshot(pool, list(POOL_FIELDS))),
    )
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
    before = snapshot(pool, list(changes))
    if "scheduler" in changes:
        error = scheduler_change_error(pool, changes["scheduler"])
        if error:
            raise ValidationError({"scheduler": [error]})
    for name, value in changes.items():
        setattr(pool, name, value)
    pool.full_clean()
    _raise(pool_conflicts(pool))
    pool.save()
    record(
        "pool.change", actor=actor, target=pool, changes=diff(before, snapshot(pool, list(changes)))
    )
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
    over_quota_weight: int | None = None,
) -> ProjectQuota:
    """Create or change a project's quota for one resource in one pool (over_quota_weight: KAI
    pools only, None = the pool's weight)."""
    _require_staff(actor, "set quotas")
    _lock_department_cap(department_id=project.department_id, pool=pool, resource=resource)
    quota = (
        ProjectQuota.objects.select_for_update()
        .filter(project=project, pool=pool, resource=resource)
        .first()
    ) or ProjectQuota(project=project, pool=pool, resource=resource)
    before = (
        snapshot(quota, ["nominal", "borrowing_limit", "over_quota_weight"])
        if quota.pk
        else {"nominal": None, "borrowing_limit": None, "over_quota_weight": None}
    )
    quota.nominal = nominal
    quota.borrowing_limit = borrowing_limit
    quota.over_quota_weight = over_quota_weight
    quota.full_clean()
    _raise(project_quota_conflicts(quota))
    quota.save()
    record(
        "quota.create" if before["nominal"] is None else "quota.change",
        actor=actor,
        target=quota,
        project=project,
        changes=diff(before, snapshot(quota, ["nominal", "borrowing_limit", "over_quota_weight"])),
        detail=f"pool {pool.slug}, {resource}",
    )
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
    quota = ProjectQuota.objects.filter(project=project, pool=pool, resource=resource).first()
    deleted = 0
    if quota is not None:
        target = (quota._meta.label_lower, quota.pk, str(quota))
        old = snapshot(quota, ["nominal", "borrowing_limit"])
        deleted, _ = ProjectQuota.objects.filter(pk=quota.pk).delete()
    if deleted:
        record(
            "quota.delete",
            actor=actor,
            target=target,
            project=project,
            changes=removed(old),
            detail=f"pool {pool.slug}, {resource}",
        )
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
    before = {"limit": cap.limit if cap.pk else None}
    cap.limit = limit
    cap.full_clean()
    _raise(department_quota_conflicts(cap))
    cap.save()
    record(
        "department_quota.create" if before["limit"] is None else "department_quota.change",
        actor=actor,
        target=cap,
        changes=diff(before, {"limit": limit}),
        detail=f"department {department.slug}, pool {pool.slug}, {resource}",
    )
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
    caps = DepartmentQuota.objects.filter(department=department, pool=pool, resource=resource)
    old = caps.values_list("limit", flat=True).first()
    deleted, _ = caps.delete()
    if deleted:
        record(
            "department_quota.delete",
            actor=actor,
            target=("quotas.departmentquota", "", f"{department.slug}/{pool.slug}/{resource}"),
            changes=removed({"limit": old}),
        )
        audit.info(
            "department_quota_delete actor=%s department=%s pool=%s resource=%s",
            _actor_name(actor),
            department.slug,
            pool.slug,
            resource,
        )
    return bool(deleted)


@transaction.atomic
def pool_delete(*, actor: Any, pool: GpuPool) -> None:
    """Remove a pool with its quotas and caps (the next quota sync removes its flavor)."""
    _require_staff(actor, "delete GPU pools")
    slug = pool.slug
    target = ("quotas.gpupool", pool.pk, str(pool))
    GpuPool.objects.filter(pk=pool.pk).delete()
    record("pool.delete", actor=actor, target=target, detail=f"pool {slug} and its quotas")
    audit.info("pool_delete actor=%s pool=%s", _actor_name(actor), slug)


PRIORITY_FIELDS = ("value", "preemptible", "description")


@transaction.atomic
def priority_class_update(*, actor: Any, priority: PriorityClass, **changes: Any) -> PriorityClass:
    """Tune a priority class (see PRIORITY_FIELDS); the three classes are never added or removed."""
    _require_staff(actor, "change priority classes")
    unknown = sorted(set(changes) - set(PRIORITY_FIELDS))
    if unknown:
        raise TypeError(f"priority_class_update cannot change {', '.join(unknown)}")
    priority = PriorityClass.objects.select_for_update().get(pk=priority.pk)
    before = snapshot(priority, list(changes))
    for name, value in changes.items():
        setattr(priority, name, value)
    priority.full_clean()
    priority.save()
    record(
        "priority_class.change",
        actor=actor,
        target=priority,
        changes=diff(before, snapshot(priority, list(changes))),
    )
    audit.info(
        "priority_class_update actor=%s priority=%s fields=%s",
        _actor_name(actor),
        priority.name,
        changes,
    )
    return priority


# --- What the quota sync records for staff (written by quotas.sync only) -----------------------


def quota_sync_status_record(
    *,
    started_at: Any,
    outcome: str,
    applied: int = 0,
    unchanged: int = 0,
    deleted: int = 0,
    message: str = "",
    refused_deletions: list[str] | None = None,
) -> QuotaSyncStatus:
    """Store the outcome of the sync that just ran (one row: the last sync)."""
    status, _ = QuotaSyncStatus.objects.update_or_create(
        pk=1,
        defaults={
            "started_at": started_at,
            "finished_at": timezone.now(),
            "outcome": outcome,
            "applied": applied,
            "unchanged": unchanged,
            "deleted": deleted,
            "message": message,
            "refused_deletions": list(refused_deletions or []),
        },
    )
    return status


def orphaned_namespaces_set(namespaces: Mapping[str, str]) -> None:
    """Make the list of orphaned namespaces what the sync just saw (namespace → project slug):
    new ones are added, ones taken back by a project or deleted by hand are dropped."""
    with transaction.atomic():
        OrphanedNamespace.objects.exclude(namespace__in=list(namespaces)).delete()
        known = set(
            OrphanedNamespace.objects.filter(namespace__in=list(namespaces)).values_list(
                "namespace", flat=True
            )
        )
        for namespace, project_slug in namespaces.items():
            if namespace not in known:
                OrphanedNamespace.objects.get_or_create(
                    namespace=namespace, defaults={"project_slug": project_slug}
                )
                audit.info(
                    "namespace_orphaned namespace=%s project=%s (kept, not deleted)",
                    namespace,
                    project_slug,
                )
        OrphanedNamespace.objects.filter(namespace__in=list(known)).update(
            last_seen_at=timezone.now()
        )


def orphaned_namespaces_forget(namespace: str) -> None:
    """Drop a namespace from the orphan list (it was deleted on a staff member's request)."""
    OrphanedNamespace.objects.filter(namespace=namespace).delete()


def department_move_errors(*, project: Project, department_id: int) -> list[str]:
    """Caps of department ``department_id`` that ``project``'s quotas would break if it moved
    there (empty when it is already there)."""
    stored = Project.objects.filter(pk=project.pk).values_list("department_id", flat=True).first()
    if stored is None or stored == department_id:
        return []
    errors = []
    caps = DepartmentQuota.objects.filter(department_id=department_id).select_related(
        "department", "pool"
    )
    for cap in caps:
        mine = (
            ProjectQuota.objects.filter(
                project_id=project.pk, pool_id=cap.pool_id, resource=cap.resource
            )
            .values_list("nominal", flat=True)
            .first()
        )
        if not mine:
            continue
        others = (
            ProjectQuota.objects.filter(
                project__department_id=department_id, pool_id=cap.pool_id, resource=cap.resource
            ).aggregate(total=Sum("nominal"))["total"]
            or 0
        )
        error = arithmetic.cap_error_for_quota(
            department=cap.department.slug,
            pool=cap.pool.slug,
            resource=cap.resource,
            limit=cap.limit,
            others_nominal=others,
            nominal=mine,
        )
        if error:
            errors.append(f"Moving {project.slug} there would break a cap. {error}")
    return errors
