"""Schemathesis over the OpenAPI document, against a live server (pytest-django's live_server)
with a valid token: no server error, and every response inside the documented schema (status
code, content type, body). Bounded: SCHEMATHESIS_MAX_EXAMPLES per operation (default 25; the
whole run well under 3 minutes). CI runs it with the rest of the suite (`-m contract` alone)."""

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ledger.tenancy import api_token_create
from refundagent.config.api import api

MAX_EXAMPLES = int(os.getenv("SCHEMATHESIS_MAX_EXAMPLES", "25"))

# The document the server serves at /api/openapi.json, built from the same API object.
schema = schemathesis.openapi.from_dict(api.get_openapi_schema(path_prefix="/api/"))

pytestmark = [pytest.mark.contract, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def token(user, settings):
    """acme-lead (support and finance: every operation is theirs to call), a real API token and
    a rate limit that the run cannot reach."""

    settings.API_THROTTLE_RATE = "100000/min"
    # Tasks run in the server's process (as the test's Celery app does): /api/health's 503 without
    # a live worker or beat is right, and test_health.py checks it; here it would read as a crash.
    settings.CELERY_TASK_ALWAYS_EAGER = True
    return api_token_create(user=user("acme-lead"))


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_the_api_answers_as_its_schema_says(case, live_server, token):
    case.call_and_validate(
        base_url=live_server.url,
        headers={"Authorization": f"Bearer {token}"},
        checks=[not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance],
    )
