"""Reads of jobs: visibility, the pool facts a request is validated against, rendered manifests."""

from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from jobs import manifests as job_manifests_module
from jobs.manifests import JobManifestInput
from jobs.models import Job, JobKind
from jobs.states import ACTIVE
from jobs.validation import PoolFacts
from quotas import mig
from quotas.models import GpuPool
from quotas.selectors import quota_rows_for_projects
from tenants.models import Project


def job_list_visible_to(*, user: Any) -> QuerySet[Job]:
    """Jobs of the projects the user belongs to (staff: all), newest first."""
    return (
        Job.objects.visible_to(user)
        .select_related("project", "submitter", "pool")
        .order_by("-created_at", "-id")
    )


def job_events(*, job: Job) -> QuerySet:
    return job.events.order_by("created_at", "id")


def pool_facts_for_project(*, project: Project) -> list[PoolFacts]:
    """The pools the project has quota in, with its maximum usable amount per resource."""
    rows = quota_rows_for_projects(projects=[project])[project.pk]
    maxima: dict[str, dict[str, int]] = {}
    for row in rows:
        maxima.setdefault(row.pool_slug, {})[row.resource] = row.maximum
    pools = GpuPool.objects.filter(slug__in=maxima.keys()).order_by("slug")
    return [
        PoolFacts(
            slug=pool.slug,
            gpu_model=pool.gpu_model,
            gpus_per_node=pool.gpus_per_node,
            node_count=pool.node_count,
            mig_profiles=tuple(pool.mig_profiles or ()),
            default_cpu=pool.default_cpu,
            default_memory=pool.default_memory,
            maximum=maxima[pool.slug],
        )
        for pool in pools
    ]


def runtime_class() -> str:
    return str(getattr(settings, "PORTAL_RUNTIME_CLASS", "") or "")


def manifest_input_for_job(job: Job, *, job_id: int | None = None) -> JobManifestInput:
    project = job.project
    return JobManifestInput(
        job_id=job.pk if job_id is None else job_id,
        name=job.name,
        project_slug=project.slug,
        namespace=project.namespace,
        kind=job.kind,
        backend=job.backend,
        image=job.image,
        command=tuple(job.command or ()),
        env=dict(job.env or {}),
        gpus=job.gpus,
        mig_resource=mig.resource_name(job.mig_profile) if job.kind == JobKind.MIG else "",
        replicas=job.replicas,
        cpu=job.cpu,
        memory=job.memory,
        priority=job.priority,
        max_runtime_seconds=job.max_runtime_minutes * 60,
        node_selector=dict(job.pool.node_labels or {}) if job.pool_id else {},
        runtime_class=runtime_class(),
    )


def job_manifests(job: Job, *, job_id: int | None = None) -> list[dict[str, Any]]:
    """The Kubernetes objects of a job exactly as the reconciler applies them."""
    return job_manifests_module.build_job_manifests(manifest_input_for_job(job, job_id=job_id))


def jobs_to_resync() -> QuerySet[Job]:
    """Every job the periodic resync looks at: active ones and cancelled ones not yet cleaned."""
    from django.db.models import Q

    return Job.objects.filter(Q(state__in=ACTIVE) | Q(cleanup_pending=True)).order_by("id")
