from django.contrib import admin

from workspaces.models import Workspace, WorkspaceKind


@admin.register(WorkspaceKind)
class WorkspaceKindAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "app", "image", "default_shape", "enabled")
    list_filter = ("app", "enabled")


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "owner", "kind", "shape", "job", "created_at")
    list_filter = ("kind",)
    # The token is the workspace's key: never shown, never edited by hand.
    exclude = ("token",)
    readonly_fields = ("job", "runs", "last_activity_at", "gpu_idle_warned_at")
