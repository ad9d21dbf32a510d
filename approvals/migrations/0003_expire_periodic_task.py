"""Register the expiry sweep with django-celery-beat, so an operator can change or pause it in
the admin (Periodic tasks) without a deploy."""

from django.db import migrations

TASK_NAME = "approvals: expire approval requests"
TASK = "approvals.tasks.approval_requests_expire_task"


def register(apps, schema_editor):
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    every_five, _ = IntervalSchedule.objects.get_or_create(every=5, period="minutes")
    PeriodicTask.objects.get_or_create(
        name=TASK_NAME,
        defaults={
            "task": TASK,
            "interval": every_five,
            "enabled": True,
            "description": "Marks pending approval requests past their expiry as expired (ticket → escalated).",
        },
    )


def unregister(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK_NAME, task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0002_seed_capabilities"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(register, unregister)]
