"""`python -m refundagent.config.healthcheck --only beat`: the beat container's health check."""

from datetime import timedelta

import pytest
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from refundagent.config.health import BEAT_TASK
from refundagent.config.healthcheck import main


@pytest.fixture
def with_broker(settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr("refundagent.config.health._broker", lambda: "ok")
    monkeypatch.setattr("refundagent.config.health._worker", lambda: "ok")


def _sweep(last_run_at):
    interval, _ = IntervalSchedule.objects.get_or_create(every=5, period=IntervalSchedule.MINUTES)
    PeriodicTask.objects.update_or_create(
        task=BEAT_TASK,
        defaults={
            "name": "approvals: expire approval requests",
            "interval": interval,
            "enabled": True,
            "last_run_at": last_run_at,
        },
    )


def test_beat_is_healthy_when_the_sweep_ran_lately(db, with_broker, capsys):
    _sweep(timezone.now() - timedelta(minutes=2))
    assert main(["--only", "beat"]) == 0
    assert '"beat": "ok"' in capsys.readouterr().out


def test_beat_that_never_ran_fails_the_check(db, with_broker, capsys):
    # given the sweep scheduled 16 minutes ago (3 intervals and more) and never run
    _sweep(None)
    PeriodicTask.objects.filter(task=BEAT_TASK).update(date_changed=timezone.now() - timedelta(minutes=16))
    assert main(["--only", "beat"]) == 1
    assert "never ran" in capsys.readouterr().out


def test_a_fresh_deployment_whose_sweep_has_not_run_yet_is_healthy(db, with_broker, capsys):
    # given the sweep scheduled just now (migrate on a fresh deployment): beat runs it after an interval
    _sweep(None)
    assert main(["--only", "beat"]) == 0
    assert '"beat": "ok"' in capsys.readouterr().out


def test_an_unknown_check_is_refused(db, with_broker):
    assert main(["--only", "bet"]) == 2
