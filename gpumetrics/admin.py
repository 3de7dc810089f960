from django.contrib import admin

from gpumetrics.models import ExporterStatus, JobGpu, JobGpuSummary


@admin.register(JobGpu)
class JobGpuAdmin(admin.ModelAdmin):
    list_display = ["job", "node", "gpu_uuid", "mig_instance_id", "mig_profile", "pod", "last_seen"]
    search_fields = ["gpu_uuid", "node", "pod"]
    readonly_fields = [f.name for f in JobGpu._meta.fields]


@admin.register(JobGpuSummary)
class JobGpuSummaryAdmin(admin.ModelAdmin):
    list_display = ["job", "util_mean", "util_p95", "gpu_hours", "energy_kwh", "idle", "final"]
    list_filter = ["idle", "final"]


@admin.register(ExporterStatus)
class ExporterStatusAdmin(admin.ModelAdmin):
    list_display = [
        "pod",
        "node",
        "last_success",
        "last_failure",
        "consecutive_failures",
        "failures",
        "skipped_lines",
    ]
