"""GET /api/health: the database and the broker (or eager mode), for anyone."""

import os

import pytest
from django.test import Client

from refundagent.config.celery import app as celery_app

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


def test_health_without_a_broker_is_eager(db, settings):
    settings.CELERY_BROKER_URL = "memory://localhost/"
    settings.CELERY_TASK_ALWAYS_EAGER = True

    response = Client().get("/api/health")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "eager"}


@pytest.mark.skipif(not REDIS_URL.startswith("redis://") and os.getenv("CI") != "true",
                    reason="needs CELERY_BROKER_URL=redis://...")
def test_health_with_redis_reports_the_broker_ok(db, broker):
    assert REDIS_URL.startswith("redis://"), "CI must run this test: set CELERY_BROKER_URL to Redis"
    broker(REDIS_URL)

    response = Client().get("/api/health")

    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


def test_health_with_an_unreachable_broker_says_so(db, broker):
    broker("redis://127.0.0.1:1/0")  # nothing listens on port 1

    response = Client().get("/api/health")

    assert response.status_code == 503
    body = response.json()
    assert (body["status"], body["database"]) == ("error", "ok")
    assert body["broker"].startswith("error")
