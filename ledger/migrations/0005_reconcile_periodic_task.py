"""Register the daily payments reconciliation with django-celery-beat (editable in the admin)."""

from django.db import migrations

TASK_NAME = "ledger: reconcile payments with the provider"
TASK = "ledger.tasks.payments_reconcile_task"


def register(apps, schema_editor):
    CrontabSchedule = apps.get_model("django_celery_beat", "CrontabSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    daily, _ = CrontabSchedule.objects.get_or_create(minute="30", hour="3", day_of_week="*", day_of_month="*",
                                                     month_of_year="*", timezone="UTC")
    PeriodicTask.objects.get_or_create(
        name=TASK_NAME,
        defaults={
            "task": TASK,
            "crontab": daily,
            "enabled": True,
            "description": "Compares the provider's refunds of the last days with the ledger; differences become "
                           "reconciliation findings for finance.",
        },
    )


def unregister(apps, schema_editor):
    apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=TASK_NAME, task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0004_payment_status_triggers"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]
    operations = [migrations.RunPython(register, unregister)]
