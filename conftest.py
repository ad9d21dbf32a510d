"""Fixtures shared by every app's tests. Given/when/then tests build their data from these."""

import os

import pytest
from django.db import connection


def pytest_collection_modifyitems(config, items):
    """Skip PostgreSQL- and worker-only tests where those servers are not configured, and fail
    instead of skipping in CI, where the integration tests must really run."""
    in_ci = os.getenv("CI") == "true"
    on_postgres = os.getenv("DATABASE_URL", "").startswith(("postgres://", "postgresql://"))
    with_broker = bool(os.getenv("CELERY_BROKER_URL"))
    for item in items:
        if "postgres" in item.keywords and not on_postgres:
            if in_ci:
                raise pytest.UsageError("CI must run the PostgreSQL tests: set DATABASE_URL to PostgreSQL.")
            item.add_marker(pytest.mark.skip(reason="needs DATABASE_URL=postgres://..."))
        if "worker" in item.keywords and not (with_broker and on_postgres):
            if in_ci:
                raise pytest.UsageError("CI must run the worker tests: set CELERY_BROKER_URL and DATABASE_URL.")
            item.add_marker(pytest.mark.skip(reason="needs CELERY_BROKER_URL and a PostgreSQL DATABASE_URL"))


@pytest.fixture
def demo(db):
    """The demo data of API.md (tenants acme and globex, their users, orders, policies)."""
    from refundagent.demo import demo_seed

    return demo_seed()


@pytest.fixture
def user(demo):
    from django.contrib.auth import get_user_model

    def get(username):
        return get_user_model().objects.get(username=username)

    return get


@pytest.fixture
def api_client(user):
    """A Django test client that authenticates as a demo user with a real API token."""
    from django.test import Client

    from ledger.services import api_token_create

    def make(username):
        token = api_token_create(user=user(username))
        return Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    return make


@pytest.fixture
def is_postgres():
    return connection.vendor == "postgresql"
