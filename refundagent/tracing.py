"""Recording trace events: one trace per ticket, events in order, redacted before storage."""

from django.db import IntegrityError, transaction
from django.db.models import Max

from .models import Ticket, TraceEvent
from .redaction import redact, redact_text, sensitive_values_for_order


def trace_record(
    *,
    ticket: Ticket,
    span: str,
    status: str = "ok",
    decision: str = "",
    reason: str = "",
    tool: str = "",
    run=None,
    duration_ms: int | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    data: dict | None = None,
    sensitive: list[str] | None = None,
) -> TraceEvent:
    """Append an event to the ticket's trace. `sensitive` (else derived from the ticket's
    order) lists exact values to redact; patterns catch emails and payment references."""
    known = sensitive if sensitive is not None else sensitive_values_for_order(ticket.order)
    for _ in range(5):
        seq = (TraceEvent.objects.filter(ticket=ticket).aggregate(m=Max("seq"))["m"] or 0) + 1
        try:
            with transaction.atomic():
                return TraceEvent.objects.create(
                    ticket=ticket,
                    run=run,
                    trace_id=ticket.trace_id,
                    seq=seq,
                    span=span,
                    status=status,
                    decision=decision[:40],
                    reason=redact_text(reason, known)[:200],
                    tool=tool,
                    duration_ms=duration_ms,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    data=redact(data or {}, known),
                )
        except IntegrityError:
            continue  # another writer took this seq; take the next one
    raise RuntimeError(f"Could not append to the trace of ticket {ticket.pk}")


def trace_export(ticket: Ticket) -> dict:
    """The trace as JSON (API.md: GET /api/tickets/{id}/trace)."""
    return {
        "trace_id": str(ticket.trace_id),
        "ticket": ticket.pk,
        "events": [
            {
                "seq": e.seq,
                "span": e.span,
                "status": e.status,
                "decision": e.decision,
                "reason": e.reason,
                "tool": e.tool,
                "at": e.at.isoformat(),
                "duration_ms": e.duration_ms,
                "input_tokens": e.input_tokens,
                "output_tokens": e.output_tokens,
                "data": e.data,
            }
            for e in ticket.trace_events.order_by("seq")
        ],
    }
