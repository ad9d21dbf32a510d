"""A trace event's time is when it was recorded, not when the step that carries it was written
(the agent writes a step's events with the step): a default instead of auto_now_add, which
bulk_create would overwrite. No change in the database."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("refundagent", "0008_approvalrequest_filed_by_backfill"),
    ]

    operations = [
        migrations.AlterField(
            model_name="traceevent",
            name="at",
            field=models.DateTimeField(default=django.utils.timezone.now, editable=False),
        ),
    ]
