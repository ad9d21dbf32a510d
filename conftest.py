"""Fixtures shared by every app's tests. Given/when/then tests build their data from these."""

import fcntl
import os
import tempfile
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from django.db import connection, connections

from ledger.tests.fake_shopify import FakeShopify
from ledger.tests.fake_stripe import FakeStripe, payments_follow_ledger
from tests.helpers import signed_in


def _redis_database_per_xdist_worker():
    """Under pytest-xdist (pyproject's `-n`) every worker process runs its tests on a test
    database of its own (pytest-django names it test_<name>_gw<N>), so it needs a Redis database
    of its own too: workers sharing a broker would take each other's tasks, run them against the
    wrong test database, and purge each other's queues. Worker gw<N> uses the configured Redis
    database + N (CI's redis/0: 0 to 3 with four workers). The settings loaded before this file
    (pytest-django loads them first): Celery reads CELERY_BROKER_URL from the environment before
    its setting, the real workers the tests start inherit it, and the one setting derived from
    it (the model-call slots') is derived again here."""
    from urllib.parse import urlsplit

    from django.conf import settings

    worker = os.getenv("PYTEST_XDIST_WORKER", "")
    configured = os.getenv("CELERY_BROKER_URL", "")
    if not worker.startswith("gw") or not configured.startswith(("redis://", "rediss://")):
        return
    parts = urlsplit(configured)
    database = int(parts.path.strip("/") or 0) + int(worker.removeprefix("gw"))
    url = parts._replace(path=f"/{database}").geturl()
    os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL = url
    if settings.AGENT_MODEL_SLOTS_REDIS_URL == configured:
        settings.AGENT_MODEL_SLOTS_REDIS_URL = url


_redis_database_per_xdist_worker()

# Worker processes of `-n auto` (pyproject.toml's addopts) for the whole suite or most of it: its
# tests mostly wait (on real Celery workers, fake HTTP servers, PostgreSQL's locks), so four
# share two cores well. Each worker migrates a test database of its own first.
XDIST_WORKERS = 4
# A selection of fewer test modules runs in one process, as without xdist: there the workers'
# test databases would cost more than they save.
XDIST_MIN_MODULES = 10


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    modules = 0
    for arg in config.args:
        path = Path(arg.split("::")[0])
        modules += sum(1 for _ in path.rglob("test*.py")) if path.is_dir() else 1
    return XDIST_WORKERS if modules >= XDIST_MIN_MODULES else 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a test marked `serial` runs with no other test beside it: its assertion is
    on wall-clock time, which the other workers' load would stretch. Every other test holds a
    shared lock while it runs, a serial test the exclusive one; the gate makes a waiting serial
    test first in line (no new shared holder passes it)."""
    run = os.getenv("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return (yield)
    alone = item.get_closest_marker("serial") is not None
    locks = Path(tempfile.gettempdir()) / f"refundagent-tests-{run}"
    with open(f"{locks}.gate", "a") as gate, open(f"{locks}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(gate, fcntl.LOCK_UN)
        return (yield)  # closing the files releases what they still hold


def pytest_collection_modifyitems(config, items):
    """Skip the tests that start a real Celery worker where no broker is configured, and fail
    instead of skipping in CI, where they must really run. Every other test runs on PostgreSQL:
    DATABASE_URL's, or the embedded server (refundagent/config/settings.py)."""
    in_ci = os.getenv("CI") == "true"
    with_broker = bool(os.getenv("CELERY_BROKER_URL"))
    for item in items:
        if "worker" in item.keywords and not with_broker:
            if in_ci:
                raise pytest.UsageError("CI must run the worker tests: set CELERY_BROKER_URL.")
            item.add_marker(pytest.mark.skip(reason="needs CELERY_BROKER_URL (a real Celery worker on Redis)"))


@pytest.fixture(scope="session")
def playwright(playwright):
    """pytest-playwright's Playwright, and the database connection the tests opened while it ran
    closed when it stops. From the first browser test on, the tests run in a context of
    Playwright's (its sync API switches greenlets) until it stops, and Django's connections are
    context-local (asgiref): the session's teardown cannot see the connection the tests opened
    there, and dropping the test database found "1 other session using the database". This
    teardown runs in Playwright's context, before it restores the session's."""
    yield playwright
    connections.close_all()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """The demo seed sets seven passwords; PBKDF2 would make that seconds per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _approver_second_factor_off(settings):
    """Said here, whatever DJANGO_DEBUG the run has: tests decide as a person signed in with a
    password. approvals/tests/test_second_factor.py turns the second factor on and tests it."""
    settings.APPROVER_SECOND_FACTOR = False


@pytest.fixture(autouse=True)
def _empty_cache():
    """The API's rate-limit counts live in the cache: every test starts from none."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _reply_model_check_off(settings):
    """A developer's ANTHROPIC_API_KEY turns the reply's second model check on: the tests ask
    for it where they test it (refundagent/tests/test_reply_claims_gate.py), never by accident."""
    settings.REPLY_MODEL_CHECK = False


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

    migrations = [
        importlib.import_module(f"approvals.migrations.{name}")
        for name in ("0002_seed_capabilities", "0004_seed_list_customer_orders")
    ]
    if Capability.objects.count() < sum(len(m.CAPABILITIES) for m in migrations):
        for migration in migrations:
            migration.seed(apps, None)


@pytest.fixture
def demo(db):
    """The demo data of docs/api.md (tenants acme and globex, their users, orders, policies)."""
    from refundagent.demo import demo_seed

    return demo_seed()


@pytest.fixture
def user(demo):
    from django.contrib.auth import get_user_model

    def get(username):
        return get_user_model().objects.get(username=username)

    return get


@pytest.fixture
def api_client(request):
    """A Django test client that authenticates with a real API token as a user, or as a demo user
    by name (which seeds the demo)."""
    from django.test import Client

    from ledger.tenancy import api_token_create

    def make(who):
        if isinstance(who, str):
            who = request.getfixturevalue("user")(who)
        token = api_token_create(user=who)
        return Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    return make


# --- data made to measure: a tenant, its customer and card, orders, a policy, users with roles ----


@pytest.fixture
def tenant(db):
    from ledger.models import Tenant

    return Tenant.objects.create(slug="shop", name="Shop")


@pytest.fixture
def customer(tenant):
    from ledger.models import Customer

    return Customer.objects.create(tenant=tenant, external_id="CUST-1", name="Ada", email="ada@example.com")


@pytest.fixture
def card(customer):
    from ledger.models import PaymentMethod

    return PaymentMethod.objects.create(
        customer=customer, external_id="card_1", kind=PaymentMethod.Kind.CARD, brand="visa", last4="4242"
    )


@pytest.fixture
def make_order(tenant, customer, card):
    """make_order("100.00", items=[("ITEM-1", "40.00", 1), ...], days_old=5, status="delivered") -> an order of
    `customer`, paid in full with `card`."""
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from ledger.models import Order, OrderItem, Payment

    counter = iter(range(1, 10_000))

    def make(
        total="100.00",
        *,
        items=(),
        currency="USD",
        external_id=None,
        days_old=5,
        status=Order.Status.DELIVERED,
        payment_ref="pi_test",
    ):
        order = Order.objects.create(
            tenant=tenant,
            customer=customer,
            external_id=external_id or f"ORD-{next(counter)}",
            total=Decimal(total),
            currency=currency,
            placed_at=timezone.now() - timedelta(days=days_old),
            status=status,
        )
        for line_no, (item_id, price, quantity) in enumerate(items, start=1):
            OrderItem.objects.create(
                order=order,
                line_no=line_no,
                item_id=item_id,
                name=item_id.title(),
                price=Decimal(price),
                quantity=quantity,
            )
        Payment.objects.create(
            order=order,
            payment_method=card,
            method="card",
            card_brand="visa",
            card_last4="4242",
            payment_ref=payment_ref,
            amount=Decimal(total),
            currency=currency,
        )
        return order

    return make


@pytest.fixture
def policy(tenant):
    """`tenant`'s published refund-policy-v4: 30-day window, two approvers above 500.00."""
    from django.utils import timezone

    from tests.factories import policy_publish

    return policy_publish(tenant=tenant, now=timezone.now())


@pytest.fixture
def make_user(tenant):
    """make_user("finance-1", "finance", tenant=None, **fields) -> a user of `tenant` (or the one given) with
    those roles."""
    from tests.factories import user_build

    def make(username, *roles, tenant=tenant, **fields):
        return user_build(username=username, tenant=tenant, roles=roles, **fields)

    return make


# Who works the shop in a test, by username: their roles and fields.
STAFF = {
    "support": (("support",), {}),
    "support2": (("support",), {}),
    # support and finance: works the queue in the admin
    "lead": (("support", "finance"), {}),
    "finance": (("finance",), {}),
    "finance2": (("finance",), {}),
    "operator": (("operator",), {"is_staff": True}),
}


@pytest.fixture
def people(request, make_user, policy):
    """The shop's people on `policy`, by username: support and finance, or those a test module
    lists in its `PEOPLE` (names of STAFF), created in that order."""
    names = getattr(request.module, "PEOPLE", ("support", "finance"))
    return {name: make_user(name, *STAFF[name][0], **STAFF[name][1]) for name in names}


@pytest.fixture
def login(client, user):
    """login("finance") -> the test client, signed in as that user of the demo shop."""

    def as_user(username):
        return signed_in(user(username), client)

    return as_user


# --- tickets --------------------------------------------------------------------------------------


@pytest.fixture
def ticket_defaults():
    """What `file_ticket` files unless told otherwise. A test module overrides this fixture to file its
    own kind of ticket."""
    return {"order": "ORD-5001", "message": "Please refund my order."}


@pytest.fixture
def file_ticket(user, ticket_defaults, django_capture_on_commit_callbacks):
    """file_ticket(order=..., message=..., amount=..., items=..., refund_to=..., username="acme-support",
    customer="CUST-1001") -> a ticket filed through the service on the demo data. With hold_agent=True the
    queued agent run is left in the on-commit queue."""
    from refundagent.services import ticket_create

    def make(*, username="acme-support", customer="CUST-1001", amount=None, **fields):
        fields = {**ticket_defaults, **fields}
        hold_agent = fields.pop("hold_agent", False)
        if amount is not None:
            fields["requested_amount"] = amount
        if fields.get("items") is not None:
            fields["items"] = list(fields["items"])
        if not hold_agent:
            return ticket_create(user=user(username), customer=customer, **fields)
        with django_capture_on_commit_callbacks(execute=False):
            return ticket_create(user=user(username), customer=customer, **fields)

    return make


@pytest.fixture
def fake_stripe(settings):
    """A local Stripe-compatible server (ledger/tests/fake_stripe.py), and the settings that
    point the `stripe` gateway and its webhook at it. The retries are the production default."""
    server = FakeStripe().start()
    stop_following = payments_follow_ledger(server)
    settings.PAYMENT_GATEWAY = "stripe"
    settings.STRIPE_API_KEY = "sk_test_fake"
    settings.STRIPE_API_BASE = server.url
    settings.STRIPE_MAX_NETWORK_RETRIES = 2
    settings.STRIPE_TIMEOUT_SECONDS = 10
    settings.STRIPE_WEBHOOK_SECRET = "whsec_test_secret"
    yield server
    stop_following()
    server.stop()


@pytest.fixture
def fake_shopify(settings):
    """A local Shopify Admin API (ledger/tests/fake_shopify/), serving every shop added to it
    under its own path: SHOPIFY_API_BASE is `http://127.0.0.1:PORT/{shop}`, the product puts the
    shop's domain for `{shop}`. Its bucket is the Standard plan's (1,000 points, 100 a second)."""
    server = FakeShopify().start()
    settings.SHOPIFY_API_BASE = server.api_base
    yield server
    server.stop()


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
    at the test database. `kill()` sends SIGKILL to the whole process group (main + children).

    By default it runs as docker-compose's agent worker does (the threads pool over a
    connection pool), on both queues, so one worker serves a test; `queues` and `pool` make it
    one of the two workers of a deployment."""

    def __init__(self, database_url: str, concurrency: int = 4, *, pool: str = "threads", queues: str = "agent,money"):
        self.database_url = database_url
        self.concurrency = concurrency
        self.pool = pool
        self.queues = queues
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
        env = dict(os.environ, DATABASE_URL=self.database_url)
        if self.pool == "threads":
            env["DATABASE_POOL_MAX_SIZE"] = str(min(self.concurrency, 10))
        env.update(extra_env or {})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "refundagent",
                "worker",
                f"--pool={self.pool}",
                f"--concurrency={self.concurrency}",
                "-Q",
                self.queues,
                "--loglevel=INFO",
                "-n",
                self.hostname,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
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


def database_url(settings_dict: dict) -> str:
    """A postgres:// URL for the database of `settings_dict`, for a subprocess's DATABASE_URL: a
    host name and port, or a Unix socket directory (the embedded server's) as the `host` query
    parameter."""
    options = settings_dict.get("OPTIONS", {})
    host = settings_dict["HOST"] or options.get("host", "")
    port = settings_dict["PORT"] or options.get("port", "")
    credentials = quote(settings_dict["USER"] or "", safe="") + ":" + quote(settings_dict["PASSWORD"] or "", safe="")
    name = quote(settings_dict["NAME"], safe="")
    if host.startswith("/"):
        query = urlencode({"host": host, **({"port": port} if port else {})})
        return f"postgres://{credentials}@/{name}?{query}"
    return f"postgres://{credentials}@{host or '127.0.0.1'}:{port or 5432}/{name}"


@pytest.fixture
def celery_worker_process(transactional_db):
    """A real worker on Redis + the test database (the embedded server's or DATABASE_URL's).
    Mark the test `worker`."""
    from refundagent.config.celery import app

    app.control.purge()
    worker = WorkerProcess(database_url(connection.settings_dict))
    yield worker
    worker.stop()
    app.control.purge()


@pytest.fixture
def money_worker_process(transactional_db):
    """A real worker as docker-compose's money worker runs (prefork: a killed child's task is
    requeued at once), here on both queues so it serves a test alone. The fault hooks of
    refundagent/tests/faults act in a prefork child. Mark the test `worker`."""
    from refundagent.config.celery import app

    app.control.purge()
    worker = WorkerProcess(database_url(connection.settings_dict), 1, pool="prefork")
    yield worker
    worker.stop()
    app.control.purge()


@pytest.fixture
def celery_workers(transactional_db):
    """Start real workers as docker-compose.yml runs them: `start(queues=..., pool=...,
    concurrency=..., extra_env=...)`, each a process of its own, all stopped after the test.
    Mark the test `worker`."""
    from refundagent.config.celery import app

    app.control.purge()
    started = []

    def start(*, queues: str, pool: str, concurrency: int, extra_env: dict | None = None, timeout: float = 60):
        worker = WorkerProcess(database_url(connection.settings_dict), concurrency, pool=pool, queues=queues)
        started.append(worker)
        return worker.start(timeout=timeout, extra_env=extra_env)

    yield start
    for worker in started:
        worker.stop()
    app.control.purge()
