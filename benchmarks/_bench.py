"""What the benchmarks share: the settings module, the database URLs, Django's setup.

Kept out of the product on purpose: the benchmarks import only the product's public service
functions and management commands, so that they survive the code being restructured.
"""

import contextlib
import importlib
import importlib.util
import os
import statistics
import subprocess
import sys
import types
from pathlib import Path
from urllib.parse import urlparse, urlunparse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Benchmarks run with production-like settings: DEBUG off (no query log kept in memory).
BENCH_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "benchmark-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost,testserver",
    # As docker-compose.yml runs it: connections (and their prepared statements) kept.
    "DATABASE_CONN_MAX_AGE": "60",
}


def settings_module() -> str:
    """The project's settings module: the new location first (the code is being restructured)."""
    for name in ("refundagent.config.settings", "refundagent.settings"):
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except ModuleNotFoundError:
            continue
    raise SystemExit("no settings module found (refundagent.config.settings or refundagent.settings)")


def database_url() -> str:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("set DATABASE_URL=postgres://user@host:port/name: these benchmarks measure PostgreSQL")
    return url


def url_with_db(url: str, name: str) -> str:
    parts = urlparse(url)
    return urlunparse(parts._replace(path="/" + name))


def db_name(url: str) -> str:
    return urlparse(url).path.lstrip("/")


def libpq_url(url: str) -> str:
    """psycopg wants postgresql:// or postgres:// (both fine); strip Django-only query options."""
    return urlunparse(urlparse(url)._replace(query=""))


def database_ensure(url: str) -> bool:
    """Create the database of `url` if it is missing. True when it was created."""
    import psycopg

    name = db_name(url)
    with psycopg.connect(libpq_url(url_with_db(url, "postgres")), autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if found:
            return False
        conn.execute(f'CREATE DATABASE "{name}"')
        return True


def django_setup(url: str, **env):
    """Django on the database of `url`, production-like settings, migrated."""
    os.environ.update(BENCH_ENV)
    os.environ.update(env)
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module()
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children, live and reaped (psutil reads /proc)."""
    import psutil

    try:
        root = psutil.Process(pid)
        total = sum(root.cpu_times()[:4])  # user, system, children_user, children_system
        for child in root.children(recursive=True):
            try:
                total += sum(child.cpu_times()[:2])
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]


def demo_orders_create(external_ids: list[str], *, total: str, days_old: int, batch_size: int | None = None) -> list:
    """Delivered USD orders of the demo customer (acme's CUST-1001), one per external id: the
    benchmarks give each ticket or refund an order of its own, so none queues on another's lock."""
    from datetime import timedelta
    from decimal import Decimal

    from django.apps import apps
    from django.utils import timezone

    Tenant, Customer = apps.get_model("ledger", "Tenant"), apps.get_model("ledger", "Customer")
    Order = apps.get_model("ledger", "Order")
    acme = Tenant.objects.get(slug="acme")
    customer = Customer.objects.get(tenant=acme, external_id="CUST-1001")
    placed_at = timezone.now() - timedelta(days=days_old)
    return Order.objects.bulk_create(
        [
            Order(
                tenant=acme,
                customer=customer,
                external_id=external_id,
                total=Decimal(total),
                currency="USD",
                placed_at=placed_at,
                status="delivered",
            )
            for external_id in external_ids
        ],
        batch_size=batch_size,
    )


@contextlib.contextmanager
def scratch_database(suffix: str):
    """A database of its own beside the configured one (`<name>_<suffix>`, not the test suite's
    test_<name>), migrated and seeded with the demo, with the offline provider and Celery eager;
    yields the demo's support user, and drops the database at the end. For the in-process
    benchmarks, after django.setup()."""
    from django.conf import settings
    from django.db import connection

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AGENT_PROVIDER = "offline"
    from refundagent.config.celery import app

    app.conf.task_always_eager = True
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"{connection.settings_dict['NAME']}_{suffix}"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        from django.contrib.auth import get_user_model

        from refundagent.demo import demo_seed

        demo_seed()
        yield get_user_model().objects.get(username="acme-support")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def demo_ticket_file(support):
    """A ticket on the demo's ORD-5001, filed through the service as support files it (with
    Celery eager, its run goes to approval_required on the offline provider before this returns)."""
    from refundagent.services import ticket_create

    return ticket_create(
        user=support,
        order="ORD-5001",
        customer="CUST-1001",
        message="My headphones arrived broken, please refund $200.",
        requested_amount="200.00",
    )


def demo_ticket_settle(ticket, support) -> None:
    """Check the ticket stopped at approval_required, then escalate and close it: on the demo
    policy, the risk rules (open tickets per order, the customer's refunds in flight) would
    otherwise escalate the next ticket on the order."""
    from refundagent.models import Ticket
    from refundagent.services import ticket_close, ticket_escalate

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, (ticket.status, ticket.stop_detail)
    ticket_escalate(ticket=ticket, user=support)
    ticket_close(ticket=Ticket.objects.get(pk=ticket.pk), user=support)


def modules_at(revision: str, paths: tuple[str, ...]) -> dict[str, types.ModuleType]:
    """The modules at `paths` as they were at `revision`, by dotted name: their sources executed as
    copies beside the current modules, each copy's imports from the others (the modules, and the
    functions and classes taken from them) pointed at the copies. For a paired benchmark of old
    code against new in one process."""
    copies = {}
    for path in paths:
        name = path[:-3].replace("/", ".")
        source = subprocess.run(
            ["git", "show", f"{revision}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        current = importlib.import_module(name)
        copy = types.ModuleType(f"{name}@{revision}")
        copy.__package__, copy.__file__ = name.rpartition(".")[0], current.__file__
        exec(compile(source, f"{path}@{revision}", "exec"), copy.__dict__)
        copies[name] = (current, copy)
    for _, copy in copies.values():
        for key, value in list(copy.__dict__.items()):
            for name, (current, other) in copies.items():
                if value is current:
                    copy.__dict__[key] = other
                elif getattr(value, "__module__", None) == name:
                    same = getattr(current, getattr(value, "__name__", ""), None) is value
                    if same and hasattr(other, value.__name__):
                        copy.__dict__[key] = getattr(other, value.__name__)
    return {name: copy for name, (_, copy) in copies.items()}
