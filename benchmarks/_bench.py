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
