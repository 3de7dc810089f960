import django.db.models
from django.db import migrations

import tenants.models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0002_project_namespace_generated"),
    ]

    operations = [
        # Existing projects keep what their pods were built for (baseline); new ones get the
        # site default (PORTAL_DEFAULT_POD_SECURITY).
        migrations.AddField(
            model_name="project",
            name="pod_security",
            field=django.db.models.CharField(default="baseline", max_length=16),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="project",
            name="pod_security",
            field=django.db.models.CharField(
                choices=[
                    ("restricted", "Restricted: pods run as the project's own non-root uid"),
                    ("baseline", "Baseline: images may run as root (for images that need it)"),
                ],
                default=tenants.models.default_pod_security,
                help_text="Restricted runs every pod as the project's uid/gid, non-root, with no privilege escalation and no capabilities; choose baseline only for images that must run as root.",
                max_length=16,
            ),
        ),
    ]
