from django.apps import AppConfig


class GpuMetricsConfig(AppConfig):
    name = "gpumetrics"
    verbose_name = "GPU metrics"
