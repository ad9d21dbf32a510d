import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")

app = Celery("refundagent")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
