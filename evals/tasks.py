"""Celery tasks of the evals app. Thin: they call one service."""

import logging

from celery import shared_task

from .models import EvalRun
from .services import eval_run_execute

logger = logging.getLogger(__name__)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def eval_run_scheduled_task(suite: str = "release_gate", provider: str = "offline", repeat: int = 1) -> int:
    """The scheduled release gate (django-celery-beat, see migration 0003): runs the suite and
    stores the run with trigger 'schedule'. A redelivered task runs the suite again: each run
    is self-contained (every case is rolled back) and stored as its own EvalRun."""
    run = eval_run_execute(suite=suite, provider=provider, repeat=repeat, trigger=EvalRun.Trigger.SCHEDULE)
    if not run.passed:
        logger.error("scheduled eval run #%s (%s): release gate failed: %s", run.pk, suite, run.gate_failures)
    return run.pk
