"""Admin console for GPU pools, quotas, department caps and priority classes.

Validation is the models' (``clean``), so the admin, the API and the services give the same
messages; numbers shown (maximum, subscription) come from quotas.arithmetic.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from quotas import arithmetic, mig
from quotas import manifests as qm
from quotas.models import DepartmentQuota, GpuPool, PriorityClass, ProjectQuota
from quotas.selectors import pool_subscriptions
from quotas.sync import QuotaSyncOnChangeAdminMixin


class ProfileListField(forms.CharField):
    """MIG profiles typed as 'comma or space separated' text, stored as a JSON list."""

    def prepare_value(self, value):
        if isinstance(value, list | tuple):
            return ", ".join(str(item) for item in value)
        return value

    def to_python(self, value):
        text = super().to_python(value) or ""
        return [item for item in text.replace(",", " ").split() if item]


def _profile_help() -> str:
    families = {}
    for family in mig.FAMILIES.values():
        families.setdefault(tuple(family.profile_names), []).append(family.key)
    lines = [f"{' / '.join(keys)}: {', '.join(names)}" for names, keys in families.items()]
    return "Comma-separated MIG profiles this pool offers, e.g. 1g.10gb, 2g.20gb. By model — " + (
        "; ".join(lines)
    )


class GpuPoolForm(forms.ModelForm):
    mig_profiles = ProfileListField(required=False, help_text=_profile_help())

    class Meta:
        model = GpuPool
        fields = (
            "slug",
            "name",
            "gpu_model",
            "node_count",
            "gpus_per_node",
            "node_labels",
            "mig_profiles",
            "default_cpu",
            "default_memory",
        )


def warn_if_oversubscribed(request: HttpRequest, pools) -> None:
    """After a quota change: tell the admin which pools now promise more GPUs than they have."""
    for subscription in pool_subscriptions(pools=pools).values():
        if subscription.message:
            messages.warning(request, subscription.message)


def _subscription_text(subscription: arithmetic.PoolSubscription) -> str:
    text = subscription.summary
    if subscription.oversubscribed:
        return f"⚠ over-subscribed by {subscription.excess_gpus} GPU(s): {text}"
    return text


class PoolChangeList(ChangeList):
    """Computes every listed pool's subscription in one query, not one per row."""

    def get_results(self, request) -> None:
        super().get_results(request)
        subscriptions = pool_subscriptions(pools=self.result_list)
        for pool in self.result_list:
            pool.subscription = subscriptions[pool.pk]


@admin.register(GpuPool)
class GpuPoolAdmin(QuotaSyncOnChangeAdminMixin, admin.ModelAdmin):
    form = GpuPoolForm
    list_display = (
        "slug",
        "name",
        "gpu_model",
        "capacity",
        "mig_profile_list",
        "subscription_summary",
    )
    search_fields = ("slug", "name", "gpu_model")
    fieldsets = (
        (None, {"fields": ("slug", "name", "gpu_model")}),
        ("Nodes", {"fields": ("node_count", "gpus_per_node", "node_labels")}),
        ("MIG", {"fields": ("mig_profiles",)}),
        ("Pod defaults", {"fields": ("default_cpu", "default_memory")}),
    )

    def get_readonly_fields(self, request, obj=None):
        # The slug names the Kueue ResourceFlavor; renaming a live pool would orphan it.
        return ("slug",) if obj is not None else ()

    def get_changelist(self, request, **kwargs):
        return PoolChangeList

    def changelist_view(self, request: HttpRequest, extra_context=None):
        response = super().changelist_view(request, extra_context)
        changelist = getattr(response, "context_data", {}).get("cl")
        if changelist is not None:
            for pool in changelist.result_list:
                if pool.subscription.message:
                    messages.warning(request, pool.subscription.message)
        return response

    def change_view(self, request: HttpRequest, object_id, form_url="", extra_context=None):
        if request.method == "GET":
            pool = self.get_object(request, object_id)
            if pool is not None:
                subscription = pool_subscriptions(pools=[pool])[pool.pk]
                if subscription.message:
                    messages.warning(request, subscription.message)
                else:
                    messages.info(request, subscription.summary + ".")
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="GPUs")
    def capacity(self, pool: GpuPool) -> str:
        return f"{pool.node_count} × {pool.gpus_per_node} = {pool.total_gpus}"

    @admin.display(description="MIG profiles")
    def mig_profile_list(self, pool: GpuPool) -> str:
        return ", ".join(pool.mig_profiles) or "—"

    @admin.display(description="Guaranteed by quotas")
    def subscription_summary(self, pool: GpuPool) -> str:
        return _subscription_text(pool.subscription)


def _cohort_nominal_subquery():
    return Coalesce(
        Subquery(
            ProjectQuota.objects.filter(
                project__department_id=OuterRef("project__department_id"),
                pool_id=OuterRef("pool_id"),
                resource=OuterRef("resource"),
            )
            .values("pool_id")
            .annotate(total=Sum("nominal"))
            .values("total")[:1],
            output_field=IntegerField(),
        ),
        0,
    )


def with_usable_amounts(queryset):
    """Annotate ProjectQuotas with what quotas.arithmetic needs for their maximum."""
    return queryset.annotate(
        cohort_nominal=_cohort_nominal_subquery(), department_cap=_department_cap_subquery()
    )


def quota_maximum(quota: ProjectQuota) -> int | str:
    """The most the project can use of this quota (see quotas.arithmetic.usable_amount)."""
    if quota.pk is None or quota.nominal is None:
        return "—"
    return arithmetic.usable_amount(
        nominal=quota.nominal,
        borrowing_limit=quota.borrowing_limit,
        cohort_nominal=getattr(quota, "cohort_nominal", quota.nominal),
        department_cap=getattr(quota, "department_cap", None),
    ).maximum


def _department_cap_subquery():
    return Subquery(
        DepartmentQuota.objects.filter(
            department_id=OuterRef("project__department_id"),
            pool_id=OuterRef("pool_id"),
            resource=OuterRef("resource"),
        ).values("limit")[:1],
        output_field=IntegerField(),
    )


class ProjectQuotaForm(forms.ModelForm):
    class Meta:
        model = ProjectQuota
        fields = ("project", "pool", "resource", "nominal", "borrowing_limit")
        help_texts = {
            "resource": "'gpu' for whole GPUs, or one of the pool's MIG profiles (e.g. 1g.10gb).",
            "borrowing_limit": (
                "How many more it may borrow from its department's idle quota; empty = as much "
                "as the department has idle, 0 = never borrow."
            ),
        }


@admin.register(ProjectQuota)
class ProjectQuotaAdmin(QuotaSyncOnChangeAdminMixin, admin.ModelAdmin):
    form = ProjectQuotaForm
    list_display = (
        "project",
        "department",
        "pool",
        "resource",
        "nominal",
        "borrowing",
        "maximum",
    )
    list_filter = ("pool", "project__department", "resource")
    search_fields = ("project__slug", "project__name", "pool__slug", "resource")
    list_select_related = ("project__department", "pool")

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        warn_if_oversubscribed(request, [obj.pool])

    def get_queryset(self, request):
        return with_usable_amounts(super().get_queryset(request))

    @admin.display(description="department", ordering="project__department__slug")
    def department(self, quota: ProjectQuota) -> str:
        return quota.project.department.slug

    @admin.display(description="may borrow")
    def borrowing(self, quota: ProjectQuota) -> str:
        return "any" if quota.borrowing_limit is None else str(quota.borrowing_limit)

    @admin.display(description="maximum")
    def maximum(self, quota: ProjectQuota) -> int | str:
        return quota_maximum(quota)


class DepartmentQuotaForm(forms.ModelForm):
    class Meta:
        model = DepartmentQuota
        fields = ("department", "pool", "resource", "limit")
        help_texts = {
            "resource": "'gpu' for whole GPUs, or one of the pool's MIG profiles.",
            "limit": "Upper bound on the sum of the department's projects' guaranteed quota.",
        }


@admin.register(DepartmentQuota)
class DepartmentQuotaAdmin(QuotaSyncOnChangeAdminMixin, admin.ModelAdmin):
    form = DepartmentQuotaForm
    list_display = ("department", "pool", "resource", "limit", "held", "status")
    list_filter = ("pool", "department")
    list_select_related = ("department", "pool")

    def get_queryset(self, request):
        held = Subquery(
            ProjectQuota.objects.filter(
                project__department_id=OuterRef("department_id"),
                pool_id=OuterRef("pool_id"),
                resource=OuterRef("resource"),
            )
            .values("pool_id")
            .annotate(total=Sum("nominal"))
            .values("total")[:1],
            output_field=IntegerField(),
        )
        return super().get_queryset(request).annotate(held_nominal=Coalesce(held, 0))

    @admin.display(description="held by projects")
    def held(self, cap: DepartmentQuota) -> int:
        return cap.held_nominal

    @admin.display(description="status")
    def status(self, cap: DepartmentQuota) -> str:
        if cap.held_nominal > cap.limit:
            return f"⚠ exceeded by {cap.held_nominal - cap.limit}"
        return f"{cap.limit - cap.held_nominal} left"


@admin.register(PriorityClass)
class PriorityClassAdmin(QuotaSyncOnChangeAdminMixin, admin.ModelAdmin):
    """The three classes exist on every install (data migration); admins tune, never remove."""

    list_display = ("name", "value", "preemptible", "who_may_preempt", "description")
    readonly_fields = ("name",)
    change_list_template = "admin/quotas/priorityclass/change_list.html"

    @staticmethod
    def _explanation() -> qm.PreemptionExplanation:
        return qm.explain_preemption(
            tuple(
                qm.PrioritySpec(name=pc.name, value=pc.value, preemptible=pc.preemptible)
                for pc in PriorityClass.objects.all()
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context=None):
        # The words come from the policy the ClusterQueues get, so they cannot drift apart.
        explanation = self._explanation()
        for warning in explanation.warnings:
            messages.warning(request, warning)
        context = {
            **(extra_context or {}),
            "preemption": explanation,
            "preemption_policy": json.dumps(explanation.policy, sort_keys=True),
        }
        return super().changelist_view(request, context)

    @admin.display(description="Who may preempt it")
    def who_may_preempt(self, obj: PriorityClass) -> str:
        texts = {name: text for name, _value, text in self._explanation().classes}
        return texts.get(obj.name, "")

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
