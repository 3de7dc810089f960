"""The simulation's inputs from the portal's own tables (no cluster calls), and the forecasts.

The snapshot is what the watcher keeps current: active jobs with their state and when they
started, the quotas, the pools and the priority classes. Expected run times come from the
submitter's history of similar finished jobs (planner.estimates).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Count, Min, Q
from django.utils import timezone

from gpumetrics.models import JobGpuSummary
from jobs.models import Job, JobKind
from jobs.states import ACTIVE, JobState
from planner import estimates, rightsizing, whatif
from planner import simulation as sim
from planner.whatif import ReplayJob
from quotas import arithmetic
from quotas.manifests import PrioritySpec, preemption_policy
from quotas.models import DepartmentQuota, GpuPool, PriorityClass, resource_error
from quotas.priority_defaults import PRIORITY_VALUES
from quotas.selectors import quota_entries
from tenants.models import Project

HISTORY_DAYS = 30
HISTORY_RUNS = 20  # the latest runs of one kind per submitter
PROBE_KEY = "probe"
# States whose job holds quota: its run started (Admitted is counted as started: pods starting).
STARTED_STATES = frozenset({JobState.ADMITTED, JobState.RUNNING})

SimilarKey = tuple[int, str, str, int, int, str]


def similar_key(job: Job) -> SimilarKey:
    """Jobs that count as "the same" for the history: submitter, image, kind and size."""
    return (job.submitter_id, job.image, job.kind, job.gpus, job.replicas, job.mig_profile or "")


def job_resource(job: Job) -> tuple[str, int]:
    """(resource, amount): whole GPUs × pods, or instances of the job's MIG profile."""
    if job.kind == JobKind.MIG and job.mig_profile:
        return job.mig_profile, job.pods
    return arithmetic.FULL_GPU, max(0, job.gpus) * job.pods


def run_history(*, submitter_ids: Iterable[int], now: datetime) -> dict[SimilarKey, list[float]]:
    """Run times (seconds) of the submitters' recent successful jobs, by similar_key."""
    rows = (
        Job.objects.filter(
            submitter_id__in=set(submitter_ids),
            state=JobState.SUCCEEDED,
            state_changed_at__gte=now - timedelta(days=HISTORY_DAYS),
        )
        .annotate(started=Min("events__created_at", filter=Q(events__to_state=JobState.RUNNING)))
        .order_by("-state_changed_at")
        .values_list(
            "submitter_id",
            "image",
            "kind",
            "gpus",
            "replicas",
            "mig_profile",
            "started",
            "state_changed_at",
        )
    )
    history: dict[SimilarKey, list[float]] = defaultdict(list)
    for submitter, image, kind, gpus, replicas, profile, started, ended in rows:
        if started is None:
            continue
        runs = history[(submitter, image, kind, gpus, replicas, profile or "")]
        if len(runs) < HISTORY_RUNS:
            runs.append((ended - started).total_seconds())
    return history


def priority_values() -> dict[str, int]:
    values = dict(PRIORITY_VALUES)
    values.update(dict(PriorityClass.objects.values_list("name", "value")))
    return values


def preemption() -> sim.Preemption:
    """quotas.manifests.preemption_policy (what the ClusterQueues say) as simulation values."""
    specs = tuple(
        PrioritySpec(name=name, value=value, preemptible=preemptible)
        for name, value, preemptible in PriorityClass.objects.values_list(
            "name", "value", "preemptible"
        )
    )
    policy = preemption_policy(specs)
    if policy["withinClusterQueue"] == "Never":
        return sim.Preemption(enabled=False)
    return sim.Preemption(
        enabled=True, borrow_threshold=policy["borrowWithinCohort"]["maxPriorityThreshold"]
    )


def pool_capacities(
    pools: Iterable[GpuPool], entries: list[arithmetic.QuotaEntry]
) -> tuple[sim.Pool, ...]:
    """Each pool's capacity: its MIG instances as its quotas promise them (GPUs partitioned one
    profile per GPU, quotas.arithmetic.pool_subscription), the other GPUs whole."""
    by_pool: dict[str, list[arithmetic.QuotaEntry]] = defaultdict(list)
    for entry in entries:
        by_pool[entry.pool].append(entry)
    out = []
    for pool in pools:
        subscription = arithmetic.pool_subscription(
            pool=pool.slug,
            gpu_model=pool.gpu_model,
            capacity_gpus=pool.total_gpus,
            quotas=by_pool[pool.slug],
        )
        # a time-slicing or MPS pool holds replicas_per_gpu one-share jobs per GPU
        whole = max(0, pool.total_gpus - subscription.mig_gpus) * pool.replicas_per_gpu
        capacity = {arithmetic.FULL_GPU: whole}
        capacity.update(subscription.mig_instances)
        # Whole GPUs placed node by node (an 8-GPU pod needs a whole node), where every GPU is
        # a whole one: the pool's nodes, named as placeholders until running pods name them.
        nodes: tuple[tuple[str, int], ...] = ()
        if not subscription.mig_gpus and pool.replicas_per_gpu == 1:
            nodes = tuple(
                (placeholder_node(pool.slug, i), pool.gpus_per_node) for i in range(pool.node_count)
            )
        out.append(sim.Pool(slug=pool.slug, capacity=capacity, nodes=nodes))
    return tuple(out)


def placeholder_node(pool: str, index: int) -> str:
    return f"~{pool}-{index:04d}"  # "~" sorts after real names: they are filled first


def with_node_names(pools: tuple[sim.Pool, ...], seen: dict[str, set[str]]) -> tuple:
    """The pools with the nodes running pods were seen on (``seen``: pool → node names) in
    place of placeholders, so a running job's pods count on the node they are on."""
    out = []
    for pool in pools:
        names = sorted(seen.get(pool.slug, ()))
        if not pool.nodes or not names:
            out.append(pool)
            continue
        gpus = pool.nodes[0][1]
        count = max(len(pool.nodes), len(names))
        nodes = [(name, gpus) for name in names]
        nodes += [(placeholder_node(pool.slug, i), gpus) for i in range(len(names), count)]
        out.append(replace(pool, nodes=tuple(nodes)))
    return tuple(out)


def running_pod_nodes(job_ids: Iterable[int]) -> dict[int, tuple[str, ...]]:
    """The nodes of each job's live pods (one entry per pod), from the watcher's pod records."""
    from jobs.models import JobPod

    out: dict[int, list[str]] = defaultdict(list)
    rows = (
        JobPod.objects.filter(job_id__in=list(job_ids), deleted=False, finished_at__isnull=True)
        .exclude(node="")
        .order_by("job_id", "rank", "name")
        .values_list("job_id", "node")
    )
    for job_id, node in rows:
        out[job_id].append(node)
    return {job_id: tuple(nodes) for job_id, nodes in out.items()}


@dataclass(frozen=True)
class Inputs:
    """Everything but the jobs, shared by the forecast, the advice and the what-if."""

    now: datetime
    pools: tuple[sim.Pool, ...]
    quotas: tuple[arithmetic.QuotaEntry, ...]
    caps: tuple[arithmetic.DepartmentCap, ...]
    priorities: dict[str, int]
    preemption: sim.Preemption
    departments: dict[str, str]  # project slug → department slug


def planner_inputs(*, now: datetime | None = None) -> Inputs:
    entries = quota_entries()
    caps = tuple(
        arithmetic.DepartmentCap(department=d, pool=p, resource=r, limit=limit)
        for d, p, r, limit in DepartmentQuota.objects.values_list(
            "department__slug", "pool__slug", "resource", "limit"
        )
    )
    return Inputs(
        now=now or timezone.now(),
        pools=pool_capacities(GpuPool.objects.order_by("slug"), entries),
        quotas=tuple(entries),
        caps=caps,
        priorities=priority_values(),
        preemption=preemption(),
        departments={e.project: e.department for e in entries},
    )


def sim_job(
    job: Job,
    *,
    key: str,
    inputs: Inputs,
    history: dict[SimilarKey, list[float]],
    project_slug: str,
    department_slug: str,
    started_at: float | None = None,
    submitted_at: float | None = None,
    eligible_at: float = 0.0,
    nodes: tuple[str, ...] | None = None,
    placed: bool = True,
) -> sim.SimJob:
    resource, amount = job_resource(job)
    estimate = estimates.estimate_duration(
        max_runtime_seconds=job.max_runtime_minutes * 60.0,
        history=history.get(similar_key(job), ()),
    )
    pools = tuple(job.eligible_pools or ([job.pool.slug] if job.pool_id else []))
    return sim.SimJob(
        key=key,
        project=project_slug,
        department=department_slug,
        pools=tuple(sorted(pools)),  # the ClusterQueue lists its flavors by pool slug
        resource=resource,
        amount=amount,
        priority=inputs.priorities.get(job.priority, 0),
        submitted_at=submitted_at if submitted_at is not None else inputs.now.timestamp(),
        duration_high=estimate.high,
        duration_low=estimate.low,
        started_at=started_at,
        eligible_at=eligible_at,
        pods=job.pods,
        nodes=nodes,
        placed=placed,
    )


_SNAPSHOT_FIELDS = (
    "id",
    "project__slug",
    "project__department__slug",
    "submitter_id",
    "image",
    "kind",
    "gpus",
    "replicas",
    "mig_profile",
    "pool__slug",
    "eligible_pools",
    "priority",
    "max_runtime_minutes",
    "state",
    "state_changed_at",
    "created_at",
)


def active_jobs() -> list[Job]:
    return list(
        Job.objects.filter(state__in=ACTIVE)
        .select_related("project__department", "pool")
        .only(*_SNAPSHOT_FIELDS)
    )


def recent_jobs(*, now: datetime, window: timedelta) -> list[Job]:
    """The jobs submitted in the window before ``now``, whatever became of them: the rate of
    submissions the forecast expects to go on."""
    return list(
        Job.objects.filter(created_at__gte=now - window, created_at__lt=now)
        .select_related("project__department", "pool")
        .only(*_SNAPSHOT_FIELDS)
    )


def cluster_snapshot(
    *, inputs: Inputs | None = None, extra_submitters: Iterable[int] = ()
) -> tuple[sim.Snapshot, dict[SimilarKey, list[float]], Inputs]:
    """The cluster now: running jobs (with expected ends) and queued ones, in one snapshot."""
    inputs = inputs or planner_inputs()
    jobs = active_jobs()
    window = timedelta(minutes=settings.PORTAL_FORECAST_ARRIVAL_WINDOW_MINUTES)
    recent = recent_jobs(now=inputs.now, window=window) if window else []
    history = run_history(
        submitter_ids={j.submitter_id for j in (*jobs, *recent)} | set(extra_submitters),
        now=inputs.now,
    )
    pod_nodes = running_pod_nodes(j.pk for j in jobs if j.state in STARTED_STATES)
    seen: dict[str, set[str]] = defaultdict(set)
    sim_jobs = []
    for job in jobs:
        started = job.state in STARTED_STATES
        nodes = pod_nodes.get(job.pk)
        if nodes and job.pool_id:
            seen[job.pool.slug].update(nodes)
        sim_jobs.append(
            sim_job(
                job,
                key=str(job.pk),
                inputs=inputs,
                history=history,
                project_slug=job.project.slug,
                department_slug=job.project.department.slug,
                started_at=job.state_changed_at.timestamp() if started else None,
                submitted_at=job.created_at.timestamp(),
                nodes=nodes,
                # Admitted with no pod on a node yet: it holds its quota and waits for room.
                placed=job.state == JobState.RUNNING or bool(nodes),
            )
        )
    snapshot = sim.Snapshot(
        now=inputs.now.timestamp(),
        pools=with_node_names(inputs.pools, seen),
        quotas=inputs.quotas,
        caps=inputs.caps,
        jobs=tuple(sim_jobs),
        preemption=inputs.preemption,
        recent=tuple(
            sim_job(
                job,
                key=f"recent-{job.pk}",
                inputs=inputs,
                history=history,
                project_slug=job.project.slug,
                department_slug=job.project.department.slug,
                submitted_at=job.created_at.timestamp(),
            )
            for job in recent
        ),
        arrival_window=window.total_seconds(),
    )
    return snapshot, history, inputs


def probe_job(
    job: Job,
    *,
    inputs: Inputs,
    history: dict[SimilarKey, list[float]],
    key: str = PROBE_KEY,
    eligible_at: float = 0.0,
) -> sim.SimJob:
    """An unsaved job (a submission being typed, or an alternative) as a simulation job."""
    return sim_job(
        job,
        key=key,
        inputs=inputs,
        history=history,
        project_slug=job.project.slug,
        department_slug=job.project.department.slug,
        eligible_at=eligible_at,
    )


def forecast_for_unsaved(job: Job) -> sim.Forecast:
    """The forecast of a job not submitted yet (the form's line, the dry run, the API)."""
    snapshot, history, inputs = cluster_snapshot(extra_submitters=[job.submitter_id])
    return sim.forecast(snapshot, probe_job(job, inputs=inputs, history=history))


def forecast_dict(job: Job | None) -> dict | None:
    """forecast_for_unsaved as the API's JSON (None without a job)."""
    return None if job is None else forecast_for_unsaved(job).as_dict()


def forecast_for_queued(job: Job) -> sim.Forecast | None:
    """The forecast of a waiting job (its page), None when it is not waiting."""
    if job.state in STARTED_STATES or job.is_terminal:
        return None
    snapshot, _, _ = cluster_snapshot()
    probe = next((j for j in snapshot.jobs if j.key == str(job.pk)), None)
    if probe is None:
        return None
    return sim.forecast(snapshot, probe)


def period_replay_jobs(*, start: datetime, end: datetime, inputs: Inputs) -> list[ReplayJob]:
    """The jobs that ran (or wait) in a period, as the what-if replays them: submitted when they
    were, running as long as they really ran. Jobs cancelled before they started are left out
    (they used nothing); a job still running counts as running until now."""
    now = inputs.now
    rows = (
        Job.objects.filter(created_at__lt=end)
        .filter(Q(state__in=ACTIVE) | Q(state_changed_at__gte=start))
        .annotate(
            started=Min("events__created_at", filter=Q(events__to_state=JobState.RUNNING)),
            preempted=Count("events", filter=Q(events__to_state=JobState.PREEMPTED)),
        )
        .select_related("project__department", "pool")
        .order_by("created_at", "id")
    )
    out: list[ReplayJob] = []
    for job in rows:
        if job.started is None and job.state not in ACTIVE:
            continue
        resource, amount = job_resource(job)
        pools = tuple(sorted(job.eligible_pools or ([job.pool.slug] if job.pool_id else [])))
        if job.started is None:
            run = job.max_runtime_minutes * 60.0  # still waiting: its longest run
            ended = None
        else:
            ended = job.state_changed_at if job.is_terminal else now
            run = max(0.0, (ended - job.started).total_seconds())
        running_at_start = job.started is not None and job.started < start
        out.append(
            ReplayJob(
                job=sim.SimJob(
                    key=str(job.pk),
                    project=job.project.slug,
                    department=job.project.department.slug,
                    pools=pools,
                    resource=resource,
                    amount=amount,
                    priority=inputs.priorities.get(job.priority, 0),
                    submitted_at=job.created_at.timestamp(),
                    duration_high=run,
                    started_at=job.started.timestamp() if running_at_start else None,
                    pods=job.pods,  # a gang's pods find nodes one by one
                ),
                actual_start=job.started.timestamp() if job.started else None,
                actual_end=ended.timestamp() if ended else None,
                actual_preemptions=job.preempted,
            )
        )
    return out


def proposal_entries(rows: Iterable[dict]) -> list[arithmetic.QuotaEntry]:
    """Proposed quota rows (project, pool, resource, nominal, borrowing_limit) as QuotaEntry;
    a ValidationError naming the row and field for an unknown project, pool or resource."""
    rows = list(rows)
    projects = {
        slug: department
        for slug, department in Project.objects.filter(
            slug__in=[r["project"] for r in rows]
        ).values_list("slug", "department__slug")
    }
    pools = {p.slug: p for p in GpuPool.objects.filter(slug__in=[r["pool"] for r in rows])}
    errors: dict[str, list[str]] = {}
    entries = []
    for index, row in enumerate(rows):
        if row["project"] not in projects:
            errors[f"quotas.{index}.project"] = [f"No project {row['project']!r}."]
            continue
        pool = pools.get(row["pool"])
        if pool is None:
            errors[f"quotas.{index}.pool"] = [f"No pool {row['pool']!r}."]
            continue
        problem = resource_error(pool, row["resource"])
        if problem:
            errors[f"quotas.{index}.resource"] = [problem]
            continue
        entries.append(
            arithmetic.QuotaEntry(
                project=row["project"],
                department=projects[row["project"]],
                pool=pool.slug,
                resource=row["resource"],
                nominal=row["nominal"],
                borrowing_limit=row["borrowing_limit"],
            )
        )
    if errors:
        raise ValidationError(errors)
    return entries


def whatif_compare(
    *, start: datetime, end: datetime, proposal: list[arithmetic.QuotaEntry]
) -> dict:
    """The period replayed under today's quotas and under the proposal, per project."""
    inputs = planner_inputs()
    jobs = period_replay_jobs(start=start, end=end, inputs=inputs)
    period = (start.timestamp(), end.timestamp())
    rows = whatif.compare(
        jobs=jobs,
        pools=inputs.pools,
        current=inputs.quotas,
        proposal=proposal,
        caps=inputs.caps,
        preemption=inputs.preemption,
        period=period,
    )
    return {
        "start": start.isoformat(),
        "end": end.isoformat(),
        "jobs": len(jobs),
        "proposal": [
            {
                "project": e.project,
                "pool": e.pool,
                "resource": e.resource,
                "nominal": e.nominal,
                "borrowing_limit": e.borrowing_limit,
            }
            for e in proposal
        ],
        "projects": rows,
    }


def quota_table() -> list[dict]:
    """Every project quota as the what-if's editable table rows."""
    return [
        {
            "key": f"{e.project}|{e.pool}|{e.resource}",
            "project": e.project,
            "department": e.department,
            "pool": e.pool,
            "resource": e.resource,
            "nominal": e.nominal,
            "borrowing_limit": e.borrowing_limit,
        }
        for e in sorted(quota_entries(), key=lambda e: (e.department, e.project, e.pool))
    ]


# --- right-sizing -------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobRightsizing:
    evidence: str  # "peak memory 18 GiB of 80 and utilisation 22 %"
    suggestion: rightsizing.Suggestion
    sooner_seconds: float | None  # how much sooner it would have started (None: not known)

    @property
    def text(self) -> str:
        text = f"{self.evidence}: {self.suggestion.describe()}"
        if self.sooner_seconds is not None and self.sooner_seconds >= 60:
            text += f" and would have started {sim.duration_text(self.sooner_seconds)} sooner"
        return text


def _usage(job: Job, summary: JobGpuSummary) -> rightsizing.Usage:
    return rightsizing.Usage(
        gpus=job.gpus,
        pods=job.pods,
        gpu_model=job.pool.gpu_model if job.pool_id else "",
        util_mean=summary.util_mean,
        fb_peak_mib=summary.fb_peak_mib,
        fb_total_mib=summary.fb_total_mib,
        gpu_hours=summary.gpu_hours,
    )


def _job_pool(job: Job) -> GpuPool | None:
    if job.pool_id:
        return job.pool
    return GpuPool.objects.filter(slug__in=job.eligible_pools or []).order_by("slug").first()


def job_rightsizing(job: Job) -> JobRightsizing | None:
    """A finished whole-GPU job's smaller request that would have fit, and how much sooner it
    would have started (the same replay, with the job's request changed)."""
    if job.kind == JobKind.MIG or not job.is_terminal:
        return None
    summary = JobGpuSummary.objects.filter(job=job).first()
    pool = _job_pool(job)
    if summary is None or pool is None:
        return None
    usage = _usage(job, summary)
    usage = rightsizing.Usage(**{**usage.__dict__, "gpu_model": pool.gpu_model})
    suggestion = rightsizing.suggest(usage, offered_profiles=pool.mig_profiles or ())
    if suggestion is None:
        return None
    return JobRightsizing(
        evidence=rightsizing.evidence_text(usage),
        suggestion=suggestion,
        sooner_seconds=_sooner(job, suggestion),
    )


def rightsizing_sentence(job: Job) -> str:
    """'Right-sizing: peak memory … would have fit …' for the job-end message, or ""."""
    found = job_rightsizing(job)
    return f"Right-sizing: {found.text}." if found else ""


def _sooner(job: Job, suggestion: rightsizing.Suggestion) -> float | None:
    """Replay the job's wait with its own request and with the suggestion; the difference."""
    started = (
        job.events.filter(to_state=JobState.RUNNING)
        .order_by("created_at")
        .values_list("created_at", flat=True)
    ).first()
    if started is None or (started - job.created_at).total_seconds() < 60:
        return None
    inputs = planner_inputs(now=started)
    jobs = period_replay_jobs(start=job.created_at, end=started, inputs=inputs)
    key = str(job.pk)
    mine = next((r for r in jobs if r.job.key == key), None)
    if mine is None:
        return None
    if suggestion.kind == "mig":
        changed = replace(mine.job, resource=suggestion.profile, amount=1)
    else:
        changed = replace(mine.job, amount=suggestion.gpus * job.pods)
    starts = []
    for variant in (mine.job, changed):
        snapshot = sim.Snapshot(
            now=job.created_at.timestamp(),
            pools=inputs.pools,
            quotas=inputs.quotas,
            caps=inputs.caps,
            jobs=tuple(variant if r.job.key == key else r.job for r in jobs),
            preemption=inputs.preemption,
        )
        result = sim.simulate(snapshot, stop_when_started=(key,))
        starts.append(result.start(key))
    if starts[0] is None or starts[1] is None:
        return None
    return max(0.0, starts[0] - starts[1])


def project_rightsizing(
    *, project: Project, month: date
) -> tuple[rightsizing.ProjectMonth, list[tuple[Job, rightsizing.Suggestion]]]:
    """The month's finished jobs of a project with metrics: how many GPU-hours could have been
    smaller (whole-GPU jobs; the per-job replay is left to the job page)."""
    following = (month.replace(day=28) + timedelta(days=4)).replace(day=1)
    rows = (
        JobGpuSummary.objects.filter(
            job__project=project,
            job__state__in=[JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED],
            job__state_changed_at__date__gte=month,
            job__state_changed_at__date__lt=following,
        )
        .exclude(job__kind=JobKind.MIG)
        .select_related("job__pool")
    )
    pools = {p.slug: p for p in GpuPool.objects.all()}
    judged: list[tuple[rightsizing.Usage, rightsizing.Suggestion | None]] = []
    oversized: list[tuple[Job, rightsizing.Suggestion]] = []
    for summary in rows:
        job = summary.job
        pool = job.pool or pools.get(sorted(job.eligible_pools or [""])[0])
        if pool is None:
            continue
        usage = rightsizing.Usage(**{**_usage(job, summary).__dict__, "gpu_model": pool.gpu_model})
        suggestion = rightsizing.suggest(usage, offered_profiles=pool.mig_profiles or ())
        judged.append((usage, suggestion))
        if suggestion is not None:
            oversized.append((job, suggestion))
    return rightsizing.project_month(judged), oversized
