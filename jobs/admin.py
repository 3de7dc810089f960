"""Jobs in the admin console: read-only (state changes go through jobs.services only)."""

from django.contrib import admin, messages

from jobs.models import Job, JobEvent
from jobs.services import InvalidTransition, job_cancel


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ["created_at", "from_state", "to_state", "reason", "message", "source"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "project", "kind", "backend", "state", "submitter", "created_at"]
    list_filter = ["state", "kind", "backend", "project"]
    search_fields = ["name", "project__slug", "submitter__username"]
    list_select_related = ["project", "submitter"]
    inlines = [JobEventInline]
    actions = ["cancel_jobs"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Job._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False  # jobs are submitted through the API or the submit page, with validation

    @admin.action(description="Cancel selected jobs (deletes their cluster objects)")
    def cancel_jobs(self, request, queryset) -> None:
        cancelled, skipped = 0, 0
        for job in queryset.select_related("project"):
            try:
                job_cancel(actor=request.user, job=job, source="admin")
                cancelled += 1
            except InvalidTransition:
                skipped += 1
        self.message_user(request, f"Cancelled {cancelled} job(s); {skipped} already finished.")
        if skipped:
            self.message_user(request, "Finished jobs cannot be cancelled.", messages.WARNING)
