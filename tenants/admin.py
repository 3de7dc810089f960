"""Admin console for departments, projects (with inline members and quotas) and memberships.

Every write goes through tenants.services and quotas.services (see quotas.admin_base), inline
rows included; the forms show the services' cross-row rules as field errors.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import Count, Prefetch

from quotas import arithmetic
from quotas import services as quota_services
from quotas.admin import (
    DepartmentQuotaForm,
    ProjectQuotaForm,
    current_use,
    quota_maximum,
    save_department_quota,
    save_project_quota,
    warn_about_quota_sync,
    warn_if_oversubscribed,
    with_current_use,
    with_usable_amounts,
)
from quotas.admin_base import QuotaSyncOnChangeAdminMixin, ServiceModelAdmin, add_service_errors
from quotas.models import DepartmentQuota, GpuPool, ProjectQuota
from tenants import services
from tenants.models import Department, ExternalIdentity, GroupMapping, Membership, Project


def _write_inline_rows(formset, *, save_row, delete_row) -> None:
    """Write an inline formset through services: deletions first (so a row can take the place
    of a removed one), then new and changed rows. Records what the admin's history needs."""
    formset.new_objects, formset.changed_objects, formset.deleted_objects = [], [], []
    for form in formset.deleted_forms:
        if form.instance.pk is not None:
            delete_row(form.instance)
            formset.deleted_objects.append(form.instance)
    for form in formset.forms:
        if form in formset.deleted_forms or not form.has_changed():
            continue
        is_new = form.instance.pk is None
        saved = save_row(form.instance)
        if is_new:
            formset.new_objects.append(saved)
        else:
            formset.changed_objects.append((saved, form.changed_data))


class DepartmentQuotaInline(admin.TabularInline):
    model = DepartmentQuota
    form = DepartmentQuotaForm
    extra = 0
    verbose_name = "GPU cap"
    verbose_name_plural = "GPU caps (sum of the projects' guaranteed quota per pool)"


@admin.register(Department)
class DepartmentAdmin(QuotaSyncOnChangeAdminMixin, ServiceModelAdmin):
    list_display = ("slug", "name", "project_count", "caps")
    search_fields = ("slug", "name")
    inlines = (DepartmentQuotaInline,)

    def service_save(self, request, obj: Department, form, change: bool) -> Department:
        if change:
            return services.department_update(
                actor=request.user,
                department=obj,
                **{name: getattr(obj, name) for name in services.DEPARTMENT_FIELDS},
            )
        return services.department_create(
            actor=request.user, slug=obj.slug, name=obj.name, description=obj.description
        )

    def service_delete(self, request, obj: Department) -> None:
        services.department_delete(actor=request.user, department=obj)

    def save_formset(self, request, form, formset, change) -> None:
        if formset.model is not DepartmentQuota:
            raise TypeError(f"no service writes {formset.model.__name__} rows")
        _write_inline_rows(
            formset,
            save_row=lambda cap: save_department_quota(request.user, cap),
            delete_row=lambda cap: quota_services.department_quota_delete(
                actor=request.user, department=cap.department, pool=cap.pool, resource=cap.resource
            ),
        )

    def changelist_view(self, request, extra_context=None):
        warn_about_quota_sync(request)
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(project_total=Count("projects", distinct=True))
            .prefetch_related(
                Prefetch("quotas", queryset=DepartmentQuota.objects.select_related("pool"))
            )
        )

    @admin.display(description="projects", ordering="project_total")
    def project_count(self, department: Department) -> int:
        return department.project_total

    @admin.display(description="GPU caps")
    def caps(self, department: Department) -> str:
        caps = sorted(
            department.quotas.all(),
            key=lambda c: (c.pool.slug, arithmetic.resource_sort_key(c.resource)),
        )
        return "; ".join(f"{c.pool.slug}: ≤ {c.limit} {c.resource}" for c in caps) or "—"


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)  # choose people by name (the User admin's search)
    fields = ("user", "role", "source")
    readonly_fields = ("source",)


class ProjectQuotaInline(admin.TabularInline):
    model = ProjectQuota
    form = ProjectQuotaForm
    extra = 0
    fields = ("pool", "resource", "nominal", "borrowing_limit", "maximum", "in_use")
    readonly_fields = ("maximum", "in_use")
    verbose_name = "GPU quota"
    verbose_name_plural = "GPU quotas (guaranteed = nominal; may borrow up to the limit)"

    def get_queryset(self, request):
        return with_current_use(
            with_usable_amounts(super().get_queryset(request).select_related("pool"))
        )

    @admin.display(description="maximum (with borrowing)")
    def maximum(self, quota: ProjectQuota) -> int | str:
        return quota_maximum(quota)

    @admin.display(description="in use now")
    def in_use(self, quota: ProjectQuota) -> str:
        return current_use(quota)


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = (
            "slug",
            "name",
            "department",
            "description",
            "default_gang_backend",
            "pod_security",
            "max_array_elements",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Optional in the form: left empty, the project keeps its limit (or the default).
        self.fields["max_array_elements"].required = False

    def clean_max_array_elements(self) -> int:
        value = self.cleaned_data.get("max_array_elements")
        if value is None:
            return self.instance.max_array_elements
        return value

    def _post_clean(self) -> None:
        super()._post_clean()  # the row's own checks (slug)
        if not self.has_error("department"):
            add_service_errors(self, services.project_conflicts(self.instance))


@admin.register(Project)
class ProjectAdmin(QuotaSyncOnChangeAdminMixin, ServiceModelAdmin):
    form = ProjectForm
    list_display = (
        "slug",
        "name",
        "department",
        "namespace",
        "pod_security",
        "member_count",
        "quota_summary",
    )
    list_filter = ("department", "pod_security")
    search_fields = ("slug", "name", "namespace")
    list_select_related = ("department",)
    inlines = (MembershipInline, ProjectQuotaInline)

    def get_readonly_fields(self, request, obj=None):
        # The slug names the namespace and queues; renaming a live project would orphan them.
        return ("slug", "namespace", "pod_uid") if obj is not None else ("namespace",)

    @admin.display(description="pod uid/gid (restricted)")
    def pod_uid(self, project: Project) -> str:
        return str(project.run_as_uid) if project.pk else "assigned on save"

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(member_total=Count("memberships", distinct=True))
            .prefetch_related(
                Prefetch("quotas", queryset=ProjectQuota.objects.select_related("pool"))
            )
        )

    def service_save(self, request, obj: Project, form, change: bool) -> Project:
        if change:
            return services.project_update(
                actor=request.user,
                project=obj,
                **{name: getattr(obj, name) for name in services.PROJECT_FIELDS},
            )
        return services.project_create(
            actor=request.user,
            slug=obj.slug,
            **{name: getattr(obj, name) for name in services.PROJECT_FIELDS},
        )

    def service_delete(self, request, obj: Project) -> None:
        services.project_delete(actor=request.user, project=obj)

    def save_formset(self, request, form, formset, change) -> None:
        project = form.instance
        if formset.model is ProjectQuota:
            _write_inline_rows(
                formset,
                save_row=lambda quota: save_project_quota(request.user, quota),
                delete_row=lambda quota: quota_services.quota_delete(
                    actor=request.user, project=project, pool=quota.pool, resource=quota.resource
                ),
            )
        elif formset.model is Membership:
            _write_inline_rows(
                formset,
                save_row=lambda membership: _save_membership(request.user, project, membership),
                delete_row=lambda membership: services.membership_remove(
                    actor=request.user, membership=membership
                ),
            )
        else:
            raise TypeError(f"no service writes {formset.model.__name__} rows")

    def changelist_view(self, request, extra_context=None):
        warn_about_quota_sync(request)
        return super().changelist_view(request, extra_context)

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        # Quotas may have been added, raised or removed: re-check the pools they touch.
        pool_ids = {
            inline_form.instance.pool_id
            for formset in formsets
            if formset.model is ProjectQuota
            for inline_form in formset.forms
            if inline_form.has_changed() and inline_form.instance.pool_id
        }
        if pool_ids:
            warn_if_oversubscribed(request, GpuPool.objects.filter(pk__in=pool_ids))

    @admin.display(description="members", ordering="member_total")
    def member_count(self, project: Project) -> int:
        return project.member_total

    @admin.display(description="GPU quotas: guaranteed (+may borrow)")
    def quota_summary(self, project: Project) -> str:
        return (
            arithmetic.format_quota_summary(
                (q.pool.slug, q.resource, q.nominal, q.borrowing_limit)
                for q in project.quotas.all()
            )
            or "—"
        )


def _save_membership(actor, project: Project, membership: Membership) -> Membership:
    """Add a member, change a role, or (the user was changed on a row) swap one member for
    another, through the membership services (which keep the last-admin rule)."""
    if membership.pk is None:
        return services.membership_add(
            actor=actor, project=project, user=membership.user, role=membership.role
        )
    stored = Membership.objects.select_related("user", "project").get(pk=membership.pk)
    if (stored.user_id, stored.project_id) != (membership.user_id, project.pk):
        added = services.membership_add(
            actor=actor, project=project, user=membership.user, role=membership.role
        )
        services.membership_remove(actor=actor, membership=stored)
        return added
    return services.membership_change_role(actor=actor, membership=stored, role=membership.role)


@admin.register(Membership)
class MembershipAdmin(ServiceModelAdmin):
    list_display = ("project", "user", "role", "source", "created_at")
    list_filter = ("role", "source", "project__department", "project")
    readonly_fields = ("source",)
    search_fields = ("user__username", "project__slug")
    list_select_related = ("project", "user")
    autocomplete_fields = ("user",)

    def service_save(self, request, obj: Membership, form, change: bool) -> Membership:
        return _save_membership(request.user, obj.project, obj)

    def service_delete(self, request, obj: Membership) -> None:
        services.membership_remove(actor=request.user, membership=obj)


@admin.register(GroupMapping)
class GroupMappingAdmin(admin.ModelAdmin):
    """Single sign-on rules: an IdP group gives a role in a project, applied at each login."""

    list_display = ("group", "project", "role", "created_at")
    list_filter = ("role", "project")
    search_fields = ("group", "project__slug")
    autocomplete_fields = ("project",)


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin):
    """Which IdP account logs in as which portal user; created by the first login."""

    list_display = ("user", "issuer", "subject", "created_at", "last_login_at")
    search_fields = ("user__username", "subject")
    list_filter = ("issuer",)
    readonly_fields = ("user", "issuer", "subject", "created_at", "last_login_at")

    def has_add_permission(self, request) -> bool:
        return False
