"""Create the three priority classes every install has.

Values follow Kubernetes PriorityClass conventions (higher runs first). Only "high" is protected
from preemption: a high job is never evicted to make room for another, while normal and low jobs
may be preempted by higher-priority work in their queue and reclaimed when a lender needs its
quota back. Admins may edit the values and descriptions; the migration only fills in missing rows.
"""

from django.db import migrations

# One set of values for the migration, the demo and the tests (a pure constants module).
from quotas.priority_defaults import PRIORITY_CLASSES


def create_priority_classes(apps, schema_editor):
    PriorityClass = apps.get_model("quotas", "PriorityClass")
    for name, value, preemptible, description in PRIORITY_CLASSES:
        PriorityClass.objects.get_or_create(
            name=name,
            defaults={"value": value, "preemptible": preemptible, "description": description},
        )


class Migration(migrations.Migration):
    dependencies = [
        ("quotas", "0002_pool_validators"),
    ]

    operations = [
        migrations.RunPython(create_priority_classes, migrations.RunPython.noop),
    ]
