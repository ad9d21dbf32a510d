"""Recording trace events: one trace per ticket, events in order, redacted before storage.

An event's `seq` is its place in its ticket's trace, given under a row lock: the INSERT numbers
its events after the ticket's last one, in a statement that starts once the writer holds the
lock, so two writers on one ticket take turns instead of racing for a number (no retry); the
unique (ticket, seq) constraint stays as the backstop. The lock (`trace_lock`) is the ticket's
row and, while an agent run is open on the ticket, that run's row too, both FOR NO KEY UPDATE
(rows that only refer to them do not wait). The agent's loop holds its run's row at every
persist anyway (the compare-and-set on its claim), and no other writer gets past it: the loop
numbers its events under that lock alone, one statement fewer per step. The ticket comes after
the order in the lock order (approvals.locks), and before its run.

A write that the events describe records them first (`trace_event_build`) and writes them in its
own transaction (`trace_events_write`): the agent loop writes a step's events with the step's
persist, so a step and its trace commit together (refundagent.agent.loop).
"""

import functools
from collections import Counter

from django.db import transaction
from django.db.models import Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from .expressions import CompiledOnce
from .models import AgentRun, Ticket, TraceEvent
from .redaction import redact, redact_text, sensitive_values_for_ticket


def trace_event_build(
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
    """An event of the ticket's trace, redacted and timed now, not yet written. `sensitive`
    (else derived from the ticket's order) lists exact values to redact; patterns catch emails
    and payment references."""
    known = sensitive if sensitive is not None else sensitive_values_for_ticket(ticket)
    return TraceEvent(
        ticket_id=ticket.pk,
        run_id=getattr(run, "pk", run),
        trace_id=ticket.trace_id,
        span=span,
        status=status,
        decision=decision[:40],
        reason=redact_text(reason, known)[:200],
        tool=tool,
        duration_ms=duration_ms,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        data=redact(data or {}, known),
        at=timezone.now(),
    )


def trace_lock(ticket_ids) -> None:
    """Take, for the caller's transaction, the locks under which the traces of `ticket_ids` are
    numbered: each ticket's row, then its open agent run's, each in id order (so two writers of
    several tickets never wait on each other in a circle). A run being opened meanwhile waits for
    the ticket's row (the claim moves the ticket), and is seen by the second statement."""
    tickets = Ticket.objects.select_for_update(no_key=True).filter(pk__in=ticket_ids).order_by("pk")
    list(tickets.values_list("pk", flat=True))
    runs = AgentRun.objects.select_for_update(no_key=True).filter(ticket_id__in=ticket_ids)
    list(runs.exclude(status=AgentRun.Status.STOPPED).order_by("pk").values_list("pk", flat=True))


# ~16 KB each (a resolved subquery), kept by the _seq_at entries too: ~4 MB at most, room for
# a worker's runs in flight.
@functools.lru_cache(maxsize=256)
def _last_seq(ticket_id: int) -> CompiledOnce:
    """The ticket's last seq, as an INSERT reads it. A run writes its ticket's trace at every
    step: built and compiled once, not once a row. Its SQL reads the last seq anew each time."""
    seqs = TraceEvent.objects.filter(ticket_id=ticket_id).order_by("-seq").values("seq")
    return CompiledOnce(Coalesce(Subquery(seqs[:1]), Value(0)))


@functools.lru_cache(maxsize=256)
def _seq_at(ticket_id: int, place: int) -> CompiledOnce:
    """The seq of the `place`-th event (from 1) of one write to the ticket's trace (1-3 a step),
    compiled once too."""
    return CompiledOnce(_last_seq(ticket_id) + place)


def trace_events_write(events: list[TraceEvent], *, locked: bool = False) -> None:
    """Append `events` (of one ticket or several) to their traces, in the order given, in one
    INSERT, inside the caller's transaction if there is one. `locked`: the caller's transaction
    holds the lock already (`trace_lock`; or, for the open run's own events, the run's row; or
    the ticket's new row, which nobody else sees before it commits), so no statement is spent
    taking it again."""
    if not events:
        return
    with transaction.atomic(savepoint=False):
        if not locked:
            trace_lock({event.ticket_id for event in events})
        # Each ticket's last seq is read by the INSERT itself, once the lock is held: no other
        # writer can take a number meanwhile.
        places: Counter[int] = Counter()
        for event in events:
            places[event.ticket_id] += 1
            event.seq = _seq_at(event.ticket_id, places[event.ticket_id])
        TraceEvent.objects.bulk_create(events)


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
) -> None:
    """Append one event to the ticket's trace now (`trace_event_build`, then `trace_events_write`)."""
    event = trace_event_build(
        ticket=ticket,
        span=span,
        status=status,
        decision=decision,
        reason=reason,
        tool=tool,
        run=run,
        duration_ms=duration_ms,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        data=data,
        sensitive=sensitive,
    )
    trace_events_write([event])


def trace_export(ticket: Ticket) -> dict:
    """The trace as JSON (docs/api.md: GET /api/tickets/{id}/trace)."""
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
