"""Register the scheduled release-gate run with django-celery-beat: daily at 03:00 UTC. An
operator changes the time, the suite (kwargs) or pauses it in the admin (Periodic tasks)
without a deploy."""

import json

from django.db import migrations

TASK_NAME = "evals: release gate (daily)"
TASK = "evals.tasks.eval_run_scheduled_task"


def register(apps, schema_editor):
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    daily, _ = CrontabSchedule.objects.get_or_create(
        minute="0", hour="3", day_of_week="*", day_of_month="*", month_of_year="*", timezone="UTC"
    )
    PeriodicTask.objects.get_or_create(
        name=TASK_NAME,
        defaults={
            "task": TASK,
            "crontab": daily,
            "kwargs": json.dumps({"suite": "release_gate"}),
            "enabled": True,
            "description": "Runs the release-gate eval suite (offline provider) and stores the run; "
            "a failed gate is logged at ERROR and shown in the admin (Eval runs).",
        },
    )


def unregister(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK_NAME, task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("evals", "0002_run_metrics_and_result_flags"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(register, unregister)]
