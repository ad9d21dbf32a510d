"""GET /api/health: the database, the broker (or eager mode), a worker's ping, beat's last run,
the oldest queued ticket and approved refund, and the migrations, for anyone."""

import os
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.test import Client
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from refundagent.config.celery import app as celery_app
from refundagent.config.health import BEAT_TASK

REDIS_URL = os.getenv("CELERY_BROKER_URL", "")


@pytest.fixture
def broker(settings):
    """Point the settings and the Celery app at a broker for one test, then restore both.

    The app read CELERY_BROKER_URL when it was configured; with the CELERY_ namespace a later
    `conf.broker_url = ...` does not win over the Django setting, but `broker_write_url`
    (which `connection_for_write` uses) does."""
    previous = celery_app.conf.broker_write_url

    def use(url):
        settings.CELERY_BROKER_URL = url
        settings.CELERY_TASK_ALWAYS_EAGER = False
        celery_app.conf.broker_write_url = url

    yield use
    celery_app.conf.broker_write_url = previous


def staff_client() -> Client:
    """A signed-in staff user's client: the one that sees the numbers behind the verdicts."""
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.create_user("health-staff", is_staff=True))
    return client


def test_health_without_a_broker_is_eager(db, settings):
    settings.CELERY_BROKER_URL = "memory://localhost/"
    settings.CELERY_TASK_ALWAYS_EAGER = True

    response = staff_client().get("/api/health")

    assert response.status_code == 200
    body = response.json()
    assert body.pop("details")["queued_tickets"] == {"count": 0, "oldest_age_seconds": None, "threshold_seconds": 900}
    assert body == {
        "status": "ok",
        "database": "ok",
        "broker": "eager",
        "worker": "eager",
        "beat": "eager",
        "migrations": "ok",
        "queued_tickets": "ok",
        "approved_unexecuted": "ok",
        "ticket_followups": "ok",
    }
    # and anyone else gets the same verdicts without the numbers behind them
    anonymous = Client().get("/api/health").json()
    assert anonymous.pop("details") == {} and anonymous == body


@pytest.mark.skipif(
    not REDIS_URL.startswith("redis://") and os.getenv("CI") != "true", reason="needs CELERY_BROKER_URL=redis://..."
)
def test_health_with_redis_but_no_worker_reports_the_broker_ok_and_the_worker_failing(db, broker, settings):
    assert REDIS_URL.startswith("redis://"), "CI must run this test: set CELERY_BROKER_URL to Redis"
    broker(REDIS_URL)
    settings.HEALTH_WORKER_PING_TIMEOUT = 0.3
    celery_app.control.purge()

    response = Client().get("/api/health")

    # no worker answers: 503, though the broker and the database are fine
    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"], body["broker"]) == ("error", "ok", "ok")
    assert body["worker"].startswith("error: no worker answered")


def test_health_with_an_unreachable_broker_says_so(db, broker):
    broker("redis://127.0.0.1:1/0")  # nothing listens on port 1

    response = Client().get("/api/health")

    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"]) == ("error", "ok")
    assert body["broker"].startswith("error")


# --- worker, beat, migrations and backlog checks -----------------------------------------------------


def _beat_ran(ago=timedelta(0)):
    """The sweep's periodic task (a data migration's row, which a transactional test's flush
    removes: made again then) last ran `ago`."""
    interval, _ = IntervalSchedule.objects.get_or_create(every=5, period=IntervalSchedule.MINUTES)
    PeriodicTask.objects.update_or_create(
        task=BEAT_TASK,
        defaults={
            "name": "approvals: expire approval requests",
            "interval": interval,
            "enabled": True,
            "last_run_at": timezone.now() - ago,
        },
    )


@pytest.mark.worker
def test_health_is_503_without_a_worker_and_200_with_one(celery_worker_process, settings):
    # given a broker, beat's sweep that ran a minute ago, nothing queued, and no worker
    settings.HEALTH_WORKER_PING_TIMEOUT = 1.0
    _beat_ran(timedelta(minutes=1))
    # when nothing answers the ping: 503, the worker failing
    response = Client().get("/api/health")
    assert response.status_code == 503
    assert response.json()["worker"].startswith("error: no worker answered")
    # when a real worker runs: 200, every check ok
    celery_worker_process.start()
    response = Client().get("/api/health")
    assert response.status_code == 200, response.json()
    body = response.json()
    body.pop("details")
    assert body == {
        "status": "ok",
        "database": "ok",
        "broker": "ok",
        "worker": "ok",
        "beat": "ok",
        "migrations": "ok",
        "queued_tickets": "ok",
        "approved_unexecuted": "ok",
        "ticket_followups": "ok",
    }


def test_beat_that_has_not_run_for_three_intervals_fails(db, settings, monkeypatch):
    # given a broker-backed setup whose worker answers, and the 5-minute sweep last run 16 minutes ago
    settings.CELERY_TASK_ALWAYS_EAGER = False
    monkeypatch.setattr("refundagent.config.health._broker", lambda: "ok")
    monkeypatch.setattr("refundagent.config.health._worker", lambda: "ok")
    _beat_ran(timedelta(minutes=16))
    # when the health is asked
    response = Client().get("/api/health")
    # then beat fails, with how late it is
    assert response.status_code == 503
    assert response.json()["beat"].startswith("error: 'approvals: expire approval requests' last ran 9")
    # and 14 minutes is still fine
    _beat_ran(timedelta(minutes=14))
    assert Client().get("/api/health").status_code == 200


def test_an_old_queued_ticket_and_an_old_approved_refund_fail(demo, settings, user):
    # given a ticket queued 20 minutes ago (threshold 15) in eager mode
    from refundagent.models import Ticket

    settings.CELERY_TASK_ALWAYS_EAGER = True
    ticket = Ticket.objects.create(
        tenant=demo["acme"],
        customer_id=demo["acme"].customers.first().pk,
        message="Refund.",
        created_by=user("acme-support"),
    )
    Ticket.objects.filter(pk=ticket.pk).update(created_at=timezone.now() - timedelta(minutes=20))
    # when the health is asked (by staff, who see the numbers)
    response = staff_client().get("/api/health")
    # then the queue check fails and says how old
    assert response.status_code == 503
    body = response.json()
    assert body["queued_tickets"].startswith("error: the oldest is 1200 s old")
    assert body["details"]["queued_tickets"]["count"] == 1
    assert body["approved_unexecuted"] == "ok"


def test_a_migration_not_applied_fails_the_check(db, settings, monkeypatch):
    # given eager mode and the newest migration of the ledger recorded as not applied (code newer than schema)
    from django.db import connection
    from django.db.migrations.recorder import MigrationRecorder

    from refundagent.config import health

    settings.CELERY_TASK_ALWAYS_EAGER = True
    monkeypatch.setitem(health._migrations_ok, "ok", False)  # a process that has not seen them applied yet
    newest = MigrationRecorder(connection).migration_qs.filter(app="ledger").order_by("-id").first()
    newest.delete()
    # when the health is asked
    response = Client().get("/api/health")
    # then it is 503 and says how many are missing
    assert response.status_code == 503
    assert response.json()["migrations"] == "error: 1 migration(s) not applied"


# --- liveness: the web process and its database, for the load balancer ---------------------------


@pytest.mark.worker
def test_health_live_stays_200_while_the_workers_are_down(celery_worker_process, settings):
    # given a broker, beat's sweep that ran a minute ago, and a real worker answering
    settings.HEALTH_WORKER_PING_TIMEOUT = 1.0
    _beat_ran(timedelta(minutes=1))
    celery_worker_process.start()
    assert Client().get("/api/health").status_code == 200
    assert Client().get("/api/health/live").status_code == 200
    # when the worker goes down
    celery_worker_process.kill()
    # then the full report fails, and liveness, which a load balancer acts on, does not
    full = Client().get("/api/health")
    assert full.status_code == 503 and full.json()["worker"].startswith("error: no worker answered")
    live = Client().get("/api/health/live")
    assert live.status_code == 200
    assert live.json() == {"status": "ok", "database": "ok"}


def test_health_live_is_503_without_its_database(db, monkeypatch):
    # given a database that does not answer
    def down():
        raise OperationalError("connection refused")

    monkeypatch.setattr("refundagent.config.health._database", down)
    # when the load balancer asks
    response = Client().get("/api/health/live")
    # then 503, with the verdict (not a problem document) and nothing else
    assert response.status_code == 503
    assert response.json() == {"status": "error", "database": "error: OperationalError"}


def test_health_live_is_exempt_from_the_https_redirect(settings):
    assert r"^api/health/live$" in settings.SECURE_REDIRECT_EXEMPT
