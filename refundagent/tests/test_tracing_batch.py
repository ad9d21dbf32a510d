"""Trace batches: several events in one INSERT, in order, redacted, never a seq twice."""

import threading

import pytest
from django.db import connection, transaction

from refundagent.models import Ticket, TraceEvent
from refundagent.services import ticket_create
from refundagent.tracing import trace_batch, trace_record


@pytest.fixture
def ticket(user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        return ticket_create(user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="refund please")


def test_a_batch_writes_its_events_in_order_in_one_statement(ticket, django_assert_num_queries):
    sensitive = ["jane.doe@example.com"]
    with transaction.atomic():
        with django_assert_num_queries(1):
            with trace_batch():
                for n in range(4):
                    trace_record(
                        ticket=ticket,
                        span="policy",
                        decision=f"d{n}",
                        reason="mail jane.doe@example.com",
                        sensitive=sensitive,
                    )
    events = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", "decision", "reason"))
    assert [(s, d) for s, d, _ in events] == [(1, "filed"), (2, "d0"), (3, "d1"), (4, "d2"), (5, "d3")]
    assert all("jane" not in r for _, _, r in events)


def test_a_batch_that_raises_writes_nothing(ticket):
    with pytest.raises(ZeroDivisionError), transaction.atomic(), trace_batch():
        trace_record(ticket=ticket, span="policy", decision="lost", sensitive=[])
        raise ZeroDivisionError("the decision failed")
    assert not TraceEvent.objects.filter(ticket=ticket, decision="lost").exists()
    trace_record(ticket=ticket, span="policy", decision="after", sensitive=[])  # batching is off again
    assert TraceEvent.objects.filter(ticket=ticket, decision="after").exists()


@pytest.mark.django_db(transaction=True)
def test_a_batch_racing_single_writers_loses_no_event_and_no_seq_twice(user):
    ticket = ticket_create(user=user("acme-support"), order="ORD-5003", customer="CUST-1001", message="refund please")
    start = threading.Barrier(5)

    def single(n):
        start.wait()
        for i in range(10):
            trace_record(ticket=ticket, span="tool", decision=f"s{n}-{i}", sensitive=[])
        connection.close()

    def batched():
        start.wait()
        for i in range(10):
            with transaction.atomic(), trace_batch():
                for j in range(4):
                    trace_record(ticket=ticket, span="policy", decision=f"b{i}-{j}", sensitive=[])
        connection.close()

    threads = [threading.Thread(target=single, args=(n,)) for n in range(4)] + [threading.Thread(target=batched)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # (the eager agent run that filing started wrote its own events too)
    decisions = list(TraceEvent.objects.filter(ticket=ticket).values_list("decision", flat=True))
    seqs = list(TraceEvent.objects.filter(ticket=ticket).values_list("seq", flat=True))
    assert len(seqs) == len(set(seqs)) == len(decisions)
    assert sorted(d for d in decisions if d.startswith("s")) == sorted(f"s{n}-{i}" for n in range(4) for i in range(10))
    assert sorted(d for d in decisions if d.startswith("b")) == sorted(f"b{i}-{j}" for i in range(10) for j in range(4))


def test_a_nested_batch_that_raises_drops_its_own_events_and_keeps_the_outer_ones(ticket):
    # given an outer batch (the loop's run) with an event, and a nested one (a decision) that fails
    with transaction.atomic(), trace_batch():
        trace_record(ticket=ticket, span="model", decision="kept", sensitive=[])
        with pytest.raises(ZeroDivisionError), transaction.atomic(), trace_batch():
            trace_record(ticket=ticket, span="draft", decision="rolled-back", sensitive=[])
            raise ZeroDivisionError("the decision failed")
        trace_record(ticket=ticket, span="stop", decision="after", sensitive=[])

    # then the outer events are written in order, the nested block's are not
    decisions = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("decision", flat=True))
    assert decisions == ["filed", "kept", "after"]


def test_filing_writes_the_ticket_and_its_first_event_in_one_statement(user, django_capture_on_commit_callbacks):
    support = user("acme-support")
    statements = []
    with (
        django_capture_on_commit_callbacks(execute=False),
        connection.execute_wrapper(lambda execute, sql, *rest: statements.append(sql) or execute(sql, *rest)),
    ):
        ticket = ticket_create(user=support, order="ORD-5001", customer="CUST-1001", message="refund please")
    # (the filer's role and tenant, the order with its customer are read, then) ONE write holds
    # the ticket and its event: no BEGIN, no second INSERT, no COMMIT of its own
    writes = [s for s in statements if "refundagent_" in s]
    assert len(writes) == 1
    assert writes[0].startswith('WITH t AS (INSERT INTO "refundagent_ticket"')
    assert 'INSERT INTO "refundagent_traceevent"' in writes[0]
    event = TraceEvent.objects.get(ticket=ticket)
    assert (event.seq, event.span, event.status, event.decision) == (1, "run", "queued", "filed")
    assert event.reason == "Filed by acme-support."
    assert event.trace_id == ticket.trace_id


def test_filing_inside_a_callers_transaction_rolls_back_with_it(user, django_capture_on_commit_callbacks):
    tickets, events = Ticket.objects.count(), TraceEvent.objects.count()
    with pytest.raises(ZeroDivisionError), django_capture_on_commit_callbacks(execute=True) as callbacks:
        with transaction.atomic():
            ticket = ticket_create(
                user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="refund please"
            )
            assert TraceEvent.objects.filter(ticket=ticket, decision="filed").exists()  # written, not yet committed
            raise ZeroDivisionError("the caller failed")
    assert (Ticket.objects.count(), TraceEvent.objects.count()) == (tickets, events)
    assert callbacks == []  # the run was never queued for a ticket that does not exist


def test_filing_inside_a_nested_batch_that_raises_keeps_the_outer_events(ticket, user):
    # given an outer batch with an event of one ticket, and a nested block that files another then fails
    with transaction.atomic(), trace_batch():
        trace_record(ticket=ticket, span="model", decision="kept", sensitive=[])
        with pytest.raises(ZeroDivisionError), transaction.atomic(), trace_batch():
            filed = ticket_create(user=user("acme-support"), order="ORD-5003", customer="CUST-1001", message="x")
            trace_record(ticket=ticket, span="draft", decision="rolled-back", sensitive=[])
            raise ZeroDivisionError("the block failed")
        trace_record(ticket=ticket, span="stop", decision="after", sensitive=[])

    # then the outer events are written in order, the block's are not, and the filing rolled back
    decisions = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("decision", flat=True))
    assert decisions == ["filed", "kept", "after"]
    assert not Ticket.objects.filter(pk=filed.pk).exists()
