"""Pending advice: what the user could submit instead of a waiting job so it starts sooner.

Every alternative is the job's own request with one change (fewer GPUs, another pool, a MIG
profile, a lower priority), validated by the submission's own rules in a dry run (so nothing the
project's quota forbids is ever offered), checked against the member's GPU limit in the project
(governance: a job over it would wait in the portal, so it is not offered) and forecast with the
same simulation, on the cluster as it would be with the original job cancelled. Only the ones
that start now, or much sooner, are offered. Besides, a later start window: from when on the
same request, submitted then, would start at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied

from governance import member_limits
from governance.selectors import (
    effective_limits,
    member_held_requests,
    pools_of,
    request_of_row,
)
from jobs.models import Job, JobKind
from jobs.selectors import pool_facts_for_project
from jobs.services import job_submit
from jobs.submission.again import fields_of_job
from planner import selectors
from planner import simulation as sim
from quotas.arithmetic import FULL_GPU, resource_sort_key
from quotas.models import PriorityClass, PriorityName

MUCH_SOONER = 0.5  # an alternative must at least halve the wait...
AT_LEAST_SECONDS = 10 * 60  # ...and save ten minutes, unless it starts now
MAX_ADVICE = 5
PRIORITY_ORDER = [PriorityName.HIGH, PriorityName.NORMAL, PriorityName.LOW]


@dataclass(frozen=True)
class Alternative:
    label: str  # "1 GPU instead of 4"
    changes: dict[str, Any]  # fields of the request that change
    forecast: sim.Forecast
    request: dict[str, Any] = field(default_factory=dict)  # the whole request, for the API

    @property
    def text(self) -> str:
        when = self.forecast.text
        return f"{self.label}: starts {when}" if when == "now" else f"{self.label}: {when}"

    def submit_query(self, job: Job) -> str:
        """The submit form's query string: the job again, with the changes, replacing it."""
        params: dict[str, Any] = {"again": job.pk, "replaces": job.pk}
        params.update({k: ("" if v is None else v) for k, v in self.changes.items()})
        return urlencode(params)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "text": self.text,
            "changes": self.changes,
            "request": self.request,
            "forecast": self.forecast.as_dict(),
        }


@dataclass(frozen=True)
class StartWindow:
    """The same request, submitted ``after_seconds`` from now or later, starts at once."""

    after_seconds: float

    @property
    def text(self) -> str:
        return (
            f"submitted in {sim.duration_text(self.after_seconds)} or later, the same request "
            "would start at once"
        )

    def as_dict(self) -> dict[str, Any]:
        return {"after_seconds": round(self.after_seconds), "text": self.text}


@dataclass(frozen=True)
class PendingAdvice:
    forecast: sim.Forecast | None
    alternatives: list[Alternative]
    later: StartWindow | None = None


def _sizes_below(gpus: int) -> list[int]:
    sizes, size = [], gpus // 2
    while size >= 1:
        sizes.append(size)
        size //= 2
    if gpus > 1 and 1 not in sizes:
        sizes.append(1)
    return sizes


def candidate_changes(
    job: Job, pools: list, preemptible: set[str] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The one-change alternatives worth checking, as (label, changed fields); ``preemptible``
    names the priority classes that may be preempted."""
    out: list[tuple[str, dict[str, Any]]] = []
    resource = job.mig_profile if job.kind == JobKind.MIG else FULL_GPU
    # MIG profiles the project has quota for, smallest first (a whole-GPU job on one GPU).
    if (job.kind == JobKind.SINGLE and job.gpus == 1) or job.kind == JobKind.MIG:
        profiles = sorted(
            {r for p in pools for r in p.maximum if r != FULL_GPU and p.maximum[r] > 0},
            key=resource_sort_key,
        )
        for profile in profiles:
            if profile != resource:
                out.append(
                    (
                        f"a {profile} MIG slice",
                        {"kind": JobKind.MIG, "mig_profile": profile, "gpus": None},
                    )
                )
    if job.kind == JobKind.SINGLE:
        for size in _sizes_below(job.gpus):
            plural = "GPU" if size == 1 else "GPUs"
            out.append((f"{size} {plural} instead of {job.gpus}", {"gpus": size}))
    if job.kind == JobKind.GANG:
        for replicas in _sizes_below(job.replicas):
            out.append((f"{replicas} pods instead of {job.replicas}", {"replicas": replicas}))
    # Another pool: one the project has quota in for this resource, outside the job's choice.
    current = set(job.eligible_pools or [])
    for pool in pools:
        if pool.slug not in current and pool.maximum.get(resource, 0) > 0:
            out.append((f"pool {pool.slug}", {"pool": pool.slug}))
    # A lower priority: rarely sooner, but checked like the rest; the label says when that
    # class may be preempted (the original's may not be).
    if job.priority in PRIORITY_ORDER:
        for lower in PRIORITY_ORDER[PRIORITY_ORDER.index(job.priority) + 1 :]:
            note = " (may be preempted)" if lower in (preemptible or ()) else ""
            out.append((f"priority {lower}{note}", {"priority": str(lower)}))
    return out


def _much_sooner(candidate: sim.Forecast, original: sim.Forecast | None) -> bool:
    if candidate.starts_now:
        return original is None or not original.starts_now
    if candidate.high is None:
        return False
    if original is None or original.high is None:
        return True
    return (
        candidate.high <= original.high * MUCH_SOONER
        and original.high - candidate.high >= AT_LEAST_SECONDS
    )


def within_member_limits(*, unsaved: Job, actor: Any, replacing: Job) -> bool:
    """Whether the actor's GPU limits in the project (governance) let the alternative go to the
    cluster at once, counting what they hold without the job it replaces."""
    row = {
        "pool__slug": unsaved.pool.slug if unsaved.pool_id else None,
        "eligible_pools": unsaved.eligible_pools,
        "gpus": unsaved.gpus or 0,
        "replicas": unsaved.replicas,
        "kind": unsaved.kind,
        "mig_profile": unsaved.mig_profile,
    }
    pools = pools_of(row["pool__slug"], row["eligible_pools"])
    limits = effective_limits(project_id=unsaved.project_id, user_id=actor.pk, pools=pools)
    if not limits:
        return True
    held = member_held_requests(
        project_id=unsaved.project_id,
        user_id=actor.pk,
        pools=[limit.pool for limit in limits],
        exclude_job_id=replacing.pk,
    )
    request = request_of_row(row)
    return all(
        member_limits.check_limit(
            pool=limit.pool,
            gpu_model=limit.gpu_model,
            limit=limit.max_gpus,
            held=held.get(limit.pool, []),
            job=request,
        ).fits
        for limit in limits
    )


def pending_advice(*, job: Job, actor: Any) -> PendingAdvice:
    """The waiting job's forecast and the alternatives that start now or much sooner."""
    snapshot, history, inputs = selectors.cluster_snapshot(extra_submitters=[job.submitter_id])
    key = str(job.pk)
    own = next((j for j in snapshot.jobs if j.key == key), None)
    if own is None or own.started_at is not None:
        return PendingAdvice(forecast=None, alternatives=[])
    original = sim.forecast(snapshot, own)
    # The same snapshot (the expected submissions included) without the job itself.
    without = replace(snapshot, jobs=tuple(j for j in snapshot.jobs if j.key != key))
    base = fields_of_job(job)
    pools = pool_facts_for_project(project=job.project)
    found: list[Alternative] = []
    preemptible = set(PriorityClass.objects.filter(preemptible=True).values_list("name", flat=True))
    for label, changes in candidate_changes(job, pools, preemptible):
        request = {**base, **changes, "name": ""}
        if "gpus" in changes or "kind" in changes:
            request.update(cpu="", memory="")  # the pool's defaults for the new size
        if changes.get("kind") == JobKind.MIG:
            request.pop("gpus", None)
        try:
            outcome = job_submit(actor=actor, project=job.project, data=request, dry_run=True)
        except PermissionDenied:
            return PendingAdvice(forecast=original, alternatives=[])  # a viewer: nothing to offer
        if not outcome.validation.ok or outcome.unsaved is None:
            continue  # the quota, the pool or the user's role forbid it
        if not within_member_limits(unsaved=outcome.unsaved, actor=actor, replacing=job):
            continue  # over the member's GPU limit: it would wait in the portal
        outcome.unsaved.submitter_id = job.submitter_id
        probe = selectors.probe_job(outcome.unsaved, inputs=inputs, history=history)
        result = sim.forecast(without, probe)
        if _much_sooner(result, original):
            found.append(Alternative(label, changes, result, request))
    found.sort(key=lambda a: (a.forecast.high is None, a.forecast.high or 0.0))
    later = None
    if not original.starts_now and original.possible:
        after = sim.earliest_free_start(without, own)
        if after is not None and after >= sim.NOW_SECONDS:
            later = StartWindow(after_seconds=after)
    return PendingAdvice(forecast=original, alternatives=found[:MAX_ADVICE], later=later)
