"""Fixtures of the observability tests: spans in memory, the content opt-in, filing a ticket, the
money log as JSON lines, a fake Stripe."""

import io
import json
import logging

import pytest
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ledger import telemetry
from refundagent.config.logs import ContextFilter, JsonFormatter
from refundagent.config.observability import tracer_provider_build
from refundagent.models import Ticket


@pytest.fixture
def spans(monkeypatch):
    """Every span of the test, in memory: ours, Django's and Celery's, on one tracer provider."""
    exporter = InMemorySpanExporter()
    provider = tracer_provider_build(exporters=[], processors=[SimpleSpanProcessor(exporter)])
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer(telemetry.TRACER_NAME))
    DjangoInstrumentor().instrument(tracer_provider=provider)
    CeleryInstrumentor().instrument(tracer_provider=provider)
    yield exporter
    DjangoInstrumentor().uninstrument()
    CeleryInstrumentor().uninstrument()
    provider.shutdown()


@pytest.fixture
def content_export(monkeypatch):
    monkeypatch.setitem(telemetry._content, "enabled", True)


@pytest.fixture
def file_ticket(api_client):
    """File a ticket about ORD-5001 over HTTP as acme's support; returns the ticket."""

    def file(message="My headphones broke, please refund ORD-5001."):
        response = api_client("acme-support").post(
            "/api/tickets",
            {"order": "ORD-5001", "customer": "CUST-1001", "message": message},
            content_type="application/json",
        )
        assert response.status_code == 201, response.content
        return Ticket.objects.get(pk=response.json()["id"])

    return file


@pytest.fixture
def json_log():
    """The money logger's lines as the production handler writes them (context filter + JSON)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("money")
    logger.addHandler(handler)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
