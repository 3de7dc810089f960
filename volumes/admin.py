"""Approved storage classes and data volumes in the admin console.

Volumes are written through volumes.services (the same rules as the API); the claim is applied
once the admin's transaction commits. Deleting a volume here removes only the portal's record:
deleting a claim and its data is done through the API with an explicit confirmation.
"""

from django.contrib import admin, messages
from django.db import transaction

from quotas.admin_base import ServiceModelAdmin
from volumes.models import DataVolume, StorageClass
from volumes.services import volume_create, volume_delete, volume_sync, volume_update


@admin.register(StorageClass)
class StorageClassAdmin(admin.ModelAdmin):
    list_display = ("name", "max_size", "description")
    search_fields = ("name",)


@admin.register(DataVolume)
class DataVolumeAdmin(ServiceModelAdmin):
    list_display = (
        "name",
        "project",
        "kind",
        "claim_name",
        "mount_path",
        "read_only",
        "is_checkpoint",
        "sync_state",
        "claim_phase",
    )
    list_filter = ("kind", "sync_state", "is_checkpoint")
    search_fields = ("name", "project__slug", "claim_name")
    list_select_related = ("project",)
    actions = ["apply_again"]
    fields = (
        "project",
        "name",
        "kind",
        "claim_name",
        "storage_class",
        "size",
        "nfs_server",
        "nfs_path",
        "mount_path",
        "read_only",
        "is_checkpoint",
        "description",
        "created_by",
        "sync_state",
        "sync_message",
        "claim_phase",
        "synced_at",
    )
    status_fields = ("created_by", "sync_state", "sync_message", "claim_phase", "synced_at")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.status_fields
        fixed = ("project", "name", "kind", "claim_name", "storage_class", "size")
        return (*fixed, "nfs_server", "nfs_path", *self.status_fields)

    def service_save(self, request, obj: DataVolume, form, change: bool) -> DataVolume:
        if change:
            changes = {name: getattr(obj, name) for name in form.changed_data}
            saved = volume_update(
                actor=request.user, volume=DataVolume.objects.get(pk=obj.pk), **changes
            )
        else:
            saved = volume_create(
                actor=request.user,
                project=obj.project,
                name=obj.name,
                kind=obj.kind,
                mount_path=obj.mount_path,
                read_only=obj.read_only,
                is_checkpoint=obj.is_checkpoint,
                claim_name=obj.claim_name,
                storage_class=obj.storage_class.name if obj.storage_class_id else "",
                size=obj.size,
                nfs_server=obj.nfs_server,
                nfs_path=obj.nfs_path,
                description=obj.description,
                apply=False,
            )
            transaction.on_commit(lambda: volume_sync(saved))
        return saved

    def service_delete(self, request, obj: DataVolume) -> None:
        volume_delete(actor=request.user, volume=obj)

    @admin.action(description="Apply to the cluster again (claims only; nothing is deleted)")
    def apply_again(self, request, queryset) -> None:
        failed = 0
        for volume in queryset.select_related("project", "storage_class"):
            if volume_sync(volume).sync_state == "error":
                failed += 1
                self.message_user(
                    request, f"{volume}: {volume.sync_message}", level=messages.WARNING
                )
        self.message_user(request, f"Applied {queryset.count() - failed} volume(s).")
