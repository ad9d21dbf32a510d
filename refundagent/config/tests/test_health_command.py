"""`manage.py health --only beat`: the beat container's health check."""

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from refundagent.config.health import BEAT_TASK


@pytest.fixture
def with_broker(settings, monkeypatch):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr("refundagent.config.health._broker", lambda: "ok")
    monkeypatch.setattr("refundagent.config.health._worker", lambda: "ok")


def test_beat_is_healthy_when_the_sweep_ran_lately(db, with_broker, capsys):
    PeriodicTask.objects.filter(task=BEAT_TASK).update(last_run_at=timezone.now() - timedelta(minutes=2))
    call_command("health", only="beat")
    assert '"beat": "ok"' in capsys.readouterr().out


def test_beat_that_never_ran_fails_the_check(db, with_broker):
    PeriodicTask.objects.filter(task=BEAT_TASK).update(last_run_at=None)
    with pytest.raises(CommandError, match="failing: beat"):
        call_command("health", only="beat")


def test_an_unknown_check_is_refused(db, with_broker):
    with pytest.raises(CommandError, match="Unknown check"):
        call_command("health", only="bet")
