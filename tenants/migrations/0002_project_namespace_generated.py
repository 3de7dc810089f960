"""The project's namespace becomes a column the database computes from the slug ("gp-" + slug),
instead of a copy that Project.save() had to keep in step. PostgreSQL and SQLite cannot turn a
plain column into a generated one, so the column is dropped and added back (same values)."""

import django.db.models.functions.text
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.RemoveField(model_name="project", name="namespace"),
        migrations.AddField(
            model_name="project",
            name="namespace",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.db.models.functions.text.Concat(models.Value("gp-"), "slug"),
                output_field=models.CharField(max_length=63),
                db_index=True,
            ),
        ),
    ]
