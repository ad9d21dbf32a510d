"""What the benchmarks share: the settings module, the database URLs, Django's setup.

Kept out of the product on purpose: the benchmarks import only the product's public service
functions and management commands, so that they survive the code being restructured.
"""

import importlib.util
import os
import statistics
import sys
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


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]


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
