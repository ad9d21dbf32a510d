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


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The demo seed sets seven passwords; PBKDF2 would make that seconds per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _empty_cache():
    """The API's rate-limit counts live in the cache: every test starts from none."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _capability_registry(request):
    """The capability registry is written by a data migration; a transactional or live-server
    test flushes the database afterwards and takes those rows with it, which would leave every
    later test with all tools switched off. Put them back for every test that uses the database."""
    transactional = {"transactional_db", "live_server"} & set(request.fixturenames)
    marker = request.node.get_closest_marker("django_db")
    if not (transactional or marker or "db" in request.fixturenames):
        return
    if marker and marker.kwargs.get("transaction"):
        transactional = True
    request.getfixturevalue("transactional_db" if transactional else "db")

    import importlib

    from django.apps import apps

    from approvals.models import Capability

    migrations = [importlib.import_module(f"approvals.migrations.{name}")
                  for name in ("0002_seed_capabilities", "0004_seed_list_customer_orders")]
    if Capability.objects.count() < sum(len(m.CAPABILITIES) for m in migrations):
        for migration in migrations:
            migration.seed(apps, None)


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

    from ledger.tenancy import api_token_create

    def make(username):
        token = api_token_create(user=user(username))
        return Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    return make


@pytest.fixture
def is_postgres():
    return connection.vendor == "postgresql"


@pytest.fixture(autouse=True)
def _celery_mode(request):
    """Tasks run eagerly in-process, except in tests marked `worker`, which use a real worker."""
    from refundagent.config.celery import app

    eager = "worker" not in request.keywords
    previous = app.conf.task_always_eager
    app.conf.task_always_eager = eager
    yield
    app.conf.task_always_eager = previous


class WorkerProcess:
    """A real `celery -A refundagent worker` subprocess on the configured Redis broker, pointed
    at the test database. `kill()` sends SIGKILL to the whole process group (main + children)."""

    def __init__(self, database_url: str, concurrency: int = 1):
        self.database_url = database_url
        self.concurrency = concurrency
        self.proc = None
        self.n = 0

    def start(self, timeout: float = 30.0, extra_env: dict | None = None):
        import subprocess
        import sys
        import time
        import uuid

        from refundagent.config.celery import app

        self.n += 1
        self.hostname = f"test-{uuid.uuid4().hex[:8]}@localhost"
        env = dict(os.environ, DATABASE_URL=self.database_url, **(extra_env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "refundagent", "worker", "--pool=prefork",
             f"--concurrency={self.concurrency}", "--loglevel=INFO", "-n", self.hostname, "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            env=env,
            start_new_session=True,
            stdout=open(f"/tmp/celery-worker-{os.getpid()}-{self.n}.log", "w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited with {self.proc.returncode}")
            if app.control.ping(destination=[self.hostname], timeout=0.5):
                return self
        raise RuntimeError("celery worker did not become ready in time")

    def kill(self):
        import signal

        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self):
        import signal

        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except Exception:  # noqa: BLE001
                self.kill()


@pytest.fixture
def celery_worker_process(transactional_db):
    """A real worker on Redis + the PostgreSQL test database. Mark the test `worker`."""
    from refundagent.config.celery import app

    s = connection.settings_dict
    url = f"postgres://{s['USER']}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    app.control.purge()
    worker = WorkerProcess(url)
    yield worker
    worker.stop()
    app.control.purge()
