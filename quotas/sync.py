"""Quota objects into the cluster: make the owned objects match the admin's model.

Level-triggered: build every desired object from the database (quotas.manifests), server-side
apply them all, then delete owned objects (managed-by=gpu-portal) that are no longer desired.
Objects without the portal's label are never changed or deleted: if one already holds a name
the portal wants, it is reported and left alone.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from portal.kube import apply as kube
from portal.kube import labels as L
from portal.kube.apply import KubeError, RetryableKubeError
from quotas import manifests as qm
from quotas.models import GpuPool, PriorityClass
from quotas.selectors import quota_rows_for_projects
from tenants.models import Department, Project

log = logging.getLogger(__name__)

# Stale objects are deleted children first: project objects before department queues.
_DELETE_ORDER = {"project": 0, "pool": 1, "priority": 2, "department": 3}


@dataclass
class SyncReport:
    applied: int = 0
    unchanged: int = 0
    deleted: int = 0
    conflicts: list[str] = field(default_factory=list)  # names held by objects we do not own
    errors: list[str] = field(default_factory=list)


def quota_model() -> qm.QuotaModel:
    """The admin's model as plain values (guaranteed/maximum from quotas.arithmetic)."""
    projects = list(Project.objects.select_related("department").order_by("slug"))
    rows = quota_rows_for_projects(projects=projects)
    pools = tuple(
        qm.PoolSpec(
            slug=p.slug,
            node_labels=dict(p.node_labels or {}),
            mig_profiles=tuple(p.mig_profiles or ()),
            total_gpus=p.total_gpus,
            default_cpu=p.default_cpu,
            default_memory=p.default_memory,
        )
        for p in GpuPool.objects.order_by("slug")
    )
    return qm.QuotaModel(
        pools=pools,
        departments=tuple(qm.DepartmentSpec(slug=d.slug) for d in Department.objects.all()),
        projects=tuple(
            qm.ProjectSpec(
                slug=p.slug,
                namespace=p.namespace,
                department_slug=p.department.slug,
                pod_security=p.pod_security,
                quotas=tuple(
                    qm.QuotaAmount(
                        pool_slug=r.pool_slug,
                        resource=r.resource,
                        guaranteed=r.nominal,
                        maximum=r.maximum,
                    )
                    for r in rows[p.pk]
                ),
            )
            for p in projects
        ),
        priorities=tuple(
            qm.PrioritySpec(
                name=pc.name, value=pc.value, preemptible=pc.preemptible, description=pc.description
            )
            for pc in PriorityClass.objects.all()
        ),
    )


def contains(live: Any, desired: Any) -> bool:
    """Whether the live object already holds every field and value of the desired one (the
    server adds defaults and status; a value it normalised differently just means one more
    apply)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            k in live and contains(live[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(live) == len(desired)
            and all(contains(a, b) for a, b in zip(live, desired, strict=True))
        )
    return live == desired


def _key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])


def _owned_objects() -> dict[tuple[str, str, str, str], dict[str, Any]]:
    owned = {}
    for api_version, kind in qm.QUOTA_KINDS:
        for obj in kube.list_owned(api_version, kind):
            # Only quota-kind owners: job objects are never the quota sync's business.
            owner = obj["metadata"].get("labels", {}).get(L.OWNER_KIND_KEY)
            if owner in _DELETE_ORDER:
                owned[_key(obj)] = obj
    return owned


def sync_quota_objects(model: qm.QuotaModel | None = None) -> SyncReport:
    """Apply every desired quota object and delete stale owned ones.

    Raises RetryableKubeError if anything failed transiently (after doing all it could), so the
    task retries; permanent rejections are logged in the report and do not block the rest.
    """
    model = model or quota_model()
    desired = qm.desired_quota_objects(model)
    report = SyncReport()
    owned = _owned_objects()
    retry: RetryableKubeError | None = None
    for obj in desired:
        key = _key(obj)
        if key in owned and contains(owned[key], obj):
            report.unchanged += 1
            continue  # already as desired: the periodic resync costs only the LIST calls
        try:
            if key not in owned:
                api_version, kind, namespace, name = key
                existing = kube.get(api_version, kind, name, namespace or None)
                if existing is not None and not L.is_managed(existing):
                    report.conflicts.append(f"{kind} {namespace + '/' if namespace else ''}{name}")
                    continue
            kube.apply(obj)
            report.applied += 1
        except RetryableKubeError as exc:
            retry = exc
            report.errors.append(f"{key[1]} {key[3]}: {exc.message}")
        except KubeError as exc:
            report.errors.append(f"{key[1]} {key[3]}: {exc.message}")
    desired_keys = {_key(o) for o in desired}
    stale = [o for k, o in owned.items() if k not in desired_keys]
    stale.sort(
        key=lambda o: _DELETE_ORDER.get(o["metadata"]["labels"].get(L.OWNER_KIND_KEY, ""), 9)
    )
    for obj in stale:
        if obj["kind"] in ("LocalQueue", "ResourceQuota") and any(
            s["kind"] == "Namespace" and s["metadata"]["name"] == obj["metadata"].get("namespace")
            for s in stale
        ):
            continue  # goes with its namespace
        try:
            kube.delete_object(obj)
            report.deleted += 1
        except RetryableKubeError as exc:
            retry = exc
            report.errors.append(f"delete {obj['kind']} {obj['metadata']['name']}: {exc.message}")
        except KubeError as exc:
            report.errors.append(f"delete {obj['kind']} {obj['metadata']['name']}: {exc.message}")
    for conflict in report.conflicts:
        log.warning("quota sync: %s exists and is not managed by the portal; left alone", conflict)
    for error in report.errors:
        log.warning("quota sync: %s", error)
    if retry is not None:
        raise retry
    return report


class QuotaSyncOnChangeAdminMixin:
    """Put first in the bases of every admin whose model feeds the quota objects (Department,
    Project, GpuPool, ProjectQuota, DepartmentQuota, PriorityClass): any save or delete there,
    inline edits included, syncs the cluster once the transaction commits. The periodic resync
    repairs anything a lost message missed."""

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        _enqueue()

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        _enqueue()

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        _enqueue()

    def delete_queryset(self, request, queryset) -> None:
        super().delete_queryset(request, queryset)
        _enqueue()


def _enqueue() -> None:
    from quotas.tasks import enqueue_quota_sync

    enqueue_quota_sync()
