"""The scheduled release gate: beat's task stores an EvalRun with its results."""

import time

import pytest

from evals.models import EvalRun


@pytest.mark.django_db
def test_the_beat_task_is_registered_and_editable():
    from django_celery_beat.models import PeriodicTask

    task = PeriodicTask.objects.get(task="evals.tasks.eval_run_scheduled_task")
    assert task.enabled and task.crontab is not None
    assert '"release_gate"' in task.kwargs


@pytest.mark.django_db
def test_the_scheduled_task_called_directly_stores_the_run(caplog):
    from evals.tasks import eval_run_scheduled_task

    run_id = eval_run_scheduled_task(suite="release_gate")
    run = EvalRun.objects.get(pk=run_id)
    assert run.trigger == "schedule" and run.suite == "release_gate" and run.passed
    assert run.results.count() == run.total > 20
    assert run.finished_at is not None and run.metrics["false_allow"] == 0


@pytest.mark.django_db
def test_a_failed_scheduled_gate_is_logged_at_error(monkeypatch, caplog):
    from approvals import gate
    from evals.tasks import eval_run_scheduled_task
    from evals.tests.test_release_gate import broken_gate

    monkeypatch.setattr(gate, "policy_gate_evaluate", broken_gate(gate.policy_gate_evaluate))
    with caplog.at_level("ERROR"):
        run = EvalRun.objects.get(pk=eval_run_scheduled_task(suite="release_gate"))
    assert run.passed is False
    assert any(r.levelname == "ERROR" and "release gate" in r.getMessage() for r in caplog.records)


@pytest.mark.worker
def test_the_scheduled_task_through_a_real_worker_stores_the_run(celery_worker_process):
    from evals.tasks import eval_run_scheduled_task

    celery_worker_process.start()
    eval_run_scheduled_task.delay(suite="release_gate")
    deadline = time.monotonic() + 240
    run = None
    while time.monotonic() < deadline:
        run = EvalRun.objects.filter(trigger="schedule", finished_at__isnull=False).first()
        if run is not None:
            break
        time.sleep(1)
    assert run is not None, "the worker did not store a scheduled run in time"
    assert run.passed and run.results.count() == run.total > 20
