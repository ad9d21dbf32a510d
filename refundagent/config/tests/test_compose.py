"""docker-compose.yml: valid for docker-compose (no engine needed to check), with the five
services and the optional Flower (profile `flower`), health checks, and the same variables the
settings read."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMPOSE = shutil.which("docker-compose")

pytestmark = pytest.mark.skipif(
    COMPOSE is None and os.getenv("CI") != "true",
    reason="docker-compose not installed (apt-get install docker-compose)",
)


def compose_config(**env):
    result = subprocess.run(
        [COMPOSE or "docker-compose", "-f", "docker-compose.yml", "config"],
        cwd=ROOT,
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result


def test_compose_file_is_valid_and_complete():
    result = compose_config(DJANGO_SECRET_KEY="from-the-environment")
    assert result.returncode == 0, result.stderr
    import yaml

    config = yaml.safe_load(result.stdout)
    services = config["services"]
    assert set(services) == {"web", "worker", "worker-money", "beat", "postgres", "redis", "flower"}
    for name, service in services.items():
        assert "healthcheck" in service, f"{name} has no health check"
    for name in ("web", "worker", "worker-money", "beat"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["CELERY_BROKER_URL"] == "redis://redis:6379/0"
        assert env["DJANGO_DEBUG"] == "0"
        assert env["DJANGO_SECRET_KEY"] == "from-the-environment"
    assert "gunicorn" in json.dumps(services["web"]["command"])
    assert "worker" in json.dumps(services["worker"]["command"])
    assert "beat" in json.dumps(services["beat"]["command"])
    # the worker is healthy when it answers a ping, beat when the sweep it schedules ran lately
    assert "inspect ping" in json.dumps(services["worker"]["healthcheck"]["test"])
    assert services["beat"]["healthcheck"]["test"] == [
        "CMD",
        "python",
        "-m",
        "refundagent.config.healthcheck",
        "--only",
        "beat",
    ]
    # the agent's queue on threads over a small connection pool; the money queue on its own worker
    agent, money = services["worker"]["command"], services["worker-money"]["command"]
    assert "-Q agent" in agent and "--pool=threads" in agent and "--concurrency=100" in agent
    assert services["worker"]["environment"]["DATABASE_POOL_MAX_SIZE"] == "10"
    assert "-Q money" in money and "--pool=prefork" in money
    assert "inspect ping" in json.dumps(services["worker-money"]["healthcheck"]["test"])
    # the web container is healthy while its process and database are: workers may be down
    assert "/api/health/live" in json.dumps(services["web"]["healthcheck"]["test"])
    # Flower only on demand, on the same broker
    assert services["flower"]["profiles"] == ["flower"]
    assert services["flower"]["environment"]["CELERY_BROKER_URL"] == "redis://redis:6379/0"
    # tracing and error reporting are configured from the environment, off by default
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert (env["OTEL_EXPORTER_OTLP_ENDPOINT"], env["SENTRY_DSN"], env["OTEL_EXPORT_CONTENT"]) == ("", "", "0")
        assert env["LOG_FORMAT"] == "json"


def test_compose_refuses_to_start_without_a_secret_key():
    result = compose_config()
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr
