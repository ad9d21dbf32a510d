"""Production settings: `check --deploy` is clean, and unsafe configurations refuse to start."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Production names its database; `check` never connects to it.
PRODUCTION_DATABASE = "postgres://refundagent@db.example.com:5432/refundagent"


def run_manage(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_values():
    result = run_manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="x7Qm2vLr9TzP4kWb8NcY1fHs6JdGa3Ue5RiOo0XlKtZqVyMnBpCw",
        DJANGO_ALLOWED_HOSTS="refunds.example.com",
        DATABASE_URL=PRODUCTION_DATABASE,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_development_defaults_are_flagged_by_check_deploy():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode != 0
    assert "security.W018" in result.stderr + result.stdout  # DEBUG on


def test_production_without_a_secret_key_refuses_to_start():
    result = run_manage(
        "check", DJANGO_DEBUG="0", DJANGO_ALLOWED_HOSTS="refunds.example.com", DATABASE_URL=PRODUCTION_DATABASE
    )
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_production_without_a_database_url_refuses_to_start_rather_than_run_the_embedded_server():
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("DJANGO_")}
    env.update(DJANGO_DEBUG="0", DJANGO_SECRET_KEY="x7Qm2vLr9TzP4kWb8NcY1fHs6JdGa3Ue5RiOo0XlKtZqVyMnBpCw")
    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "DATABASE_URL must be set when DJANGO_DEBUG=0" in result.stderr


def test_a_database_url_that_is_not_postgresql_is_refused():
    result = run_manage("check", DATABASE_URL="sqlite:///db.sqlite3")
    assert result.returncode != 0
    assert "DATABASE_URL must name a PostgreSQL database" in result.stderr


def test_a_malformed_boolean_is_refused():
    result = run_manage("check", DJANGO_DEBUG="maybe")
    assert result.returncode != 0
    assert "DJANGO_DEBUG must be a boolean" in result.stderr


def test_a_sweep_grace_that_is_not_a_positive_integer_is_refused():
    for value, message in (
        ("soon", "SWEEP_GRACE_SECONDS must be an integer"),
        ("0", "SWEEP_GRACE_SECONDS must be a positive integer"),
    ):
        result = run_manage("check", SWEEP_GRACE_SECONDS=value)
        assert result.returncode != 0
        assert message in result.stderr
