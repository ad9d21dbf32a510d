"""One error shape (RFC 9457) under /api/, an OpenAPI document that
matches behaviour, and a rate limit per token in the shared cache."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.cache import cache
from django.test import Client

from approvals.models import ApprovalRequest
from refundagent.models import Ticket

PROBLEM = "application/problem+json"
PROBLEM_FIELDS = {"type", "title", "status", "detail", "code"}


def assert_problem(response, status, code=None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith(PROBLEM), response["Content-Type"]
    body = response.json()
    assert PROBLEM_FIELDS <= set(body), body
    assert body["status"] == status and isinstance(body["detail"], str) and body["detail"]
    if code:
        assert body["code"] == code
    return body


@pytest.mark.parametrize("path", ["/api/nope", "/api/tickets/abc", "/api/approvals/1/nope", "/api/"])
def test_an_unknown_path_under_api_is_a_404_problem(api_client, path):
    assert_problem(api_client("acme-support").get(path), 404, "not_found")


def test_a_wrong_method_is_a_405_problem_with_allow(api_client):
    response = api_client("acme-support").delete("/api/tickets")
    body = assert_problem(response, 405, "method_not_allowed")
    assert "GET" in response["Allow"] and "GET" in body["detail"]


def test_outside_api_errors_stay_html(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404 and not response["Content-Type"].startswith(PROBLEM)


def test_unauthenticated_forbidden_not_found_and_validation_are_problems(api_client, client, db, demo):
    assert_problem(client.get("/api/tickets"), 401, "unauthenticated")
    assert_problem(api_client("acme-support").get("/api/approvals"), 403, "role_required")
    body = assert_problem(api_client("acme-support").get("/api/orders/ORD-9999/ledger"), 404, "not_found")
    assert "ORD-9999" in body["detail"]
    body = assert_problem(
        api_client("acme-support").post("/api/tickets", {}, content_type="application/json"), 422, "invalid_input"
    )
    assert {e["field"] for e in body["errors"]} >= {"customer", "message"}
    assert_problem(api_client("acme-support").post("/api/tickets", b"{not json", content_type="application/json"), 400)


def schema(client):
    return client.get("/api/openapi.json").json()


def test_ticket_and_approval_statuses_are_documented_apart(client, db):

    document = schema(client)

    def status_enum(path):
        [param] = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "status"]
        [enum] = [s["enum"] for s in param["schema"]["anyOf"] if "enum" in s]
        return set(enum)

    assert status_enum("/api/approvals") == set(ApprovalRequest.Status.values)
    assert status_enum("/api/tickets") == set(Ticket.Status.values)
    assert "Status" not in document["components"]["schemas"]


def test_every_operation_documents_its_4xx_as_problems(client, db):
    document = schema(client)
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            codes = {int(c) for c in operation["responses"] if str(c).startswith("4")}
            assert 400 in codes, (method, path)
            if operation.get("security"):
                assert {401, 403, 429} <= codes, (method, path)
            if operation.get("parameters") or operation.get("requestBody"):
                assert 422 in codes, (method, path)
            for code in codes:
                assert PROBLEM in operation["responses"][str(code)]["content"], (method, path, code)
    assert {404, 409, 422} <= {int(c) for c in document["paths"]["/api/tickets"]["post"]["responses"]}
    decision = document["paths"]["/api/approvals/{request_id}/decision"]["post"]
    assert {404, 409, 422} <= {int(c) for c in decision["responses"]}
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in decision["parameters"])


def test_health_has_a_schema_open_to_more_checks(client, db):
    document = schema(client)
    health = document["paths"]["/api/health"]["get"]["responses"]
    ref = health["200"]["content"]["application/json"]["schema"]["$ref"]
    component = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert {"status", "database", "broker"} <= set(component["properties"])
    assert component.get("additionalProperties") is True
    assert "503" in health


@pytest.fixture
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


def test_the_rate_limit_is_per_token_and_answers_a_429_problem(api_client, settings, fresh_cache):
    # given a limit of 3 requests a minute and two tokens
    settings.API_THROTTLE_RATE = "3/min"
    first, second = api_client("acme-support"), api_client("acme-support")
    # when the first token makes four requests
    statuses = [first.get("/api/tickets").status_code for _ in range(4)]
    # then the fourth is a 429 problem with Retry-After, and the other token is not limited
    assert statuses == [200, 200, 200, 429]
    response = first.get("/api/tickets")
    assert_problem(response, 429, "throttled")
    assert int(response["Retry-After"]) > 0
    assert second.get("/api/tickets").status_code == 200


def test_the_counts_live_in_the_shared_cache(api_client, settings, fresh_cache):
    # the cache is what every process shares (Redis in production): clearing it resets the count
    settings.API_THROTTLE_RATE = "1/min"
    client = api_client("acme-support")
    assert client.get("/api/tickets").status_code == 200
    assert client.get("/api/tickets").status_code == 429
    cache.clear()
    assert client.get("/api/tickets").status_code == 200


def test_the_cache_is_redis_when_configured():

    code = "from django.conf import settings; print(settings.CACHES['default']['BACKEND'])"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "refundagent.config.settings",
        "CACHE_URL": "redis://127.0.0.1:6379/3",
    }
    out = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env=env,
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "django.core.cache.backends.redis.RedisCache", out.stderr


def test_health_is_not_throttled(client, db, settings, fresh_cache):
    settings.API_THROTTLE_RATE = "1/min"
    # No worker is needed here (tasks in-process): a 503 for a missing worker is test_health.py's.
    settings.CELERY_TASK_ALWAYS_EAGER = True
    assert [Client().get("/api/health").status_code for _ in range(3)] == [200, 200, 200]
