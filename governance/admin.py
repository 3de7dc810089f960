"""Admin console: quota requests (staff approve or refuse them here or on the overview page) and
the member GPU limits of every project (set by project admins on their project page)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from governance.models import MemberGpuLimit, QuotaRequest
from governance.services import member_limit_delete, quota_request_approve, quota_request_refuse


@admin.register(QuotaRequest)
class QuotaRequestAdmin(admin.ModelAdmin):
    list_display = (
        "project",
        "pool",
        "gpus",
        "until",
        "requester",
        "status",
        "granted",
        "decided_by",
        "created_at",
    )
    list_filter = ("status", "pool", "project__department")
    search_fields = ("project__slug", "requester__username", "reason")
    # Decisions go through the actions (the services); only staff's note is edited here.
    readonly_fields = tuple(
        f.name for f in QuotaRequest._meta.fields if f.name not in ("id", "note")
    )
    actions = ("approve", "refuse")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # project admins ask on their project page or through the API

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # the record of what was asked and decided stays

    def _decide(self, request: HttpRequest, queryset, decide, verb: str) -> None:
        done, refused = 0, []
        for quota_request in queryset:
            try:
                decide(quota_request)
                done += 1
            except ValidationError as exc:
                refused.append(
                    f"#{quota_request.pk} ({quota_request.project}): " + " ".join(exc.messages)
                )
        if done:
            self.message_user(request, f"{verb} {done} request(s).", messages.SUCCESS)
        for line in refused:
            self.message_user(request, f"Not {verb.lower()}: {line}", messages.ERROR)

    @admin.action(description="Approve the selected requests (the quota rises)")
    def approve(self, request: HttpRequest, queryset) -> None:
        self._decide(
            request,
            queryset,
            lambda q: quota_request_approve(actor=request.user, request=q, note=q.note),
            "Approved",
        )

    @admin.action(description="Refuse the selected requests (with their note, or a default one)")
    def refuse(self, request: HttpRequest, queryset) -> None:
        default = f"Refused by {request.user.get_username()} in the admin console."
        self._decide(
            request,
            queryset,
            lambda q: quota_request_refuse(
                actor=request.user, request=q, note=q.note.strip() or default
            ),
            "Refused",
        )


@admin.register(MemberGpuLimit)
class MemberGpuLimitAdmin(admin.ModelAdmin):
    list_display = ("project", "pool", "user", "max_gpus", "set_by", "updated_at")
    list_filter = ("pool", "project__department")
    search_fields = ("project__slug", "user__username")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # set on the project page or through the API (validated there)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj) -> None:
        member_limit_delete(actor=request.user, limit=obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for limit in queryset:
            member_limit_delete(actor=request.user, limit=limit)
