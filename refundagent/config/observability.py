"""Observability wiring: OpenTelemetry, the log context and format, Sentry (docs/operations.md).

Everything here is configured by the environment and is off when nothing is set:
- tracing: the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER,
  OTEL_SERVICE_NAME, ...); Django and Celery are instrumented, the agent's spans come from
  ledger.telemetry;
- logs (config/logs.py, set up by settings.LOGGING): JSON in production, each line with the
  request id, task id, tenant, ticket and trace id; the Celery task signals below bind the task;
- errors: SENTRY_DSN turns on sentry-sdk, with send_default_pii off and the trace's redaction.

`observability_setup()` runs once per process from the entry points, after the apps loaded and
before any request or task: wsgi.py and asgi.py (before the middleware is loaded, so Django's
instrumentation wraps it) and the Celery worker (celery.py, worker_init).
"""

import os

import sentry_sdk
from celery.signals import task_postrun, task_prerun
from django.conf import settings
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.integrations.django import DjangoIntegration

from ledger import telemetry
from refundagent.redaction import redact

_OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER")
_done = {"setup": False, "instrumented": False}


def otel_enabled() -> bool:
    """Tracing is on when any standard variable asks for an exporter (and the SDK is not disabled)."""
    if os.getenv("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if os.getenv("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(os.getenv(name, "").strip() for name in _OTEL_VARIABLES)


class TicketContextProcessor(SpanProcessor):
    """Every span started while a ticket is bound carries the ticket's trace id, id and tenant,
    so one id finds all the spans of a ticket, also those of later traces (the approval)."""

    def on_start(self, span, parent_context=None):
        bound = telemetry.context()
        attributes = {
            "refund.ticket.trace_id": bound.get("ticket_trace_id"),
            "refund.ticket.id": bound.get("ticket"),
            "refund.tenant.id": bound.get("tenant"),
            "refund.request.id": bound.get("request_id"),
        }
        span.set_attributes({k: v for k, v in attributes.items() if v})


def _exporters() -> list[SpanExporter]:
    names = [n.strip().lower() for n in os.getenv("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            # OTLP over HTTP/protobuf: reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT.
            exporters.append(OTLPSpanExporter())
        elif name == "console":
            exporters.append(ConsoleSpanExporter())
    return exporters


def tracer_provider_build(*, exporters: list[SpanExporter] | None = None, processors: list[SpanProcessor] = ()):
    """A tracer provider with the ticket attributes and the given (else the configured) exporters.
    The resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the default name is ours."""
    resource = Resource.create({"service.name": os.getenv("OTEL_SERVICE_NAME") or "refundagent"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(TicketContextProcessor())
    for processor in processors:
        provider.add_span_processor(processor)
    for exporter in _exporters() if exporters is None else exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def instrument() -> None:
    """Django (a span per request) and Celery (a span per publish and per task, the context carried
    in the message headers). Once per process."""
    if _done["instrumented"]:
        return
    DjangoInstrumentor().instrument(excluded_urls="api/health,static/")
    CeleryInstrumentor().instrument()
    _done["instrumented"] = True


def observability_setup() -> None:
    """Once per process: tracing if configured, Sentry if configured, the Celery context signals."""
    if _done["setup"]:
        return
    _done["setup"] = True
    telemetry.content_export_set(getattr(settings, "OTEL_EXPORT_CONTENT", False))
    if otel_enabled():
        trace.set_tracer_provider(tracer_provider_build())
        instrument()
    if getattr(settings, "SENTRY_DSN", ""):
        sentry_setup(dsn=settings.SENTRY_DSN)


_task_tokens: dict[str, list] = {}


@task_prerun.connect(weak=False)
def _task_bind(task_id=None, task=None, args=None, kwargs=None, **_):
    ticket = (kwargs or {}).get("ticket_id")
    _task_tokens[task_id] = telemetry.bind_set(task_id=task_id, ticket=ticket)


@task_postrun.connect(weak=False)
def _task_unbind(task_id=None, **_):
    telemetry.bind_reset(_task_tokens.pop(task_id, []))


# --- Sentry -----------------------------------------------------------------------------------


def sentry_scrub(event: dict, hint=None) -> dict:
    """before_send: the trace's redaction (emails, payment references, card numbers) on every
    string of the event, so customer data never leaves with an error report."""
    return redact(event)


def sentry_setup(*, dsn: str) -> None:
    sentry_sdk.init(
        dsn=dsn,
        integrations=[DjangoIntegration(), CeleryIntegration()],
        send_default_pii=False,
        before_send=sentry_scrub,
        environment=os.getenv("SENTRY_ENVIRONMENT") or None,
        release=os.getenv("SENTRY_RELEASE") or None,
        # Traces go to OpenTelemetry; Sentry gets the errors.
        traces_sample_rate=0.0,
    )
