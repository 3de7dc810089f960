"""Admin console for departments, projects (with inline members and quotas) and memberships."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Count, Prefetch

from quotas import arithmetic
from quotas.admin import (
    DepartmentQuotaForm,
    ProjectQuotaForm,
    quota_maximum,
    warn_if_oversubscribed,
    with_usable_amounts,
)
from quotas.models import DepartmentQuota, GpuPool, ProjectQuota
from quotas.sync import QuotaSyncOnChangeAdminMixin
from tenants.models import Department, Membership, Project


class DepartmentQuotaInline(admin.TabularInline):
    model = DepartmentQuota
    form = DepartmentQuotaForm
    extra = 0
    verbose_name = "GPU cap"
    verbose_name_plural = "GPU caps (sum of the projects' guaranteed quota per pool)"


@admin.register(Department)
class DepartmentAdmin(QuotaSyncOnChangeAdminMixin, admin.ModelAdmin):
    list_display = ("slug", "name", "project_count", "caps")
    search_fields = ("slug", "name")
    inlines = (DepartmentQuotaInline,)

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
    raw_id_fields = ("user",)
    fields = ("user", "role")


class ProjectQuotaInline(admin.TabularInline):
    model = ProjectQuota
    form = ProjectQuotaForm
    extra = 0
    fields = ("pool", "resource", "nominal", "borrowing_limit", "maximum")
    readonly_fields = ("maximum",)
    verbose_name = "GPU quota"
    verbose_name_plural = "GPU quotas (guaranteed = nominal; may borrow up to the limit)"

    def get_queryset(self, request):
        return with_usable_amounts(super().get_queryset(request).select_related("pool"))

    @admin.display(description="maximum (with borrowing)")
    def maximum(self, quota: ProjectQuota) -> int | str:
        return quota_maximum(quota)


@admin.register(Project)
class ProjectAdmin(QuotaSyncOnChangeAdminMixin, admin.ModelAdmin):
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


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("project", "user", "role", "created_at")
    list_filter = ("role", "project__department", "project")
    search_fields = ("user__username", "project__slug")
    list_select_related = ("project", "user")
    raw_id_fields = ("user",)
