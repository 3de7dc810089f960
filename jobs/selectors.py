"""Reads of jobs: visibility, the pool facts a request is validated against, rendered manifests."""

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet, Sum

from credentials.models import Credential
from jobs import fractions, secret_refs
from jobs import manifests as job_manifests_module
from jobs.manifests import JobManifestInput
from jobs.models import Job, JobKind, JobPod, QueueUsage
from jobs.mounts import default_shm_bytes
from jobs.states import ACTIVE
from jobs.validation import PoolFacts, format_quantity, parse_quantity
from quotas import arithmetic, mig
from quotas.manifests import KAI_NODE_POOL_LABEL
from quotas.models import (
    DepartmentQuota,
    GpuPool,
    PriorityClass,
    ProjectQuota,
    gpu_memory_from_model,
)
from tenants.models import Membership, PodSecurity, Project
from tenants.permissions import WRITER_ROLES


def job_list_visible_to(*, user: Any) -> QuerySet[Job]:
    """Jobs of the projects the user belongs to (staff: all), newest first."""
    return (
        Job.objects.visible_to(user)
        .select_related("project", "submitter", "pool")
        .order_by("-created_at", "-id")
    )


class WritableProjects(dict):
    """{project id: may the user read env values}, answered for every project at once."""

    def __init__(self, *, staff: bool, writable: set[int]):
        super().__init__()
        self.staff = staff
        self.writable = writable

    def __contains__(self, project_id: object) -> bool:
        return True

    def __getitem__(self, project_id: int) -> bool:
        return self.staff or project_id in self.writable


def writable_project_ids(*, user: Any) -> WritableProjects:
    """The projects whose env values the user may read (writer roles; staff: all), one query."""
    if not getattr(user, "is_authenticated", False):
        return WritableProjects(staff=False, writable=set())
    if user.is_staff and user.is_active:
        return WritableProjects(staff=True, writable=set())
    ids = Membership.objects.filter(user=user, role__in=sorted(WRITER_ROLES)).values_list(
        "project_id", flat=True
    )
    return WritableProjects(staff=False, writable=set(ids))


def job_events(*, job: Job) -> QuerySet:
    return job.events.order_by("created_at", "id")


def pool_facts_for_project(*, project: Project) -> list[PoolFacts]:
    """The pools the project has quota in, with its maximum usable amount per resource.

    Two flat queries (the department's quotas with their pools, and its caps); the maximum comes
    from quotas.arithmetic like everywhere else. This runs on every submission, so it avoids the
    aggregate queries a quota page can afford.
    """
    rows = list(
        ProjectQuota.objects.filter(project__department_id=project.department_id)
        .order_by()
        .values_list(
            "project_id",
            "pool_id",
            "resource",
            "nominal",
            "borrowing_limit",
            "pool__slug",
            "pool__gpu_model",
            "pool__gpus_per_node",
            "pool__node_count",
            "pool__mig_profiles",
            "pool__default_cpu",
            "pool__default_memory",
            "pool__max_shm_size",
            "pool__max_termination_grace_seconds",
            "pool__scheduler",
            "pool__kai_fractions_allowed",
            "pool__kai_fraction_step",
            "pool__gpu_memory_mib",
        )
    )
    caps = {
        (pool_id, resource): limit
        for pool_id, resource, limit in DepartmentQuota.objects.filter(
            department_id=project.department_id
        ).values_list("pool_id", "resource", "limit")
    }
    cohort: dict[tuple[int, str], int] = {}
    for _, pool_id, resource, nominal, *_rest in rows:
        cohort[(pool_id, resource)] = cohort.get((pool_id, resource), 0) + nominal
    facts: dict[int, PoolFacts] = {}
    for project_id, pool_id, resource, nominal, borrowing, *pool in rows:
        if project_id != project.pk:
            continue
        slug, model, per_node, nodes, profiles, cpu, memory, max_shm, max_grace, *kai = pool
        scheduler, fractions, step, gpu_memory = kai
        fact = facts.setdefault(
            pool_id,
            PoolFacts(
                slug=slug,
                gpu_model=model,
                gpus_per_node=per_node,
                node_count=nodes,
                mig_profiles=tuple(profiles or ()),
                default_cpu=cpu,
                default_memory=memory,
                max_shm_size=max_shm,
                max_termination_grace_seconds=max_grace,
                maximum={},
                guaranteed={},
                scheduler=scheduler,
                fractions_allowed=scheduler == "kai" and fractions,
                fraction_step=step,
                gpu_memory_mib=gpu_memory or gpu_memory_from_model(model),
            ),
        )
        usable = arithmetic.usable_amount(
            nominal=nominal,
            borrowing_limit=borrowing,
            cohort_nominal=cohort[(pool_id, resource)],
            department_cap=caps.get((pool_id, resource)),
        )
        fact.maximum[resource] = usable.maximum
        fact.guaranteed[resource] = usable.guaranteed
    return sorted(facts.values(), key=lambda f: f.slug)


def credential_facts_for_project(*, project: Project) -> dict[str, secret_refs.CredentialFacts]:
    """The project's credentials by name: kind, key names and registry server (never values)."""
    return {
        name: secret_refs.CredentialFacts(
            name=name, kind=kind, keys=tuple(keys or ()), server=server
        )
        for name, kind, keys, server in Credential.objects.filter(project=project)
        .order_by("name")
        .values_list("name", "kind", "keys", "server")
    }


def _pull_secrets(job: Job) -> tuple[str, ...]:
    registry_logins = [
        secret_refs.CredentialFacts(name=name, kind=secret_refs.REGISTRY_KIND, server=server)
        for name, server in Credential.objects.filter(
            project_id=job.project_id, kind=secret_refs.REGISTRY_KIND
        ).values_list("name", "server")
    ]
    return secret_refs.pull_secrets_for(job.image, registry_logins)


def runtime_class() -> str:
    return str(getattr(settings, "PORTAL_RUNTIME_CLASS", "") or "")


def _pool_labels(
    job: Job,
) -> tuple[tuple[str, ...], tuple[dict[str, str], ...], tuple[dict[str, str], ...]]:
    """The job's eligible pools, their node labels and the project's other pools' (slug order)."""
    eligible = list(job.eligible_pools or ())
    if not eligible:
        return (), (), ()
    pools = {
        slug: dict(labels or {})
        for slug, labels in GpuPool.objects.filter(
            Q(slug__in=eligible) | Q(project_quotas__project_id=job.project_id)
        )
        .distinct()
        .values_list("slug", "node_labels")
    }
    slugs = tuple(slug for slug in sorted(eligible) if slug in pools)
    others = tuple(pools[slug] for slug in sorted(pools) if slug not in eligible)
    return slugs, tuple(pools[slug] for slug in slugs), others


def _kai_facts(job: Job, eligible_labels: tuple[dict[str, str], ...]) -> dict[str, Any]:
    """What only a KAI job's manifests need: its GPU share, whether its priority class may be
    preempted (KAI's preemptibility label), and its pool's KAI shard."""
    if job.backend != "kai":
        return {}
    classes = PriorityClass.objects.filter(name=job.priority)
    preemptible = classes.values_list("preemptible", flat=True).first()
    labels = eligible_labels[0] if eligible_labels else {}
    return {
        "gpu_fraction": format(job.gpu_fraction.normalize(), "f") if job.gpu_fraction else "",
        "gpu_memory": job.gpu_memory or 0,
        "preemptible": preemptible,
        "kai_node_pool": labels.get(KAI_NODE_POOL_LABEL, ""),
    }


def manifest_input_for_job(job: Job, *, job_id: int | None = None) -> JobManifestInput:
    project = job.project
    eligible, eligible_labels, other_labels = _pool_labels(job)
    plain_env, secret_env = secret_refs.resolve_env(job.env or {})
    return JobManifestInput(
        job_id=job.pk if job_id is None else job_id,
        name=job.name,
        project_slug=project.slug,
        namespace=project.namespace,
        kind=job.kind,
        backend=job.backend,
        image=job.image,
        command=tuple(job.command or ()),
        env=plain_env,
        secret_env=secret_env,
        secret_files=secret_refs.resolve_files(job.secret_files or ()),
        image_pull_secrets=_pull_secrets(job),
        gpus=job.gpus,
        mig_resource=mig.resource_name(job.mig_profile) if job.kind == JobKind.MIG else "",
        replicas=job.replicas,
        cpu=job.cpu,
        memory=job.memory,
        priority=job.priority,
        max_runtime_seconds=job.max_runtime_minutes * 60,
        node_selector=dict(job.pool.node_labels or {}) if job.pool_id else {},
        runtime_class=runtime_class(),
        run_as_uid=project.run_as_uid if project.pod_security == PodSecurity.RESTRICTED else None,
        eligible_pools=eligible,
        eligible_pool_labels=eligible_labels,
        other_pool_labels=other_labels,
        mounts=tuple(dict(m) for m in job.mounts or ()),
        shm_size=job.shm_size or _half_memory(job.memory),
        termination_grace_seconds=job.termination_grace_seconds,
        checkpoint_dir=job.checkpoint_dir,
        checkpoint_claim=job.checkpoint_claim,
        **_kai_facts(job, eligible_labels),
    )


def _half_memory(memory: str) -> str:
    """The /dev/shm size of a job stored before shm_size existed: half its memory request."""
    amount = parse_quantity(memory) if memory else None
    if not amount:
        return ""
    return format_quantity(default_shm_bytes(amount, amount), "memory")


def job_manifests(job: Job, *, job_id: int | None = None) -> list[dict[str, Any]]:
    """The Kubernetes objects of a job exactly as the reconciler applies them."""
    return job_manifests_module.build_job_manifests(manifest_input_for_job(job, job_id=job_id))


def jobs_to_resync() -> QuerySet[Job]:
    """Every job the periodic resync looks at: active ones and cancelled ones not yet cleaned."""
    return Job.objects.filter(Q(state__in=ACTIVE) | Q(cleanup_pending=True)).order_by("id")


def projects_to_resync() -> list[tuple[int, str]]:
    """(project id, namespace) of every project with a job the resync looks at, by namespace."""
    ids = jobs_to_resync().order_by().values("project_id").distinct()
    return list(
        Project.objects.filter(pk__in=ids).order_by("namespace").values_list("pk", "namespace")
    )


# --- quota use as the cluster reports it (rows kept by the cluster watcher) ------------------


def usage_rows_for_projects(*, projects: list[Project]) -> dict[int, list[Any]]:
    """{project id: [QueueUsage, ...]} ordered by pool and resource."""
    out: dict[int, list[Any]] = {p.pk: [] for p in projects}
    rows = QueueUsage.objects.filter(project__in=[p.pk for p in projects]).order_by(
        "pool", "resource", "queue_kind"
    )
    for row in rows:
        out.setdefault(row.project_id, []).append(row)
    return out


def gpus_in_use_per_pool() -> dict[str, int]:
    """Whole GPUs in use per pool slug, from the Kueue (by flavor) and Volcano (one queue per
    pool) usage rows the watcher keeps."""
    totals = (
        QueueUsage.objects.filter(resource="gpu")
        .exclude(pool="")
        .values("pool")
        .annotate(n=Sum("in_use"))
        .order_by()
    )
    return {row["pool"]: int(row["n"] or 0) for row in totals}


# --- GPU fractions (issue 25) ----------------------------------------------------------------


def fraction_shares(job_ids: Iterable[int]) -> dict[int, float]:
    """{job id: the part of one GPU it holds} for the fractional jobs among `job_ids`."""
    rows = list(
        Job.objects.filter(pk__in=list(job_ids))
        .filter(Q(gpu_fraction__isnull=False) | Q(gpu_memory__isnull=False))
        .values_list("pk", "gpu_fraction", "gpu_memory", "pool__slug", "eligible_pools")
    )
    if not rows:
        return {}
    memory = {
        p.slug: p.gpu_memory
        for p in GpuPool.objects.filter(scheduler="kai").only("slug", "gpu_model", "gpu_memory_mib")
    }
    out = {}
    for pk, fraction, gpu_memory, pool, eligible in rows:
        slug = pool or next(iter(eligible or ()), "")
        share = fractions.job_share(fraction, gpu_memory, memory.get(slug))
        if share is not None:
            out[pk] = share
    return out


def pods_with_shares(*, job: Job) -> list[JobPod]:
    """The job's pods; a fraction pod carries `share_text` ("0.5 of GPU-… (shared with 1 other
    job)"), counting the other jobs that had pods on the same shared GPU (KAI GPU group)."""
    pods = list(job.pod_records.all())
    groups = {p.gpu_group for p in pods if p.gpu_group}
    if not groups:
        return pods
    share = fraction_shares([job.pk]).get(job.pk)
    if share is None:
        return pods
    others: dict[str, set[int]] = {}
    for group, job_id in (
        JobPod.objects.filter(gpu_group__in=groups)
        .exclude(job_id=job.pk)
        .values_list("gpu_group", "job_id")
        .distinct()
    ):
        others.setdefault(group, set()).add(job_id)
    for pod in pods:
        if pod.gpu_group:
            uuid = next(iter(pod.gpu_uuids or ()), "")
            pod.share_text = fractions.share_text(share, uuid, len(others.get(pod.gpu_group, ())))
    return pods
