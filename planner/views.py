"""The planner's pages and the small pieces the job pages include: the forecast and advice of a
waiting job, right-sizing of a finished one, "submit this instead" (the replaced job is cancelled
only when the user ticks it), a project's monthly right-sizing summary, and the staff what-if."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, UserPassesTestMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.dateparse import parse_date
from django.views import View

from jobs.models import Job
from jobs.services import InvalidTransition, job_cancel
from jobs.states import ACTIVE
from planner import advice, charts, selectors, services
from tenants.models import Project
from tenants.permissions import can_write, is_staff
from tenants.selectors import restrict_to_visible

# Fields "submit this instead" may change on the pre-filled form.
ADVICE_FIELDS = ("kind", "gpus", "mig_profile", "pool", "priority", "replicas")


def advice_overrides(query: QueryDict) -> dict[str, Any]:
    """The changed fields of an alternative, from the submit page's query string."""
    return {name: query.get(name) for name in ADVICE_FIELDS if name in query}


def _visible_jobs(user):
    return restrict_to_visible(
        Job.objects.select_related("project"), user=user, project_field="project"
    )


def replaced_job(request) -> Job | None:
    """The waiting job a "submit this instead" would replace: ?replaces=<id> on the form, or the
    posted field; only an active job the user may cancel."""
    raw = request.POST.get("replaces") or request.GET.get("replaces") or ""
    if not raw.isdigit():
        return None
    job = _visible_jobs(request.user).filter(pk=int(raw), state__in=ACTIVE).first()
    if job is None or not can_write(request.user, job.project):
        return None
    return job


def cancel_replaced(request) -> Job | None:
    """After a successful submission: cancel the replaced job if the user ticked the box."""
    if request.POST.get("cancel_replaced") != "1":
        return None
    job = replaced_job(request)
    if job is None:
        return None
    try:
        return job_cancel(actor=request.user, job=job, source="ui")
    except (InvalidTransition, PermissionDenied):
        return None


def job_planner_context(*, job: Job, user) -> dict[str, Any] | None:
    """What the job page shows: a waiting job's forecast and advice, or a finished job's
    right-sizing; None when there is nothing to say."""
    if job.state in selectors.STARTED_STATES:
        return None
    if not job.is_terminal:
        result = advice.pending_advice(job=job, actor=user)
        if result.forecast is None:
            return None
        return {
            "forecast": result.forecast,
            "alternatives": [(a, a.submit_query(job)) for a in result.alternatives],
            "later": result.later,
        }
    rightsizing = selectors.job_rightsizing(job)
    return {"rightsizing": rightsizing} if rightsizing else None


class ProjectRightsizingView(LoginRequiredMixin, View):
    """A project's month: GPU-hours of finished jobs that a smaller request would have served."""

    def get(self, request, slug: str):
        project = get_object_or_404(
            restrict_to_visible(Project.objects.all(), user=request.user, project_field=""),
            slug=slug,
        )
        month = _month(request.GET.get("month", ""))
        summary, rows = selectors.project_rightsizing(project=project, month=month)
        previous = (month - timedelta(days=1)).replace(day=1)
        following = (month + timedelta(days=32)).replace(day=1)
        context = {
            "project": project,
            "month": month,
            "previous": previous,
            "following": following if following <= timezone.now().date() else None,
            "summary": summary,
            "rows": rows,
        }
        return render(request, "planner/project_rightsizing.html", context)


def _month(raw: str):
    parsed = parse_date(f"{raw}-01") if raw else None
    return parsed or timezone.now().date().replace(day=1)


class WhatIfView(LoginRequiredMixin, UserPassesTestMixin, View):
    """Staff: edit the quota table, replay a period under it, compare, and apply."""

    def test_func(self) -> bool:
        return is_staff(self.request.user)

    def get(self, request):
        end = timezone.now()
        return self._render(request, start=end - timedelta(days=28), end=end)

    def post(self, request):
        start = _when(request.POST.get("start")) or timezone.now() - timedelta(days=28)
        end = _when(request.POST.get("end")) or timezone.now()
        rows, errors = _proposal_rows(request.POST)
        if start >= end:
            errors["end"] = ["The end must be after the start."]
        entries = []
        if not errors:
            try:
                entries = selectors.proposal_entries(rows)
            except ValidationError as exc:
                errors.update(exc.message_dict)
        if errors:
            return self._render(request, start=start, end=end, errors=errors, status=400)
        if "apply" in request.POST:
            try:
                applied = services.whatif_apply(actor=request.user, proposal=entries)
            except ValidationError as exc:
                return self._render(
                    request, start=start, end=end, errors=exc.message_dict, status=400
                )
            messages.success(request, f"Applied {len(applied)} quota change(s).")
            return redirect("planner-whatif")
        result = selectors.whatif_compare(start=start, end=end, proposal=entries)
        return self._render(request, start=start, end=end, result=result, proposal=rows)

    def _render(self, request, *, start, end, result=None, proposal=None, errors=None, status=200):
        current = selectors.quota_table()
        proposed = {(r["project"], r["pool"], r["resource"]): r for r in proposal or []}
        table = [row | {"proposed": proposed.get(row["key"])} for row in current]
        context = {
            "start": start,
            "end": end,
            "table": table,
            "result": result,
            "chart": charts.wait_chart(result["projects"]) if result else "",
            "errors": errors or {},
        }
        return render(request, "planner/whatif.html", context, status=status)


def _when(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _proposal_rows(post: QueryDict) -> tuple[list[dict], dict[str, list[str]]]:
    """The edited table: rows whose nominal or borrowing limit differ from today's."""
    rows, errors = [], {}
    for index, key in enumerate(post.getlist("key")):
        project, pool, resource = [*key.split("|"), "", "", ""][:3]
        nominal_raw = post.get(f"nominal-{key}", "").strip()
        limit_raw = post.get(f"limit-{key}", "").strip()
        if not nominal_raw.isdigit():
            errors[f"quotas.{index}.nominal"] = [f"{key}: a whole number of 0 or more."]
            continue
        if limit_raw and not limit_raw.isdigit():
            errors[f"quotas.{index}.borrowing_limit"] = [f"{key}: empty (any) or a whole number."]
            continue
        row = {
            "project": project,
            "pool": pool,
            "resource": resource,
            "nominal": int(nominal_raw),
            "borrowing_limit": int(limit_raw) if limit_raw else None,
        }
        if post.get(f"was-{key}") != f"{row['nominal']}|{limit_raw}":
            rows.append(row)
    return rows, errors
