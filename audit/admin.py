"""Staff read the audit trail in the admin; nobody adds, changes or deletes a row there."""

from __future__ import annotations

from django.contrib import admin

from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = (
        "created_at",
        "actor_username",
        "action",
        "target_type",
        "target_repr",
        "project_slug",
        "source",
        "ip",
    )
    list_filter = (
        "action",
        "source",
        ("project", admin.RelatedOnlyFieldListFilter),
        ("actor", admin.RelatedOnlyFieldListFilter),
        "created_at",
    )
    search_fields = (
        "actor_username",
        "action",
        "target_id",
        "target_repr",
        "project_slug",
        "request_id",
    )
    date_hierarchy = "created_at"
    list_select_related = False
    show_full_result_count = False
    readonly_fields = [f.name for f in AuditEvent._meta.fields]
    actions = None

    def has_view_permission(self, request, obj=None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_module_permission(self, request) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
