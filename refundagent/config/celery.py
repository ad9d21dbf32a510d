import logging.config
import os

import django
from celery import Celery
from celery.signals import setup_logging, worker_init
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "refundagent.config.settings")

app = Celery("refundagent")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect(weak=False)
def _logging_from_settings(**kwargs):
    """The worker and beat log like the web process (settings.LOGGING: JSON in production, each
    line with the task id, tenant, ticket and trace id) instead of Celery's own root handler."""
    logging.config.dictConfig(settings.LOGGING)


@worker_init.connect(weak=False)
def _observability(**kwargs):
    """Tracing, Sentry and the task context in the worker, before its pool forks (the span
    exporter's thread restarts in each child)."""
    django.setup()
    # Imported here, not at the top: this module loads before the apps, and observability reads models.
    from .observability import observability_setup

    observability_setup()
