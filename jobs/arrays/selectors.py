"""Reads of job arrays: visibility, per-state counts (one aggregate query), elements."""

from typing import Any

from django.db.models import Count, Q, QuerySet

from jobs.models import Job, JobArray
from jobs.states import ACTIVE, JobState
from tenants.selectors import restrict_to_visible

# Beyond the states: elements waiting in the portal for a slot of the array's parallelism.
HELD = "held"


def _count_expressions(prefix: str = "") -> dict[str, Count]:
    current = Q(**{f"{prefix}superseded": False})
    out = {
        state: Count(
            "pk" if not prefix else f"{prefix}pk", filter=current & Q(**{f"{prefix}state": state})
        )
        for state in JobState.values
    }
    out[HELD] = Count(
        "pk" if not prefix else f"{prefix}pk",
        filter=current
        & Q(**{f"{prefix}state": JobState.SUBMITTED, f"{prefix}applied_at__isnull": True}),
    )
    return out


def array_counts(*, array: JobArray) -> dict[str, int]:
    """{state: n for every state, "held": n, "active": n, "total": n} over the array's current
    elements (a resubmitted element counts once, as its newest attempt)."""
    counts = Job.objects.filter(array=array).aggregate(**_count_expressions())
    return with_totals(counts)


def with_totals(counts: dict[str, Any]) -> dict[str, int]:
    counts = {key: int(counts.get(key) or 0) for key in [*JobState.values, HELD]}
    counts["active"] = sum(counts[s] for s in ACTIVE)
    counts["total"] = sum(counts[s] for s in JobState.values)
    return counts


def array_list_visible_to(*, user: Any) -> QuerySet[JobArray]:
    """Arrays of the user's projects (staff: all), newest first, each with its counts."""
    return restrict_to_visible(
        JobArray.objects.select_related("project", "submitter").order_by("-created_at", "-id"),
        user=user,
        project_field="project",
    )


def with_counts(arrays: QuerySet[JobArray]) -> QuerySet[JobArray]:
    """Annotate each array with n_<state> and n_held (one grouped query for a list)."""
    return arrays.annotate(
        **{f"n_{key}": value for key, value in _count_expressions("elements__").items()}
    )


def array_elements(*, array: JobArray, state: list[str] | None = None) -> QuerySet[Job]:
    """The array's current elements in index order."""
    elements = Job.objects.filter(array=array, superseded=False).order_by("array_index")
    if state:
        elements = elements.filter(state__in=state)
    return elements
