"""Credentials in the admin console: a read-only listing of names and keys (no values exist
in the database to show; changes go through the API so the Secret changes with the row)."""

from django.contrib import admin

from credentials.models import Credential


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "kind", "server", "keys", "updated_by", "updated_at"]
    list_filter = ["kind", "project"]
    search_fields = ["name", "project__slug", "server"]
    list_select_related = ["project", "updated_by"]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in Credential._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # deleting here would leave the Secret behind
