"""Writes: member GPU limits and temporary quota requests.

Member limits are set by the project's admins (or staff). Quota requests are made by project
admins and decided by staff; an approval raises the project's quota through quotas.services (so
the quota sync applies it), and the end of a request lowers it again, never below what the
project's jobs hold at that moment: running jobs finish, new ones wait (`quota_requests_end`,
run periodically, lowers it further as they end).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from audit.services import created, record, removed
from governance.models import MemberGpuLimit, QuotaRequest, RequestStatus
from governance.selectors import project_gpu_quota, project_gpus_running, quota_requests_to_end
from notifications.events import quota_request_decided
from quotas.models import FULL_GPU, GpuPool
from quotas.services import quota_set
from quotas.tasks import enqueue_quota_sync
from tenants.models import Membership, Project
from tenants.permissions import administered_project, is_staff

audit = logging.getLogger("portal.audit")
log = logging.getLogger(__name__)

DEFAULT_MAX_DAYS = 90


def _actor_name(actor: Any) -> str:
    return "system" if actor is None else actor.get_username()


def _project_pool(project: Project, pool: GpuPool | str | None, *, field: str = "pool") -> GpuPool:
    """The pool if the project has a quota in it (the only pools a limit or request may name)."""
    slug = pool.slug if isinstance(pool, GpuPool) else (pool or "")
    if not slug:
        raise ValidationError({field: ["Name a GPU pool."]})
    found = GpuPool.objects.filter(slug=slug, project_quotas__project=project).distinct().first()
    if found is None:
        offered = ", ".join(
            GpuPool.objects.filter(project_quotas__project=project)
            .distinct()
            .order_by("slug")
            .values_list("slug", flat=True)
        )
        raise ValidationError(
            {
                field: [
                    f"Project {project.slug} has no quota in pool {slug!r}"
                    + (f"; its pools are: {offered}." if offered else "; it has no quota yet.")
                ]
            }
        )
    return found


def _whole_number(value: Any, *, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            text = str(value).strip()
            if not text.lstrip("-").isdigit() or len(text) > 9:
                raise ValueError
            value = int(text)
        except (TypeError, ValueError):
            raise ValidationError({field: [f"{value!r} is not a whole number."]}) from None
    if value < minimum:
        raise ValidationError({field: [f"Must be at least {minimum} (got {value})."]})
    return value


# --- member GPU limits ----------------------------------------------------------------------


@transaction.atomic
def member_limit_set(
    *,
    actor: Any,
    project: Project | str,
    pool: GpuPool | str | None,
    max_gpus: Any,
    user: Any = None,
) -> MemberGpuLimit:
    """Create or change the limit of one member (or, without a user, of every member) in a pool.
    The pool must be one the project has a quota in; the user must be a member."""
    project = administered_project(actor, project, what="GPU limits")
    max_gpus = _whole_number(max_gpus, field="max_gpus", minimum=0)
    found_pool = _project_pool(project, pool)
    member = None
    if user not in (None, ""):
        username = user if isinstance(user, str) else user.get_username()
        member = get_user_model().objects.filter(username=username).first()
        if member is None or not Membership.objects.filter(user=member, project=project).exists():
            raise ValidationError(
                {"user": [f"{username!r} is not a member of project {project.slug}."]}
            )
    limit = (
        MemberGpuLimit.objects.select_for_update(of=("self",))
        .filter(project=project, pool=found_pool, user=member)
        .order_by()
        .first()
    ) or MemberGpuLimit(project=project, pool=found_pool, user=member)
    old = limit.max_gpus if limit.pk else None
    limit.max_gpus = max_gpus
    limit.set_by = actor if getattr(actor, "is_authenticated", False) else None
    limit.save()
    record(
        "member_limit.set",
        actor=actor,
        target=limit,
        changes={"max_gpus": [old, max_gpus]},
        detail=f"pool {found_pool.slug}, "
        + (f"member {member.get_username()}" if member else "every member"),
    )
    audit.info(
        "member_limit_set actor=%s project=%s pool=%s user=%s max_gpus=%s",
        _actor_name(actor),
        project.slug,
        found_pool.slug,
        member.get_username() if member else "*",
        max_gpus,
    )
    return limit


@transaction.atomic
def member_limit_delete(*, actor: Any, limit: MemberGpuLimit) -> None:
    """Remove a limit; the member's jobs waiting for it go at their next reconcile."""
    administered_project(actor, limit.project, what="GPU limits")
    audit.info(
        "member_limit_delete actor=%s project=%s pool=%s user=%s",
        _actor_name(actor),
        limit.project.slug,
        limit.pool.slug,
        limit.user.get_username() if limit.user_id else "*",
    )
    target = (limit._meta.label_lower, limit.pk, str(limit))
    old = limit.max_gpus
    limit.delete()
    record(
        "member_limit.delete",
        actor=actor,
        target=target,
        project=limit.project,
        changes=removed({"max_gpus": old}),
    )


# --- temporary quota requests ---------------------------------------------------------------


def max_days() -> int:
    return int(getattr(settings, "PORTAL_QUOTA_REQUEST_MAX_DAYS", DEFAULT_MAX_DAYS))


def _date(value: Any, *, field: str) -> datetime.date:
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    try:
        return datetime.date.fromisoformat(str(value).strip())
    except ValueError:
        raise ValidationError(
            {field: [f"{value!r} is not a date: use YYYY-MM-DD, e.g. 2026-12-31."]}
        ) from None


def _capacity_error(project: Project, pool: GpuPool, gpus: int) -> str | None:
    quota = project_gpu_quota(project=project, pool=pool)
    current = quota.nominal if quota else 0
    if current + gpus <= pool.total_gpus:
        return None
    room = max(0, pool.total_gpus - current)
    return (
        f"Pool {pool.slug} has {pool.total_gpus} GPUs and project {project.slug} is already "
        f"guaranteed {current}: {gpus} more would need {current + gpus}; at most {room} more "
        "can be asked for."
    )


def _check_until(until: datetime.date, *, field: str = "until") -> None:
    today = timezone.localdate()
    if until < today:
        raise ValidationError({field: [f"The end date {until} is in the past (today is {today})."]})
    latest = today + datetime.timedelta(days=max_days())
    if until > latest:
        raise ValidationError(
            {
                field: [
                    f"The end date {until} is more than {max_days()} days away; the latest "
                    f"allowed is {latest}."
                ]
            }
        )


@transaction.atomic
def quota_request_create(
    *,
    actor: Any,
    project: Project | str,
    pool: GpuPool | str | None,
    gpus: Any,
    until: Any,
    reason: str,
) -> QuotaRequest:
    """A project admin asks for `gpus` more whole GPUs in `pool` until the day `until`."""
    project = administered_project(actor, project, what="quota requests")
    errors: dict[str, list[str]] = {}
    checks = (
        ("gpus", lambda: _whole_number(gpus, field="gpus", minimum=1)),
        ("pool", lambda: _project_pool(project, pool)),
        ("until", lambda: _date(until, field="until")),
    )
    values: dict[str, Any] = {}
    for name, check in checks:
        try:
            values[name] = check()
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if not str(reason or "").strip():
        errors["reason"] = ["Say why the project needs the GPUs (staff decide on it)."]
    if "until" in values:
        try:
            _check_until(values["until"])
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if "gpus" in values and "pool" in values and "gpus" not in errors:
        error = _capacity_error(project, values["pool"], values["gpus"])
        if error:
            errors["gpus"] = [error]
    if errors:
        raise ValidationError(errors)
    request = QuotaRequest.objects.create(
        project=project,
        pool=values["pool"],
        gpus=values["gpus"],
        until=values["until"],
        reason=str(reason).strip(),
        requester=actor,
    )
    record(
        "quota_request.create",
        actor=actor,
        target=request,
        changes=created({"pool": request.pool.slug, "gpus": request.gpus, "until": request.until}),
        detail=request.reason,
    )
    audit.info(
        "quota_request_create actor=%s project=%s pool=%s gpus=%s until=%s",
        _actor_name(actor),
        project.slug,
        request.pool.slug,
        request.gpus,
        request.until,
    )
    return request


def _require_staff(actor: Any, doing: str) -> None:
    if actor is not None and not is_staff(actor):
        raise PermissionDenied(f"Only staff can {doing}.")


def _pending(request_id: int) -> QuotaRequest:
    request = (
        QuotaRequest.objects.select_for_update()
        .select_related("project", "pool", "requester")
        .get(pk=request_id)
    )
    if request.status != RequestStatus.PENDING:
        raise ValidationError(
            {"status": [f"This request was already decided ({request.get_status_display()})."]}
        )
    return request


@transaction.atomic
def quota_request_approve(*, actor: Any, request: QuotaRequest, note: str = "") -> QuotaRequest:
    """Raise the project's quota in the pool by the request's GPUs (the quota sync applies it)."""
    _require_staff(actor, "approve quota requests")
    request = _pending(request.pk)
    _check_until(request.until)
    if error := _capacity_error(request.project, request.pool, request.gpus):
        raise ValidationError({"gpus": [error]})
    quota = project_gpu_quota(project=request.project, pool=request.pool)
    # quota_set checks the department's cap and the pool's profiles, as for any quota change.
    quota_set(
        actor=actor,
        project=request.project,
        pool=request.pool,
        resource=FULL_GPU,
        nominal=(quota.nominal if quota else 0) + request.gpus,
        borrowing_limit=quota.borrowing_limit if quota else 0,
    )
    request.status = RequestStatus.APPROVED
    request.granted = request.gpus
    request.decided_by = actor
    request.decided_at = timezone.now()
    request.note = note.strip()
    request.save()
    record(
        "quota_request.approve",
        actor=actor,
        target=request,
        changes={
            "status": [RequestStatus.PENDING, request.status],
            "granted": [0, request.granted],
        },
        detail=request.note,
    )
    quota_request_decided(request)
    enqueue_quota_sync()
    audit.info(
        "quota_request_approve actor=%s project=%s pool=%s gpus=%s until=%s",
        _actor_name(actor),
        request.project.slug,
        request.pool.slug,
        request.gpus,
        request.until,
    )
    return request


@transaction.atomic
def quota_request_refuse(*, actor: Any, request: QuotaRequest, note: str = "") -> QuotaRequest:
    _require_staff(actor, "refuse quota requests")
    request = _pending(request.pk)
    if not note.strip():
        raise ValidationError({"note": ["Say why the request is refused (the requester sees it)."]})
    request.status = RequestStatus.REFUSED
    request.decided_by = actor
    request.decided_at = timezone.now()
    request.note = note.strip()
    request.save()
    record(
        "quota_request.refuse",
        actor=actor,
        target=request,
        changes={"status": [RequestStatus.PENDING, request.status]},
        detail=request.note,
    )
    quota_request_decided(request)
    audit.info(
        "quota_request_refuse actor=%s project=%s pool=%s gpus=%s",
        _actor_name(actor),
        request.project.slug,
        request.pool.slug,
        request.gpus,
    )
    return request


@transaction.atomic
def _end_one(request_id: int) -> str:
    """Take back what one ended request may give back now. Returns its status afterwards."""
    request = (
        QuotaRequest.objects.select_for_update()
        .select_related("project", "pool")
        .get(pk=request_id)
    )
    if request.status not in (RequestStatus.APPROVED, RequestStatus.EXPIRING):
        return request.status
    quota = project_gpu_quota(project=request.project, pool=request.pool)
    nominal = quota.nominal if quota else 0
    # Never below what runs: jobs admitted under the extra GPUs keep their quota until they end.
    floor = max(0, nominal - request.granted)
    running = project_gpus_running(project_id=request.project_id, pool=request.pool.slug)
    target = max(floor, min(nominal, running))
    if quota is not None and target != nominal:
        quota_set(
            actor=None,
            project=request.project,
            pool=request.pool,
            resource=FULL_GPU,
            nominal=target,
            borrowing_limit=quota.borrowing_limit,
        )
        enqueue_quota_sync()
    given_back = nominal - target
    granted_before, before = request.granted, request.status
    request.granted = max(0, request.granted - given_back)
    if request.granted == 0 or quota is None:
        request.granted = 0
        request.status = RequestStatus.EXPIRED
        request.ended_at = timezone.now()
    else:
        request.status = RequestStatus.EXPIRING
    request.save(update_fields=["granted", "status", "ended_at"])
    if given_back or request.status != before:
        record(
            "quota_request.end",
            actor=None,
            target=request,
            changes={
                "status": [before, request.status],
                "granted": [granted_before, request.granted],
            },
            detail=f"{given_back} GPUs given back",
        )
        audit.info(
            "quota_request_end project=%s pool=%s gave_back=%s still_granted=%s status=%s",
            request.project.slug,
            request.pool.slug,
            given_back,
            request.granted,
            request.status,
        )
    return request.status


def quota_requests_end(*, today: datetime.date | None = None) -> dict[str, int]:
    """Periodic and idempotent: every approved request past its last day gives its GPUs back,
    as far as the project's running jobs allow; the rest at a later run."""
    today = today or timezone.localdate()
    counts = {"expired": 0, "expiring": 0}
    for request_id in quota_requests_to_end(today=today).values_list("pk", flat=True):
        status = _end_one(request_id)
        if status in counts:
            counts[status] += 1
    return counts
