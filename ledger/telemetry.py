"""Telemetry for every layer: spans and the log context, with no import of any app.

It lives in the lowest app so that ledger, approvals, the agent and evals can all use it
without breaking the import direction. It needs only the OpenTelemetry API: without a
configured SDK (refundagent.config.observability sets one up from the OTEL_* variables) every
span is a no-op, so the code is the same with tracing on or off.

- `span(name, **attributes)` / `@traced(name)`: a span around a block or a function.
- `bind(tenant=..., ticket=...)`: the context that every log line and every span of the block
  carries (request id, task id, tenant, ticket, the ticket's trace id).
- `content_set(span, key, text)`: prompts, tool arguments and results go on a span only when
  the operator opted in (OTEL_EXPORT_CONTENT), and the caller passes them already redacted.
"""

import functools
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, Status, StatusCode, TraceFlags

TRACER_NAME = __name__
# One line per decision that moves or refuses money (approval, execution, payout, verification),
# at INFO whatever the root level (settings.LOGGING), with an `event` field: for every layer.
money_log = logging.getLogger("money")
# A proxy until the SDK is configured: spans started after setup are real, before it no-ops.
_tracer = trace.get_tracer(TRACER_NAME)
_PROXY_TRACER = _tracer

# The log/span context. Empty string = unknown.
CONTEXT_FIELDS = ("request_id", "task_id", "tenant", "ticket", "ticket_trace_id")
_vars: dict[str, ContextVar[str]] = {name: ContextVar(f"refundagent_{name}", default="") for name in CONTEXT_FIELDS}

_content = {"enabled": False}


def context() -> dict[str, str]:
    """The bound context values that are known."""
    return {name: var.get() for name, var in _vars.items() if var.get()}


def bind_set(**values) -> list[Token]:
    """Set context values (None/"" leave a field as it is); give the tokens to bind_reset."""
    tokens = []
    for name, value in values.items():
        if value is None or value == "":
            continue
        tokens.append(_vars[name].set(str(value)))
    return tokens


def bind_reset(tokens: list[Token]) -> None:
    for token in reversed(tokens):
        token.var.reset(token)


@contextmanager
def bind(**values) -> Iterator[None]:
    """Bind context values for the block (see CONTEXT_FIELDS)."""
    tokens = bind_set(**values)
    try:
        yield
    finally:
        bind_reset(tokens)


def bind_ticket(ticket) -> list[Token]:
    """Bind a ticket's tenant, id and trace id; returns the tokens (for bind_reset)."""
    return bind_set(
        tenant=getattr(ticket, "tenant_id", None), ticket=ticket.pk, ticket_trace_id=ticket_trace_hex(ticket)
    )


def ticket_trace_hex(ticket) -> str:
    """The ticket's trace id as OpenTelemetry writes trace ids (32 hex digits)."""
    trace_id = getattr(ticket, "trace_id", None)
    return trace_id.hex if isinstance(trace_id, uuid.UUID) else str(trace_id or "").replace("-", "")


def ticket_span_mark(ticket) -> None:
    """Put the ticket's ids on the current span (the request that filed or decided it)."""
    attributes_set(
        trace.get_current_span(),
        refund__ticket__id=ticket.pk,
        refund__ticket__trace_id=ticket_trace_hex(ticket),
        refund__tenant__id=getattr(ticket, "tenant_id", None),
    )


def current_trace_uuid() -> uuid.UUID | None:
    """The current OpenTelemetry trace id as a UUID (the same 128 bits), or None without one."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return uuid.UUID(int=span_context.trace_id)


def current_trace_hex() -> str:
    span_context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(span_context.trace_id) if span_context.is_valid else ""


def _clean(attributes: dict) -> dict:
    """OpenTelemetry takes str/bool/int/float and lists of them; None is left out, the rest is str."""
    cleaned = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            cleaned[key] = value
        elif isinstance(value, (list, tuple)):
            cleaned[key] = [v if isinstance(v, (str, bool, int, float)) else str(v) for v in value if v is not None]
        else:
            cleaned[key] = str(value)
    return cleaned


def attributes_set(span: Span, **attributes) -> None:
    """Set attributes given as keyword arguments with `__` for dots (gen_ai__usage__input_tokens)."""
    if span.is_recording():
        span.set_attributes(_clean({k.replace("__", "."): v for k, v in attributes.items()}))


@contextmanager
def span(
    name: str, *, attributes: dict | None = None, ok: tuple[type[BaseException], ...] = (), links: list | None = None
) -> Iterator[Span]:
    """A span around the block. An exception of a type in `ok`, or whose class says
    `span_ok = True`, is control flow (a stop of the agent loop), not an error: it leaves the
    span's status unset."""
    with _tracer.start_as_current_span(
        name, attributes=_clean(attributes or {}), links=links, record_exception=False, set_status_on_exception=False
    ) as current:
        with span_errors(current, ok):
            yield current


@contextmanager
def ticket_trace_span(name: str, trace_id, *, attributes: dict | None = None) -> Iterator[Span]:
    """A span in the ticket's own trace, whatever trace is current: work that happens later for
    a ticket (finance's approval executed by a worker, a run enqueued by a sweep) joins the trace
    the ticket was filed in, so the tracing backend shows the ticket as one trace from its HTTP
    request to the ledger write. The current span (the later request or task) is linked.

    The parent is a remote placeholder (span id = the trace id's low 64 bits, the same for every
    joined span of a ticket): the backend shows these spans under it in the ticket's trace."""
    try:
        ticket_trace = uuid.UUID(str(trace_id)).int
    except ValueError:
        ticket_trace = 0
    current = trace.get_current_span().get_span_context()
    if not ticket_trace or (current.is_valid and current.trace_id == ticket_trace):
        with span(name, attributes=attributes) as joined:
            yield joined
        return
    placeholder = SpanContext(
        trace_id=ticket_trace,
        span_id=(ticket_trace & 0xFFFFFFFFFFFFFFFF) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    parent = trace.set_span_in_context(NonRecordingSpan(placeholder))
    links = [Link(current)] if current.is_valid else None
    with _tracer.start_as_current_span(
        name,
        context=parent,
        links=links,
        attributes=_clean(attributes or {}),
        record_exception=False,
        set_status_on_exception=False,
    ) as joined:
        with span_errors(joined):
            yield joined


@contextmanager
def span_errors(current: Span, ok: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Record an exception leaving the block on `current` (control-flow exceptions excepted)."""
    try:
        yield
    except BaseException as exc:
        if not (isinstance(exc, ok) or getattr(exc, "span_ok", False)) and current.is_recording():
            current.record_exception(exc)
            current.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}"))
            current.set_attribute("error.type", type(exc).__name__)
        raise


def spans_off() -> bool:
    """Whether every span is a no-op: no SDK set up (the proxy tracer delegates to the no-op
    tracer) and no tracer put in its place (the tests' in-memory one). A no-op span records
    nothing and carries its parent's context, so not making one changes nothing."""
    return _tracer is _PROXY_TRACER and isinstance(
        trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    )


def traced(name: str, *, result: Callable[[Any], dict] | None = None) -> Callable:
    """Decorate a function with a span; `result(returned)` adds attributes from what it returned."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if spans_off():
                # A no-op span still costs three context managers: a measurable share of the
                # ledger write, which runs on every refund.
                return function(*args, **kwargs)
            with span(name) as current:
                value = function(*args, **kwargs)
                if result is not None and current.is_recording():
                    current.set_attributes(_clean(result(value)))
                return value

        return wrapper

    return decorate


def content_export_enabled() -> bool:
    return _content["enabled"]


def content_export_set(enabled: bool) -> None:
    """Set by the wiring from settings.OTEL_EXPORT_CONTENT (tests flip it)."""
    _content["enabled"] = bool(enabled)


def content_set(span: Span, key: str, redacted: str) -> None:
    """Put content on a span only when the operator opted in. The caller redacts it first."""
    if _content["enabled"] and span.is_recording():
        span.set_attribute(key, redacted)
