"""Admin console for GPU pools, quotas, department caps, priority classes and the quota sync.

Every write goes through quotas.services (see quotas.admin_base); the forms show the models' own
checks and the services' cross-row rules as field errors, so the admin, the API and the services
give the same messages. Numbers shown (maximum, subscription) come from quotas.arithmetic.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import DecimalField, IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from quotas import arithmetic, mig, services
from quotas import manifests as qm
from quotas.admin_base import QuotaSyncOnChangeAdminMixin, ServiceModelAdmin, add_service_errors
from quotas.models import (
    DepartmentQuota,
    GpuPool,
    OrphanedNamespace,
    PriorityClass,
    ProjectQuota,
    QuotaSyncStatus,
    SyncOutcome,
)
from quotas.selectors import pool_subscriptions
from quotas.sync import delete_orphaned_namespace
from quotas.tasks import enqueue_quota_sync


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
            "max_shm_size",
            "max_termination_grace_seconds",
            "scheduler",
            "kai_fractions_allowed",
            "kai_fraction_step",
            "gpu_memory_mib",
            "kai_over_quota_weight",
        )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Issue 12's pod limits: left empty, a pool keeps (or gets) the model's default.
        for name in (
            "max_shm_size",
            "max_termination_grace_seconds",
            "scheduler",
            "kai_fraction_step",
            "kai_over_quota_weight",
        ):
            self.fields[name].required = False

    def _limit_or_default(self, name: str):
        value = self.cleaned_data.get(name)
        if value in (None, ""):
            current = getattr(self.instance, name, None) if self.instance.pk else None
            return current if current not in (None, "") else GpuPool._meta.get_field(name).default
        return value

    def clean_max_shm_size(self):
        return self._limit_or_default("max_shm_size")

    def clean_max_termination_grace_seconds(self):
        return self._limit_or_default("max_termination_grace_seconds")

    # Issue 25: left empty, a pool keeps its scheduler and KAI settings (new pools: Kueue).
    def clean_scheduler(self):
        return self._limit_or_default("scheduler")

    def clean_kai_fraction_step(self):
        return self._limit_or_default("kai_fraction_step")

    def clean_kai_over_quota_weight(self):
        return self._limit_or_default("kai_over_quota_weight")

    def _post_clean(self) -> None:
        super()._post_clean()  # the model's own checks (and normalisation)
        if not self.has_error("mig_profiles"):
            add_service_errors(self, services.pool_conflicts(self.instance))


def warn_if_oversubscribed(request: HttpRequest, pools) -> None:
    """After a quota change: tell the admin which pools now promise more GPUs than they have."""
    for subscription in pool_subscriptions(pools=pools).values():
        if subscription.message:
            messages.warning(request, subscription.message)


def save_project_quota(actor, obj: ProjectQuota) -> ProjectQuota:
    """Write a quota as the admin form built it; a change of its pool, resource or project
    replaces the old row (both in the admin's transaction)."""
    if obj.pk is not None:
        old = ProjectQuota.objects.select_related("project", "pool").get(pk=obj.pk)
        moved = (old.project_id, old.pool_id, old.resource) != (
            obj.project_id,
            obj.pool_id,
            obj.resource,
        )
        if moved:
            services.quota_delete(
                actor=actor, project=old.project, pool=old.pool, resource=old.resource
            )
    return services.quota_set(
        actor=actor,
        project=obj.project,
        pool=obj.pool,
        resource=obj.resource,
        nominal=obj.nominal,
        borrowing_limit=obj.borrowing_limit,
        over_quota_weight=obj.over_quota_weight,
    )


def save_department_quota(actor, obj: DepartmentQuota) -> DepartmentQuota:
    """Write a department cap as the admin form built it (see save_project_quota)."""
    if obj.pk is not None:
        old = DepartmentQuota.objects.select_related("department", "pool").get(pk=obj.pk)
        if (old.department_id, old.pool_id, old.resource) != (
            obj.department_id,
            obj.pool_id,
            obj.resource,
        ):
            services.department_quota_delete(
                actor=actor, department=old.department, pool=old.pool, resource=old.resource
            )
    return services.department_quota_set(
        actor=actor,
        department=obj.department,
        pool=obj.pool,
        resource=obj.resource,
        limit=obj.limit,
    )


def warn_about_quota_sync(request: HttpRequest) -> None:
    """Tell staff on the quota pages when the last sync refused deletions or failed, and which
    namespaces of deleted projects the sync keeps (never deletes)."""
    status = QuotaSyncStatus.objects.filter(pk=1).first()
    if status is not None and status.outcome != SyncOutcome.OK:
        messages.warning(
            request,
            f"The last quota sync ({status.finished_at:%Y-%m-%d %H:%M} UTC): "
            f"{status.get_outcome_display()}. {status.message} See Quota sync status.",
        )
    orphans = list(OrphanedNamespace.objects.values_list("namespace", flat=True)[:20])
    if orphans:
        messages.warning(
            request,
            f"Namespaces of deleted projects are kept in the cluster, marked, not deleted: "
            f"{', '.join(orphans)}. Review them under Orphaned namespaces.",
        )


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
class GpuPoolAdmin(QuotaSyncOnChangeAdminMixin, ServiceModelAdmin):
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
        ("Pod limits", {"fields": ("max_shm_size", "max_termination_grace_seconds")}),
        (
            "Scheduler and GPU fractions",
            {
                "fields": (
                    "scheduler",
                    "kai_over_quota_weight",
                    "kai_fractions_allowed",
                    "kai_fraction_step",
                    "gpu_memory_mib",
                )
            },
        ),
    )

    def get_readonly_fields(self, request, obj=None):
        # The slug names the Kueue ResourceFlavor; renaming a live pool would orphan it.
        return ("slug",) if obj is not None else ()

    def service_save(self, request, obj: GpuPool, form, change: bool) -> GpuPool:
        fields = {name: getattr(obj, name) for name in services.POOL_FIELDS}
        if change:
            return services.pool_update(actor=request.user, pool=obj, **fields)
        return services.pool_create(actor=request.user, slug=obj.slug, **fields)

    def service_delete(self, request, obj: GpuPool) -> None:
        services.pool_delete(actor=request.user, pool=obj)

    def get_changelist(self, request, **kwargs):
        return PoolChangeList

    def changelist_view(self, request: HttpRequest, extra_context=None):
        warn_about_quota_sync(request)
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


def with_current_use(queryset):
    """Annotate ProjectQuotas with `in_use_now`: what the project uses of that pool and
    resource now, as the cluster's queues report it (jobs.QueueUsage, kept by the watcher)."""
    from jobs.models import QueueUsage  # jobs depends on quotas, not the other way round

    in_use = Subquery(
        QueueUsage.objects.filter(
            project_id=OuterRef("project_id"),
            pool=OuterRef("pool__slug"),
            resource=OuterRef("resource"),
        )
        .values("project_id")
        .annotate(total=Sum("in_use"))
        .values("total")[:1],
        output_field=DecimalField(max_digits=12, decimal_places=3),
    )
    return queryset.annotate(in_use_now=in_use)


def current_use(quota: ProjectQuota) -> str:
    """'3 of 8' (use now of the guaranteed quota); '—' before the cluster reported any."""
    value = getattr(quota, "in_use_now", None)
    if quota.pk is None or value is None:
        return "—"
    return f"{value.normalize():f} of {quota.nominal}"


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
        fields = ("project", "pool", "resource", "nominal", "borrowing_limit", "over_quota_weight")
        help_texts = {
            "resource": "'gpu' for whole GPUs, or one of the pool's MIG profiles (e.g. 1g.10gb).",
            "borrowing_limit": (
                "How many more it may borrow from its department's idle quota; empty = as much "
                "as the department has idle, 0 = never borrow."
            ),
        }

    def _post_clean(self) -> None:
        super()._post_clean()
        if not self.errors:
            add_service_errors(self, services.project_quota_conflicts(self.instance))


@admin.register(ProjectQuota)
class ProjectQuotaAdmin(QuotaSyncOnChangeAdminMixin, ServiceModelAdmin):
    form = ProjectQuotaForm
    list_display = (
        "project",
        "department",
        "pool",
        "resource",
        "nominal",
        "borrowing",
        "maximum",
        "in_use",
    )
    list_filter = ("pool", "project__department", "resource")
    search_fields = ("project__slug", "project__name", "pool__slug", "resource")
    list_select_related = ("project__department", "pool")

    def service_save(self, request, obj: ProjectQuota, form, change: bool) -> ProjectQuota:
        quota = save_project_quota(request.user, obj)
        warn_if_oversubscribed(request, [quota.pool])
        return quota

    def service_delete(self, request, obj: ProjectQuota) -> None:
        services.quota_delete(
            actor=request.user, project=obj.project, pool=obj.pool, resource=obj.resource
        )

    def changelist_view(self, request: HttpRequest, extra_context=None):
        warn_about_quota_sync(request)
        return super().changelist_view(request, extra_context)

    def get_queryset(self, request):
        return with_current_use(with_usable_amounts(super().get_queryset(request)))

    @admin.display(description="in use now")
    def in_use(self, quota: ProjectQuota) -> str:
        return current_use(quota)

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

    def _post_clean(self) -> None:
        super()._post_clean()
        if not self.errors:
            add_service_errors(self, services.department_quota_conflicts(self.instance))


@admin.register(DepartmentQuota)
class DepartmentQuotaAdmin(QuotaSyncOnChangeAdminMixin, ServiceModelAdmin):
    form = DepartmentQuotaForm
    list_display = ("department", "pool", "resource", "limit", "held", "status")
    list_filter = ("pool", "department")
    list_select_related = ("department", "pool")

    def service_save(self, request, obj: DepartmentQuota, form, change: bool) -> DepartmentQuota:
        return save_department_quota(request.user, obj)

    def service_delete(self, request, obj: DepartmentQuota) -> None:
        services.department_quota_delete(
            actor=request.user, department=obj.department, pool=obj.pool, resource=obj.resource
        )

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
class PriorityClassAdmin(QuotaSyncOnChangeAdminMixin, ServiceModelAdmin):
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

    def service_save(self, request, obj: PriorityClass, form, change: bool) -> PriorityClass:
        return services.priority_class_update(
            actor=request.user,
            priority=obj,
            **{name: getattr(obj, name) for name in services.PRIORITY_FIELDS},
        )

    def service_delete(self, request, obj: PriorityClass) -> None:
        raise PermissionDenied("Priority classes are tuned, never removed.")

    def has_add_permission(self, request) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(QuotaSyncStatus)
class QuotaSyncStatusAdmin(admin.ModelAdmin):
    """What the last quota sync did, and the way to confirm deletions it refused."""

    list_display = ("outcome", "finished_at", "applied", "unchanged", "deleted", "message")
    readonly_fields = (
        "outcome",
        "started_at",
        "finished_at",
        "applied",
        "unchanged",
        "deleted",
        "message",
        "refused_deletions",
    )
    actions = ("run_sync_now", "confirm_refused_deletions")

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Run the quota sync now")
    def run_sync_now(self, request: HttpRequest, queryset) -> None:
        enqueue_quota_sync()
        self.message_user(request, "A quota sync was queued; reload this page to see its outcome.")

    @admin.action(description="Run the quota sync now and delete the objects it refused to delete")
    def confirm_refused_deletions(self, request: HttpRequest, queryset) -> None:
        refused = [name for status in queryset for name in status.refused_deletions]
        if not refused:
            self.message_user(request, "The last sync refused no deletions.", messages.INFO)
            return
        services.audit.info(
            "quota_sync_confirm_deletions actor=%s objects=%s",
            request.user.get_username(),
            refused,
        )
        enqueue_quota_sync(confirmed_deletions=refused)
        self.message_user(
            request,
            f"A quota sync was queued that may delete these {len(refused)} objects (and no "
            f"others beyond the usual limit): {', '.join(refused)}.",
            messages.WARNING,
        )


@admin.register(OrphanedNamespace)
class OrphanedNamespaceAdmin(admin.ModelAdmin):
    """Namespaces whose project is gone. The sync only marks them; deleting one (with everything
    in it) is a person's decision, taken here or with kubectl."""

    list_display = ("namespace", "project_slug", "marked_at", "last_seen_at")
    readonly_fields = ("namespace", "project_slug", "marked_at", "last_seen_at")
    actions = ("delete_in_cluster",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    @admin.action(description="Delete these namespaces in the cluster, with everything in them")
    def delete_in_cluster(self, request: HttpRequest, queryset) -> None:
        for orphan in queryset:
            try:
                delete_orphaned_namespace(actor=request.user, namespace=orphan.namespace)
            except Exception as exc:  # shown to the admin; one failure does not stop the rest
                self.message_user(request, f"{orphan.namespace}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"Namespace {orphan.namespace} is being deleted.")
