"""Queue facts for the watcher: positions (Kueue visibility API, Volcano PodGroup order), the
project's quota standing for the "why pending" sentence, and storing QueueUsage rows."""

from decimal import Decimal
from typing import Any

from django.db import transaction

from jobs.explain import Standing
from jobs.models import Job, QueueUsage
from portal.kube.apply import KubeError
from portal.kube.watch import pending_workloads
from quotas.manifests import volcano_project_queue_name
from quotas.models import GpuPool, ProjectQuota
from quotas.usage import cluster_queue_rows, kai_queue_rows, volcano_queue_rows, with_lending
from tenants.models import Project


def cluster_queue_name(slug: str) -> str:
    from quotas.manifests import cluster_queue_name as name

    return name(slug)


def positions(
    queued: list[Job],
    workload_job: dict[tuple[str, str], int],
    podgroups: dict[tuple[str, str], dict[str, Any]],
    vcjobs: dict[tuple[str, str], dict[str, Any]],
) -> dict[int, tuple[int, int]]:
    """{job id: (1-based position, queue length)} for waiting jobs."""
    out: dict[int, tuple[int, int]] = {}
    out.update(kai_positions([j for j in queued if j.backend == "kai"]))
    cqs = sorted(
        {cluster_queue_name(j.project.slug) for j in queued if j.backend not in ("volcano", "kai")}
    )
    for cq in cqs:
        try:
            items = pending_workloads(cq)
        except KubeError:
            continue
        for item in items:
            meta = item.get("metadata") or {}
            job_id = workload_job.get((meta.get("namespace") or "", meta.get("name") or ""))
            if job_id is not None:
                out[job_id] = (int(item.get("positionInClusterQueue") or 0) + 1, len(items))
    # Volcano: Pending PodGroups of a queue are considered oldest first.
    by_queue: dict[str, list[tuple[str, int]]] = {}
    owner_to_job = {
        (v.get("metadata") or {}).get("uid"): int(
            ((v.get("metadata") or {}).get("labels") or {}).get("gpu-portal.io/job-id") or 0
        )
        for v in vcjobs.values()
    }
    for pg in podgroups.values():
        status = pg.get("status") or {}
        if (status.get("phase") or "Pending") != "Pending":
            continue
        owners = [o.get("uid") for o in (pg.get("metadata") or {}).get("ownerReferences") or []]
        job_id = next((owner_to_job[o] for o in owners if owner_to_job.get(o)), None)
        if job_id is None:
            continue
        queue = (pg.get("spec") or {}).get("queue") or "default"
        created = (pg.get("metadata") or {}).get("creationTimestamp") or ""
        by_queue.setdefault(queue, []).append((created, job_id))
    for entries in by_queue.values():
        entries.sort()
        for index, (_, job_id) in enumerate(entries):
            out[job_id] = (index + 1, len(entries))
    return out


def kai_positions(queued: list[Job]) -> dict[int, tuple[int, int]]:
    """KAI: a queue's waiting jobs are tried by priority, then oldest first (one KAI queue per
    project and pool)."""
    rank = {name: index for index, name in enumerate(("high", "normal", "low"))}
    by_queue: dict[tuple[int, str], list[Job]] = {}
    for job in queued:
        pool = job.pool.slug if job.pool else next(iter(job.eligible_pools or ()), "")
        by_queue.setdefault((job.project_id, pool), []).append(job)
    out = {}
    for jobs in by_queue.values():
        jobs.sort(key=lambda j: (rank.get(j.priority, 1), j.created_at, j.pk))
        for index, job in enumerate(jobs):
            out[job.pk] = (index + 1, len(jobs))
    return out


def _resource_of(job: Job) -> str:
    return job.mig_profile or "gpu"


def _kueue_in_use(cqs: dict, slug: str, pool: str, resource: str) -> Decimal | None:
    cq = cqs.get(("", cluster_queue_name(slug)))
    if cq is None:
        return None
    for row in cluster_queue_rows(cq):
        if row.pool == pool and row.resource == resource:
            return row.in_use
    return Decimal(0)


def _volcano_in_use(vqs: dict, slug: str, pool: str, resource: str) -> Decimal | None:
    """The allocation of the project's Volcano leaf Queue for the pool (one queue per pool)."""
    queue = vqs.get(("", volcano_project_queue_name(slug, pool)))
    if queue is None:
        return None
    for row in volcano_queue_rows(queue):
        if row.resource == resource:
            return row.in_use
    return Decimal(0)


def project_quotas() -> list[ProjectQuota]:
    """Every project quota with its pool and project (the watcher caches this briefly)."""
    return list(ProjectQuota.objects.select_related("pool", "project"))


def standing_for(
    job: Job,
    cqs: dict[tuple[str, str], dict[str, Any]],
    all_quotas: list[ProjectQuota],
    vqs: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> Standing | None:
    """The project's use against its quota where the job waits: the ClusterQueue for Kueue
    jobs, the project's Volcano Queue for Volcano gangs."""
    project: Project = job.project

    def _in_use(cqs, slug, pool, resource):
        if job.backend == "kai":
            return None  # KAI's queues are not watched: the sentence goes without the figures
        if job.backend == "volcano":
            return _volcano_in_use(vqs or {}, slug, pool, resource)
        return _kueue_in_use(cqs, slug, pool, resource)

    resource = _resource_of(job)
    quotas = [q for q in all_quotas if q.resource == resource]
    # A Volcano gang is pinned to the first of its eligible pools (jobs.manifests).
    pool_slug = job.pool.slug if job.pool else next(iter(job.eligible_pools or ()), "")
    own = [q for q in quotas if q.project_id == project.pk]
    if not pool_slug and own:
        pool_slug = own[0].pool.slug
    if not pool_slug:
        return None
    guaranteed = sum(q.nominal for q in own if q.pool.slug == pool_slug)
    in_use = _in_use(cqs, project.slug, pool_slug, resource)
    spare = 0
    known = True
    for q in quotas:
        if q.pool.slug != pool_slug or q.project_id == project.pk:
            continue
        if q.project.department_id != project.department_id:
            continue
        used = _in_use(cqs, q.project.slug, pool_slug, resource)
        if used is None:
            known = False
            continue
        spare += max(0, int(q.nominal - used))
    return Standing(
        project=project.slug,
        department=project.department.slug,
        pool=pool_slug,
        in_use=None if in_use is None else int(in_use),
        guaranteed=guaranteed,
        department_spare=spare if known else None,
    )


def pool_model(standing: Standing | None) -> str:
    if standing is None:
        return ""
    models = GpuPool.objects.filter(slug=standing.pool).values_list("gpu_model", flat=True)
    return models.first() or ""


def store_usage(
    cqs: dict[tuple[str, str], dict[str, Any]],
    vqs: dict[tuple[str, str], dict[str, Any]],
    kqs: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> None:
    """Replace the QueueUsage rows with what the queues' status says now."""
    rows = with_lending([r for cq in cqs.values() for r in cluster_queue_rows(cq)])
    rows += [r for q in vqs.values() for r in volcano_queue_rows(q)]
    rows += [r for q in (kqs or {}).values() for r in kai_queue_rows(q)]
    projects = dict(Project.objects.values_list("slug", "pk"))
    keep = []
    with transaction.atomic():
        for row in rows:
            obj, _ = QueueUsage.objects.update_or_create(
                queue_kind=row.queue_kind,
                queue_name=row.queue_name,
                pool=row.pool,
                resource=row.resource,
                defaults={
                    "project_id": projects.get(row.project_slug),
                    "in_use": row.in_use,
                    "reserved": row.reserved,
                    "guaranteed": row.guaranteed,
                    "maximum": row.maximum,
                    "borrowed": row.borrowed,
                    "lent": row.lent,
                    "pending_workloads": row.pending_workloads,
                },
            )
            keep.append(obj.pk)
        QueueUsage.objects.exclude(pk__in=keep).delete()
