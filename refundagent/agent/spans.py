"""The agent's OpenTelemetry spans: the run, each model call and each tool call.

Model calls follow the GenAI semantic conventions (span "chat <model>", gen_ai.operation.name,
gen_ai.request.model, gen_ai.usage.*, gen_ai.response.finish_reasons); tool calls are
"execute_tool <name>" with gen_ai.tool.name. The anthropic SDK's own span of the HTTP call
(anthropic.messages.create) nests under the model call span, kept metadata-only.

Only metadata by default. With OTEL_EXPORT_CONTENT the prompt's last message, the answer and
each tool's arguments and result are added after the redaction the stored trace gets.
"""

import json
from contextlib import contextmanager
from contextvars import ContextVar

from ledger import telemetry
from ledger.models import Payment, PaymentMethod

from ..redaction import redact, redact_text
from .providers.base import ModelTurn, Provider, ToolCall

AGENT_NAME = "refundagent"

# Exported content also hides the customer's card last4 digits, which the stored trace keeps
# (the reviewer needs them): set per run, only when content export is on.
_export_extra: ContextVar[tuple[str, ...]] = ContextVar("refundagent_export_extra", default=())


@contextmanager
def agent_run_span(*, ticket, run, how: str):
    """The whole run of the agent on a ticket; binds the ticket for every span and log line in it.
    A run that is not in the ticket's own trace (enqueued by a sweep, a retry) links to it."""
    tokens = telemetry.bind_ticket(ticket)
    extra = _export_extra.set(_card_digits(ticket) if telemetry.content_export_enabled() else ())
    try:
        # In the ticket's own trace even when a sweep or a retry enqueued the run.
        with telemetry.ticket_trace_span(
            f"invoke_agent {AGENT_NAME}",
            ticket.trace_id,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": AGENT_NAME,
                "refund.agent.run_id": run.pk,
                "refund.agent.claim": how,
            },
        ) as span:
            yield span
    finally:
        _export_extra.reset(extra)
        telemetry.bind_reset(tokens)


def _card_digits(ticket) -> tuple[str, ...]:
    methods = PaymentMethod.objects.filter(customer_id=ticket.customer_id).exclude(last4="")
    payments = Payment.objects.filter(order__customer_id=ticket.customer_id).exclude(card_last4="")
    return tuple({*methods.values_list("last4", flat=True), *payments.values_list("card_last4", flat=True)})


def step_span(*, iteration: int):
    return telemetry.span("refund.agent.step", attributes={"refund.agent.iteration": iteration})


def model_complete(
    provider: Provider, *, sensitive: list[str], system: str, tools: list, messages: list[dict], max_tokens: int
) -> ModelTurn:
    """provider.complete inside a GenAI "chat" span with the usage and the finish reason."""
    model = getattr(provider, "model", "") or provider.name
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider.name,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens,
    }
    with telemetry.span(f"chat {model}", attributes=attributes) as span:
        if messages:
            telemetry.content_set(span, "gen_ai.input.messages", _redacted_json(messages[-1:], sensitive))
        turn = provider.complete(system=system, tools=tools, messages=messages, max_tokens=max_tokens)
        usage = turn.usage
        telemetry.attributes_set(
            span,
            gen_ai__response__model=turn.model or model,
            gen_ai__response__finish_reasons=[turn.stop_reason or ""],
            gen_ai__usage__input_tokens=usage.input_tokens,
            gen_ai__usage__output_tokens=usage.output_tokens,
            gen_ai__usage__cache_read__input_tokens=usage.cache_read_input_tokens,
            gen_ai__usage__cache_creation__input_tokens=usage.cache_creation_input_tokens,
            refund__agent__tool_calls=[c.name for c in turn.tool_calls],
        )
        telemetry.content_set(span, "gen_ai.output.messages", _redacted_json(turn.content, sensitive))
        return turn


def tool_answer(call: ToolCall, handle, *, sensitive: list[str]) -> dict:
    """handle(call) inside an "execute_tool" span; the answer's error flag and, opted in, content."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
        "gen_ai.tool.type": "function",
    }
    with telemetry.span(f"execute_tool {call.name}", attributes=attributes) as span:
        telemetry.content_set(span, "gen_ai.tool.call.arguments", _redacted_json(call.input, sensitive))
        result = handle(call)
        telemetry.attributes_set(span, refund__tool__is_error=bool(result.get("is_error")))
        telemetry.content_set(
            span, "gen_ai.tool.call.result", _redacted_text(str(result.get("content", "")), sensitive)
        )
        return result


def _redacted_text(text: str, sensitive: list[str]) -> str:
    # Redacted only when it will be exported: every tool call of every run passes here.
    if not telemetry.content_export_enabled():
        return ""
    return redact_text(text, [*sensitive, *_export_extra.get()])


def _redacted_json(value, sensitive: list[str]) -> str:
    if not telemetry.content_export_enabled():
        return ""
    return json.dumps(redact(value, [*sensitive, *_export_extra.get()]), default=str)
