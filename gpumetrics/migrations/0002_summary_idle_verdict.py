"""The idle verdict of a job's summary (idle | busy | too_short), and the summaries already
stored judged again on the evidence their devices show: a job whose GPUs were sampled in fewer
than 5 sweeps, or over less than 5 minutes, is too short to judge and no longer flagged idle."""

from django.db import migrations, models
from django.db.models import Max, Min

# The rule's defaults when this migration was written (gpumetrics.idle); fixed here on purpose.
MIN_SWEEPS = 5
MIN_SPAN_SECONDS = 300


def judge_existing(apps, schema_editor):
    JobGpuSummary = apps.get_model("gpumetrics", "JobGpuSummary")
    JobGpu = apps.get_model("gpumetrics", "JobGpu")
    evidence = {
        row["job_id"]: row
        for row in JobGpu.objects.values("job_id").annotate(
            sweeps=Max("samples"), first=Min("first_seen"), last=Max("last_seen")
        )
    }
    for summary in JobGpuSummary.objects.all().only("pk", "idle", "samples").iterator():
        seen = evidence.get(summary.pk)
        enough = (
            seen is not None
            and seen["sweeps"] >= MIN_SWEEPS
            and (seen["last"] - seen["first"]).total_seconds() >= MIN_SPAN_SECONDS
        )
        verdict = ("idle" if summary.idle else "busy") if enough else "too_short"
        JobGpuSummary.objects.filter(pk=summary.pk).update(
            idle_verdict=verdict, idle=verdict == "idle"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("gpumetrics", "0001_gpu_metrics"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobgpusummary",
            name="idle_verdict",
            field=models.CharField(
                choices=[("idle", "Idle"), ("busy", "Busy"), ("too_short", "Too short to judge")],
                default="too_short",
                max_length=16,
            ),
        ),
        migrations.RunPython(judge_existing, migrations.RunPython.noop),
    ]
