"""Observability wiring: OpenTelemetry, the log context and format, Sentry (docs/operations.md).

Everything here is configured by the environment and is off when nothing is set:
- tracing: the standard OTEL_* variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER,
  OTEL_SERVICE_NAME, ...); Django and Celery are instrumented, the agent's spans come from
  ledger.telemetry;
- logs: one line per record, JSON in production (LOG_FORMAT=json, the default when DEBUG is
  off), each with the request id, task id, tenant, ticket and trace id;
- errors: SENTRY_DSN turns on sentry-sdk, with send_default_pii off and the trace's redaction.

`observability_setup()` runs once per process from the app's ready(), in the web process and
in the worker, before any request or task.
"""

import logging
import os

from celery.signals import task_postrun, task_prerun
from django.conf import settings
from django.dispatch import receiver
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from approvals.signals import approval_decided, refund_executed, refund_verified
from ledger import telemetry
from refundagent.models import Ticket
from refundagent.redaction import redact

log = logging.getLogger("refundagent.money")

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
            "refundagent.ticket.trace_id": bound.get("ticket_trace_id"),
            "refundagent.ticket.id": bound.get("ticket"),
            "refundagent.tenant.id": bound.get("tenant"),
            "refundagent.request.id": bound.get("request_id"),
        }
        span.set_attributes({k: v for k, v in attributes.items() if v})


def _exporters() -> list[SpanExporter]:
    names = [n.strip().lower() for n in os.getenv("OTEL_TRACES_EXPORTER", "otlp").split(",") if n.strip()]
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            # OTLP over HTTP/protobuf: reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT.
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

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
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor

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


# --- the money decisions: one line each -------------------------------------------------------


def _request_fields(request) -> dict:
    ticket_trace = ""
    if request.ticket_ref is not None:
        trace_id = Ticket.objects.filter(pk=request.ticket_ref).values_list("trace_id", flat=True).first()
        ticket_trace = trace_id.hex if trace_id else ""
    return {
        "tenant": request.tenant_id,
        "ticket": request.ticket_ref or "",
        "ticket_trace_id": ticket_trace,
        "approval": request.pk,
        "amount": str(request.amount),
        "currency": request.currency,
        "approval_status": request.status,
    }


@receiver(approval_decided, dispatch_uid="observability_approval_decided")
def _log_approval_decided(sender, request, decision, actor=None, **kwargs):
    fields = _request_fields(request)
    fields.update(event="approval.decided", decision=decision, actor=getattr(actor, "pk", None))
    if kwargs.get("reason"):
        fields["reason"] = kwargs["reason"]
    log.info("approval %s %s -> %s", request.pk, decision, request.status, extra=fields)


@receiver(refund_executed, dispatch_uid="observability_refund_executed")
def _log_refund_executed(sender, request, entry, replayed=False, **kwargs):
    fields = _request_fields(request)
    fields.update(event="refund.executed", ledger_entry=entry.pk, replayed=replayed)
    log.info(
        "refund %s of approval %s written to the ledger%s",
        entry.pk,
        request.pk,
        " (replayed)" if replayed else "",
        extra=fields,
    )


@receiver(refund_verified, dispatch_uid="observability_refund_verified")
def _log_refund_verified(sender, request, verdict, **kwargs):
    fields = _request_fields(request)
    fields.update(event="refund.verified", ok=bool(verdict.get("ok")), stage=verdict.get("stage"))
    if verdict.get("ok"):
        log.info("approval %s verified against the ledger", request.pk, extra=fields)
    else:
        reason = verdict.get("detail") or ", ".join(verdict.get("failed") or []) or verdict.get("error", "")
        log.error(
            "approval %s failed at %s: %s", request.pk, verdict.get("stage"), reason, extra={**fields, "reason": reason}
        )


# --- Sentry -----------------------------------------------------------------------------------


def sentry_scrub(event: dict, hint=None) -> dict:
    """before_send: the trace's redaction (emails, payment references, card numbers) on every
    string of the event, so customer data never leaves with an error report."""
    return redact(event)


def sentry_setup(*, dsn: str) -> None:
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.django import DjangoIntegration

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
