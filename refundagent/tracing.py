"""Recording trace events: one trace per ticket, events in order, redacted before storage."""

import functools
import random
import threading
import time
from contextlib import contextmanager

from django.db import connection, transaction
from django.utils import timezone

from .combined_writes import insert_statement, inserted, update_statement
from .models import Ticket, TraceEvent
from .redaction import redact, redact_text, sensitive_values_for_ticket


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
    known = sensitive if sensitive is not None else sensitive_values_for_ticket(ticket)
    values = {
        "ticket_id": ticket.pk,
        "run_id": getattr(run, "pk", run),
        "trace_id": ticket.trace_id,
        "span": span,
        "status": status,
        "decision": decision[:40],
        "reason": redact_text(reason, known)[:200],
        "tool": tool,
        "duration_ms": duration_ms,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "data": redact(data or {}, known),
        "at": timezone.now(),
    }
    batch = getattr(_batch, "events", None)
    if batch is not None:
        batch.append(values)
        return TraceEvent(**values)  # written, with its seq, when the batch ends
    return _append(values)


_batch = threading.local()


@contextmanager
def trace_batch():
    """Events recorded inside the block are written together when it ends, in one INSERT
    instead of one per event (the agent's decision records four). Use it inside the
    transaction that the events belong to; if the block raises, they are dropped with it.

    Inside another batch (the agent loop keeps one open for its run) the block joins it: its
    events wait for the outer batch's next write, and if the block raises, the events it
    recorded are dropped and the outer ones kept."""
    outer = getattr(_batch, "events", None)
    if outer is not None:
        mark, flushes = len(outer), _batch.flushes
        try:
            yield
        except BaseException:
            # Written meanwhile (trace_write_with_update): what is left is all this block's.
            del outer[0 if _batch.flushes != flushes else mark :]
            raise
        return
    _batch.events, _batch.flushes = [], 0
    try:
        yield
        events, _batch.events = _batch.events, None
        _append_many(events)
    finally:
        _batch.events = None


def trace_write_with_update(queryset, values: dict) -> int:
    """`queryset.update(**values)` and the current batch's pending events in ONE statement on
    PostgreSQL (one transaction on SQLite): the events are written only if the update matched,
    their seqs follow the ticket's last one in that same statement. Returns the rows updated.
    Without pending events, a plain update. The agent loop's persist: a step and its trace
    commit together, and a worker that lost its claim writes neither."""
    pending = getattr(_batch, "events", None)
    if not pending:
        return queryset.update(**values)
    events = list(pending)
    pending.clear()
    _batch.flushes += 1
    first = events[0]["ticket_id"]
    mine = [e for e in events if e["ticket_id"] == first]
    others = [e for e in events if e["ticket_id"] != first]
    if connection.vendor != "postgresql":
        # SQLite serialises writers: the update and the appends in one transaction are enough.
        with transaction.atomic(using=queryset.db):
            updated = queryset.update(**values)
            if updated:
                _append_many(events)
        return updated
    update_sql, update_params = update_statement(queryset, values)
    insert_sql, insert_params = _insert_select(mine, where="EXISTS (SELECT 1 FROM r)")
    statement = (
        f"WITH r AS ({update_sql} RETURNING 1), {_last_seq()}, ins AS ({insert_sql}) "
        f"SELECT (SELECT count(*) FROM r), ARRAY(SELECT ins.{_quote('seq')} - m.last FROM ins CROSS JOIN m)"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*update_params, first, *insert_params])
        updated, written = cursor.fetchone()
    if updated:
        # Another writer took a seq in the same instant (rare): those events follow on their own.
        for n, event in enumerate(mine, start=1):
            if n not in written:
                _append(event)
        _append_many(others)
    return updated


def trace_write_with_insert(ticket: Ticket) -> None:
    """Insert a new `ticket` and the current batch's pending events, recorded on it before it had
    an id, in ONE statement on PostgreSQL (one transaction on SQLite): filing is one round trip
    instead of BEGIN, two INSERTs and COMMIT. The events take the ticket's id and seqs from 1."""
    pending = getattr(_batch, "events", None)
    if pending is None:
        raise RuntimeError("trace_write_with_insert needs an open trace_batch()")
    # Only the new ticket's events leave the batch; any others keep their places (so the count of
    # flushes, by which a nested batch that raises tells its events from the outer ones, stays).
    mine = [e for e in pending if e["ticket_id"] is None]
    pending[:] = [e for e in pending if e["ticket_id"] is not None]
    using = connection.alias
    if connection.vendor != "postgresql" or not mine:
        with transaction.atomic(using=using):
            ticket.save(force_insert=True, using=using)
            for event in mine:
                event["ticket_id"] = ticket.pk
            if mine:
                _append_many(mine)
        return
    ticket_sql, ticket_params = insert_statement(ticket, using=using)
    events_sql, events_params = _insert_select(mine, ticket_id="m.ticket")
    # A new ticket has no events: its last seq is 0.
    statement = (
        f"WITH t AS ({ticket_sql}), m AS (SELECT 0 AS last, t.id AS ticket FROM t), ins AS ({events_sql}) "
        "SELECT ticket FROM m"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*ticket_params, *events_params])
        (pk,) = cursor.fetchone()
    inserted(ticket, pk=pk, using=using)
    for event in mine:
        event["ticket_id"] = pk


def _append(values: dict) -> TraceEvent:
    for attempt in range(50):
        if attempt >= 3:
            time.sleep(random.uniform(0, 0.002 * attempt))  # heavy contention on one ticket: spread out
        inserted = _insert_next(values)
        if inserted is not None:
            event = TraceEvent(id=inserted[0], seq=inserted[1], **values)
            event._state.adding = False
            event._state.db = connection.alias
            return event
        # another writer took this seq: take the next one
    raise RuntimeError(f"Could not append to the trace of ticket {values['ticket_id']}")


def _append_many(events: list[dict]) -> None:
    """Append events in order: one statement per ticket. An event whose seq another writer
    took in the same instant is appended after the batch, on its own: nothing is lost and no
    seq is used twice, but that one event then follows its batch instead of leading it."""
    by_ticket: dict[int, list[dict]] = {}
    for values in events:
        by_ticket.setdefault(values["ticket_id"], []).append(values)
    for ticket_events in by_ticket.values():
        if len(ticket_events) == 1:
            _append(ticket_events[0])
            continue
        written = _insert_many(ticket_events)
        for n, values in enumerate(ticket_events, start=1):
            if n not in written:
                _append(values)


_FIELDS = (
    "ticket",
    "run",
    "trace_id",
    "span",
    "status",
    "decision",
    "reason",
    "tool",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "data",
    "at",
)


def _insert_next(values: dict) -> tuple[int, int] | None:
    """Append one event with the next seq of its ticket in ONE statement:
    WITH m (max seq) INSERT ... SELECT <values>, m.last + 1 ... ON CONFLICT DO NOTHING RETURNING id, seq.
    A concurrent writer that took the same seq makes it insert nothing (None) instead of raising,
    so no savepoint is needed inside a caller's transaction. Works on PostgreSQL and SQLite."""
    insert, params = _insert_select([values])
    with connection.cursor() as cursor:
        cursor.execute(f"WITH {_last_seq()} {insert}", [values["ticket_id"], *params])
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1])


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)


def _insert_select(events: list[dict], *, where: str = "true", ticket_id: str = "v.column1") -> tuple[str, list]:
    """INSERT ... SELECT <values>, m.last + n FROM (VALUES ...) v CROSS JOIN m WHERE <where>
    ON CONFLICT DO NOTHING RETURNING id, seq, for events of one ticket; the caller defines the CTE
    `m` (the ticket's last seq: `_last_seq`) before it. `ticket_id`: the SQL of the events'
    ticket id (by default their own value; the id of a ticket inserted in the same statement)."""
    fields, row, head, tail = _insert_select_parts(connection.vendor, ticket_id)
    params = []
    for n, values in enumerate(events, start=1):
        params.extend(f.get_db_prep_save(values[f.attname], connection) for f in fields)
        params.append(n)
    return f"{head}{', '.join([row] * len(events))}{tail.format(where=where)}", params


@functools.cache
def _insert_select_parts(vendor: str, ticket_id: str) -> tuple[list, str, str, str]:
    """The fixed parts of `_insert_select`'s statement, built once per database vendor (the
    column types for the casts are looked up field by field: too slow for every step)."""
    meta = TraceEvent._meta
    fields = [meta.get_field(name) for name in _FIELDS]
    cast = (lambda f: f"::{f.db_type(connection)}") if vendor == "postgresql" else (lambda f: "")
    row = "(" + ", ".join(f"%s{cast(f)}" for f in fields) + ", %s)"
    table, seq, ticket = _quote(meta.db_table), _quote(meta.get_field("seq").column), _quote("ticket_id")
    # VALUES columns are column1..columnN on both PostgreSQL and SQLite; the ticket's is the first.
    selected = ", ".join([ticket_id, *(f"v.column{i}" for i in range(2, len(fields) + 1))])
    position = f"v.column{len(fields) + 1}"
    columns = ", ".join(_quote(f.column) for f in fields)
    head = f"INSERT INTO {table} ({columns}, {seq}) SELECT {selected}, m.last + {position} FROM (VALUES "
    pk = _quote(meta.pk.column)
    tail = f") AS v CROSS JOIN m WHERE {{where}} ON CONFLICT ({ticket}, {seq}) DO NOTHING RETURNING {pk}, {seq}"
    return fields, row, head, tail


def _last_seq() -> str:
    """The CTE `m`: the ticket's last seq (0 without events); its one parameter is the ticket's id."""
    meta = TraceEvent._meta
    seq, table, ticket = _quote(meta.get_field("seq").column), _quote(meta.db_table), _quote("ticket_id")
    return f"m AS (SELECT COALESCE(MAX({seq}), 0) AS last FROM {table} WHERE {ticket} = %s)"


def _insert_many(events: list[dict]) -> set[int]:
    """Append several events of one ticket with consecutive seqs in ONE statement:
    INSERT ... SELECT <values>, max(seq) + n FROM (VALUES ...) ... ON CONFLICT DO NOTHING.
    Returns the positions (1-based) that were written."""
    postgres = connection.vendor == "postgresql"
    insert, params = _insert_select(events)
    if postgres:
        # A data-modifying CTE: the positions written are seq - last, with last read once.
        sql_ = f"WITH {_last_seq()}, ins AS ({insert}) SELECT ins.{_quote('seq')} - m.last FROM ins CROSS JOIN m"
    else:
        # SQLite serialises writers (IMMEDIATE transactions): nobody can take a seq meanwhile.
        sql_ = f"WITH {_last_seq()} {insert}"
    with connection.cursor() as cursor:
        cursor.execute(sql_, [events[0]["ticket_id"], *params])
        rows = cursor.fetchall()
    if postgres:
        return {row[0] for row in rows}
    if len(rows) != len(events):
        raise RuntimeError(f"Could not append {len(events)} events to the trace of ticket {events[0]['ticket_id']}")
    return set(range(1, len(events) + 1))


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
