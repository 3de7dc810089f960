"""Admin plumbing shared by the tenants and quotas admin pages: writes through services, and a
quota sync after every change that feeds the cluster's quota objects.

The admin console never saves a model itself. Its forms show the services' rules as field errors
(each form asks the matching ``*_conflicts`` service function after the model's own checks), and
its save/delete hooks call the services, which re-check under locks. A service that still refuses
(another admin changed something in between) rolls the whole change back and says why.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseRedirect

from quotas.tasks import enqueue_quota_sync


def add_service_errors(form, errors: dict[str, list[str]]) -> None:
    """Put a service's field errors on a form (unknown fields become form-wide errors)."""
    for name, field_errors in errors.items():
        target = name if name in form.fields else None
        for error in field_errors:
            form.add_error(target, error)


class ServiceModelAdmin(admin.ModelAdmin):
    """A ModelAdmin whose writes go through the app's services.

    Subclasses implement ``service_save(request, obj, form, change)`` (return the saved row) and
    ``service_delete(request, obj)``; inlines are written in ``save_formset``.
    """

    def service_save(self, request: HttpRequest, obj, form, change: bool):
        raise NotImplementedError

    def service_delete(self, request: HttpRequest, obj) -> None:
        raise NotImplementedError

    def save_model(self, request: HttpRequest, obj, form, change: bool) -> None:
        saved = self.service_save(request, obj, form, change)
        # The admin goes on with `obj` (inlines, redirect, history): give it the saved identity.
        if saved is not None and saved is not obj:
            obj.pk = saved.pk
            obj._state.adding = False
            obj._state.db = saved._state.db

    def delete_model(self, request: HttpRequest, obj) -> None:
        self.service_delete(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for obj in queryset:
            self.service_delete(request, obj)

    def _refused(self, request: HttpRequest, exc: ValidationError):
        self.message_user(request, f"Nothing was saved: {' '.join(exc.messages)}", messages.ERROR)
        return HttpResponseRedirect(request.get_full_path())

    # The admin runs these views in a transaction: a refusal rolls back every write of the
    # request (the row, its inlines), then the page is shown again with the reason.
    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except ValidationError as exc:
            if request.method != "POST":
                raise
            return self._refused(request, exc)

    def delete_view(self, request, object_id, extra_context=None):
        try:
            return super().delete_view(request, object_id, extra_context)
        except ValidationError as exc:
            if request.method != "POST":
                raise
            return self._refused(request, exc)


class QuotaSyncOnChangeAdminMixin:
    """Put first in the bases of every admin whose model feeds the quota objects (Department,
    Project, GpuPool, ProjectQuota, DepartmentQuota, PriorityClass): any save or delete there,
    inline edits included, syncs the cluster once the transaction commits. The periodic resync
    repairs anything a lost message missed."""

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        enqueue_quota_sync()

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        enqueue_quota_sync()

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        enqueue_quota_sync()

    def delete_queryset(self, request, queryset) -> None:
        super().delete_queryset(request, queryset)
        enqueue_quota_sync()
