"""GPU metrics per job: which devices a job ran on, its packed samples and its summary.

Storage layout (see gpumetrics.codec): one MetricBlock row per job GPU × resolution × aligned
span holds that span's samples as packed arrays, so a raw sample costs a few bytes instead of a
row. Rollups (1-minute and hourly mean/max) are blocks of their own, written when the job ends.
"""

from django.db import models

from gpumetrics import idle as idle_rule
from jobs.models import Job

IDLE_VERDICT_CHOICES = [
    (idle_rule.IDLE, "Idle"),
    (idle_rule.BUSY, "Busy"),
    (idle_rule.TOO_SHORT, "Too short to judge"),
]


class JobGpu(models.Model):
    """A GPU (or one MIG GPU instance) a job's pod was seen on by dcgm-exporter."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="gpu_devices")
    node = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    gpu_index = models.CharField(max_length=8, blank=True)
    # MIG: the GPU instance id (GPU_I_ID) and profile; empty for a whole GPU.
    mig_instance_id = models.CharField(max_length=8, blank=True)
    mig_profile = models.CharField(max_length=32, blank=True)
    model_name = models.CharField(max_length=64, blank=True)
    pod = models.CharField(max_length=253)
    container = models.CharField(max_length=253, blank=True)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    samples = models.PositiveIntegerField(default=0)
    # The last XID value reported for this device while the job held it (0 = none).
    last_xid = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["job_id", "pod", "gpu_uuid", "mig_instance_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "gpu_uuid", "mig_instance_id", "pod"], name="unique_job_device_pod"
            )
        ]
        indexes = [models.Index(fields=["gpu_uuid", "mig_instance_id", "last_seen"])]

    def __str__(self) -> str:
        device = (
            f"{self.gpu_uuid}/gi{self.mig_instance_id}" if self.mig_instance_id else self.gpu_uuid
        )
        return f"job {self.job_id} on {device}"


class MetricBlock(models.Model):
    """Packed samples of one job GPU at one resolution (0 = raw, 60, 3600 seconds)."""

    device = models.ForeignKey(JobGpu, on_delete=models.CASCADE, related_name="blocks")
    resolution = models.PositiveIntegerField()
    start = models.BigIntegerField(help_text="Block start, epoch seconds (aligned).")
    end = models.BigIntegerField(help_text="Time of the last sample, epoch seconds.")
    ts = models.BinaryField()
    vals = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["device", "resolution", "start"], name="unique_block_per_span"
            )
        ]
        indexes = [models.Index(fields=["resolution", "end"])]

    def __str__(self) -> str:
        return f"block {self.device_id}@{self.resolution}s from {self.start}"


class JobGpuSummary(models.Model):
    """Efficiency figures of a job: refreshed while it runs, final once it has ended."""

    job = models.OneToOneField(
        Job, on_delete=models.CASCADE, primary_key=True, related_name="gpu_summary"
    )
    util_mean = models.FloatField(null=True)
    util_p95 = models.FloatField(null=True)
    fb_peak_mib = models.FloatField(null=True)
    fb_total_mib = models.FloatField(null=True)
    energy_kwh = models.FloatField(default=0.0)
    gpu_hours = models.FloatField(default=0.0)
    idle_fraction = models.FloatField(null=True)
    idle = models.BooleanField(default=False)  # only on enough evidence (gpumetrics.idle)
    idle_verdict = models.CharField(
        max_length=16, choices=IDLE_VERDICT_CHOICES, default=idle_rule.TOO_SHORT
    )
    idle_threshold = models.FloatField(default=10.0)
    samples = models.PositiveIntegerField(default=0)
    final = models.BooleanField(default=False)
    computed_at = models.DateTimeField(null=True)
    rolled_up_at = models.DateTimeField(null=True)
    # Set when the "idle for 30 minutes" warning event was written (once per job).
    idle_warned_at = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return f"GPU summary of job {self.job_id}"


class ExporterStatus(models.Model):
    """Scrape bookkeeping per dcgm-exporter pod: successes, failures, skipped lines."""

    pod = models.CharField(max_length=253, unique=True)
    node = models.CharField(max_length=253, blank=True)
    last_success = models.DateTimeField(null=True)
    last_failure = models.DateTimeField(null=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    skipped_lines = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["pod"]
        verbose_name_plural = "exporter statuses"

    def __str__(self) -> str:
        return self.pod


class NodeHourTotal(models.Model):
    """Readings of GPUs no portal job held, summed per node and hour (the cluster view)."""

    node = models.CharField(max_length=253)
    hour = models.DateTimeField()
    device_samples = models.PositiveIntegerField(default=0)
    held_by_others = models.PositiveIntegerField(default=0)
    util_sum = models.FloatField(default=0.0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "hour"], name="unique_node_hour")]

    def __str__(self) -> str:
        return f"{self.node} {self.hour:%Y-%m-%d %H}:00"
