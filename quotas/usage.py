"""Quota use as the cluster reports it: ClusterQueue and Volcano Queue status → rows of
(pool, resource, in use, reserved, guaranteed, maximum, borrowed, lent). Pure functions.

Kueue: guaranteed = the flavor's nominalQuota, maximum = nominal + borrowingLimit (None when
unlimited), in use = status.flavorsUsage total, reserved = status.flavorsReservation total,
borrowed = flavorsUsage borrowed. What a ClusterQueue lends is what others of its cohort borrow,
taken from the queues with unused guaranteed quota in name order (Kueue does not say which
lender a borrower draws on; the split is ours, the totals are the cluster's).
Volcano: guaranteed = spec.deserved, maximum = spec.capability, in use = status.allocated; one
leaf queue per project and pool (its pool label says which).
KAI: guaranteed = spec.resources.gpu.quota, maximum = its limit (None for -1), in use =
status.allocated nvidia.com/gpu, fractions included ("500m" is half a GPU, as KAI counts it).
"""

from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from portal.kube import labels as L

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
FLAVOR_PREFIX = "gp-pool-"
CQ_PREFIX = "gp-"


@dataclass(frozen=True)
class UsageRow:
    queue_kind: str  # clusterqueue | volcano | kai
    queue_name: str
    project_slug: str
    cohort: str
    pool: str
    resource: str  # gpu | MIG profile
    in_use: Decimal = Decimal(0)
    reserved: Decimal = Decimal(0)
    guaranteed: Decimal = Decimal(0)
    maximum: Decimal | None = None
    borrowed: Decimal = Decimal(0)
    lent: Decimal = Decimal(0)
    pending_workloads: int = 0


def quantity(value: Any) -> Decimal:
    """'2', '1500m', 3 → Decimal; accelerators are whole numbers, CPU may be milli."""
    text = str(value if value is not None else "0").strip()
    if text.endswith("m"):
        return Decimal(text[:-1]) / 1000
    try:
        return Decimal(text)
    except ArithmeticError:
        return Decimal(0)


def portal_resource(name: str) -> str | None:
    if name == GPU_RESOURCE:
        return "gpu"
    if name.startswith(MIG_PREFIX):
        return name[len(MIG_PREFIX) :]
    return None


def _totals(entries: list[dict[str, Any]] | None) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for flavor in entries or []:
        for res in flavor.get("resources") or []:
            out[(flavor.get("name") or "", res.get("name") or "")] = res
    return out


def cluster_queue_rows(cq: dict[str, Any]) -> list[UsageRow]:
    meta, spec, status = cq.get("metadata") or {}, cq.get("spec") or {}, cq.get("status") or {}
    name = meta.get("name") or ""
    project = (meta.get("labels") or {}).get("gpu-portal.io/project") or name.removeprefix(
        CQ_PREFIX
    )
    usage = _totals(status.get("flavorsUsage"))
    reservation = _totals(status.get("flavorsReservation"))
    rows = []
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            flavor_name = flavor.get("name") or ""
            for res in flavor.get("resources") or []:
                resource = portal_resource(res.get("name") or "")
                if resource is None:
                    continue
                nominal = quantity(res.get("nominalQuota"))
                limit = res.get("borrowingLimit")
                used = usage.get((flavor_name, res["name"])) or {}
                held = reservation.get((flavor_name, res["name"])) or {}
                rows.append(
                    UsageRow(
                        queue_kind="clusterqueue",
                        queue_name=name,
                        project_slug=project,
                        cohort=spec.get("cohortName") or spec.get("cohort") or "",
                        pool=flavor_name.removeprefix(FLAVOR_PREFIX),
                        resource=resource,
                        in_use=quantity(used.get("total")),
                        reserved=quantity(held.get("total")),
                        guaranteed=nominal,
                        maximum=None if limit is None else nominal + quantity(limit),
                        borrowed=quantity(used.get("borrowed")),
                        pending_workloads=int(status.get("pendingWorkloads") or 0),
                    )
                )
    return rows


def with_lending(rows: list[UsageRow]) -> list[UsageRow]:
    """Fill `lent`: per cohort, pool and resource, the borrowed total is drawn from the queues'
    unused guaranteed quota in queue-name order."""
    borrowed: dict[tuple[str, str, str], Decimal] = {}
    for row in rows:
        if row.cohort:
            k = (row.cohort, row.pool, row.resource)
            borrowed[k] = borrowed.get(k, Decimal(0)) + row.borrowed
    out = []
    for row in sorted(rows, key=lambda r: (r.cohort, r.pool, r.resource, r.queue_name)):
        k = (row.cohort, row.pool, row.resource)
        left = borrowed.get(k, Decimal(0))
        spare = max(Decimal(0), row.guaranteed - row.in_use)
        lent = min(spare, left) if row.cohort else Decimal(0)
        if row.cohort:
            borrowed[k] = left - lent
        out.append(replace(row, lent=lent))
    return out


def volcano_queue_rows(queue: dict[str, Any]) -> list[UsageRow]:
    meta, spec, status = queue.get("metadata") or {}, queue.get("spec") or {}, queue.get("status")
    name = meta.get("name") or ""
    labels = meta.get("labels") or {}
    project = labels.get(L.PROJECT_KEY) or ""
    if not project:
        return []  # department (parent) queues and foreign queues
    allocated = (status or {}).get("allocated") or {}
    deserved = spec.get("deserved") or {}
    capability = spec.get("capability") or {}
    rows = []
    for res in sorted(set(deserved) | set(capability) | set(allocated)):
        resource = portal_resource(res)
        if resource is None:
            continue
        used = quantity(allocated.get(res))
        guaranteed = quantity(deserved.get(res))
        rows.append(
            UsageRow(
                queue_kind="volcano",
                queue_name=name,
                project_slug=project,
                cohort=spec.get("parent") or "",
                pool=labels.get(L.POOL_KEY) or "",  # one leaf queue per pool
                resource=resource,
                in_use=used,
                guaranteed=guaranteed,
                maximum=quantity(capability[res]) if res in capability else None,
                borrowed=max(Decimal(0), used - guaranteed),
                pending_workloads=int(((status or {}).get("pending")) or 0),
            )
        )
    return rows


def kai_queue_rows(queue: dict[str, Any]) -> list[UsageRow]:
    """The GPU row of a project's KAI leaf queue (department and foreign queues give none)."""
    meta, spec = queue.get("metadata") or {}, queue.get("spec") or {}
    labels = meta.get("labels") or {}
    project = labels.get(L.PROJECT_KEY) or ""
    if not project:
        return []
    gpu = (spec.get("resources") or {}).get("gpu") or {}
    allocated = ((queue.get("status") or {}).get("allocated")) or {}
    used = quantity(allocated.get(GPU_RESOURCE))
    guaranteed = max(Decimal(0), quantity(gpu.get("quota")))
    limit = gpu.get("limit")
    return [
        UsageRow(
            queue_kind="kai",
            queue_name=meta.get("name") or "",
            project_slug=project,
            cohort=spec.get("parentQueue") or "",
            pool=labels.get(L.POOL_KEY) or "",
            resource="gpu",
            in_use=used,
            guaranteed=guaranteed,
            maximum=None if limit is None or quantity(limit) < 0 else quantity(limit),
            borrowed=max(Decimal(0), used - guaranteed),
        )
    ]
