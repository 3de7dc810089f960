"""The simulation's inputs from the portal's own tables (no cluster calls), and the forecasts.

The snapshot is what the watcher keeps current: active jobs with their state and when they
started, the quotas, the pools and the priority classes. Expected run times come from the
submitter's history of similar finished jobs (planner.estimates).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Min, Q
from django.utils import timezone

from jobs.models import Job, JobKind
from jobs.states import ACTIVE, JobState
from planner import estimates
from planner import simulation as sim
from quotas import arithmetic
from quotas.manifests import PrioritySpec, preemption_policy
from quotas.models import DepartmentQuota, GpuPool, PriorityClass
from quotas.priority_defaults import PRIORITY_VALUES
from quotas.selectors import quota_entries

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
        capacity = {arithmetic.FULL_GPU: max(0, pool.total_gpus - subscription.mig_gpus)}
        capacity.update(subscription.mig_instances)
        out.append(sim.Pool(slug=pool.slug, capacity=capacity))
    return tuple(out)


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
    )


def active_jobs() -> list[Job]:
    return list(
        Job.objects.filter(state__in=ACTIVE)
        .select_related("project__department", "pool")
        .only(
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
    )


def cluster_snapshot(
    *, inputs: Inputs | None = None, extra_submitters: Iterable[int] = ()
) -> tuple[sim.Snapshot, dict[SimilarKey, list[float]], Inputs]:
    """The cluster now: running jobs (with expected ends) and queued ones, in one snapshot."""
    inputs = inputs or planner_inputs()
    jobs = active_jobs()
    history = run_history(
        submitter_ids={j.submitter_id for j in jobs} | set(extra_submitters), now=inputs.now
    )
    sim_jobs = []
    for job in jobs:
        started = job.state in STARTED_STATES
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
            )
        )
    snapshot = sim.Snapshot(
        now=inputs.now.timestamp(),
        pools=inputs.pools,
        quotas=inputs.quotas,
        caps=inputs.caps,
        jobs=tuple(sim_jobs),
        preemption=inputs.preemption,
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


def forecast_for_queued(job: Job) -> sim.Forecast | None:
    """The forecast of a waiting job (its page), None when it is not waiting."""
    if job.state in STARTED_STATES or job.is_terminal:
        return None
    snapshot, _, _ = cluster_snapshot()
    probe = next((j for j in snapshot.jobs if j.key == str(job.pk)), None)
    if probe is None:
        return None
    return sim.forecast(snapshot, probe)
