"""Writing trace events: several in one INSERT, in order, redacted, numbered under the ticket's
row lock (and its open run's), never a seq twice, also while the agent's loop writes its own under
its run's; written in the caller's transaction and rolled back with it."""

import threading
import time

import pytest
from django.db import connection, transaction

from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import Ticket, TraceEvent
from refundagent.services import ticket_create
from refundagent.tracing import trace_event_build, trace_events_write, trace_record


@pytest.fixture
def ticket(user, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        return ticket_create(user=user("acme-support"), order="ORD-5001", customer="CUST-1001", message="refund please")


def _statements():
    statements = []
    return statements, connection.execute_wrapper(
        lambda execute, sql, *rest: statements.append(sql) or execute(sql, *rest)
    )


def test_events_recorded_together_are_written_in_order_in_one_insert(ticket, django_assert_num_queries):
    # given four events recorded with a value to redact
    sensitive = ["jane.doe@example.com"]
    events = [
        trace_event_build(
            ticket=ticket, span="policy", decision=f"d{n}", reason="mail jane.doe@example.com", sensitive=sensitive
        )
        for n in range(4)
    ]
    assert not TraceEvent.objects.filter(ticket=ticket, span="policy").exists()  # recorded, not written

    # when they are written: the ticket's row lock, its open run's (none here), then one INSERT
    with transaction.atomic(), django_assert_num_queries(3):
        trace_events_write(events)

    # then they follow the filing event in the order recorded, redacted
    events = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", "decision", "reason"))
    assert [(s, d) for s, d, _ in events] == [(1, "filed"), (2, "d0"), (3, "d1"), (4, "d2"), (5, "d3")]
    assert all("jane" not in r for _, _, r in events)


def test_an_event_keeps_the_time_it_was_recorded_at(ticket):
    # given an event recorded, and written a moment later (as a step's events wait for its persist)
    event = trace_event_build(ticket=ticket, span="model", decision="later", sensitive=[])
    recorded_at = event.at
    trace_record(ticket=ticket, span="tool", decision="between", sensitive=[])

    trace_events_write([event])

    # then it is stored with the time it was recorded (after the event written meanwhile by seq)
    stored = TraceEvent.objects.get(ticket=ticket, decision="later")
    assert stored.at == recorded_at
    assert stored.seq > TraceEvent.objects.get(ticket=ticket, decision="between").seq


def test_events_of_a_transaction_that_raises_are_not_written(ticket):
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        trace_record(ticket=ticket, span="policy", decision="lost", sensitive=[])
        raise ZeroDivisionError("the decision failed")
    assert not TraceEvent.objects.filter(ticket=ticket, decision="lost").exists()
    trace_record(ticket=ticket, span="policy", decision="after", sensitive=[])
    assert list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", "decision")) == [
        (1, "filed"),
        (2, "after"),
    ]


def test_events_of_several_tickets_are_numbered_each_in_its_own_trace(ticket, user, django_capture_on_commit_callbacks):
    # given a second ticket, and events of both recorded interleaved
    with django_capture_on_commit_callbacks(execute=False):
        other = ticket_create(user=user("acme-support"), order="ORD-5003", customer="CUST-1001", message="x")
    events = [
        trace_event_build(ticket=owner, span="eval", decision=f"{name}{n}", sensitive=[])
        for n in range(2)
        for owner, name in ((ticket, "a"), (other, "b"))
    ]

    # when they are written together
    trace_events_write(events)

    # then each trace goes on from its own last seq, in the order recorded
    for owner, name in ((ticket, "a"), (other, "b")):
        rows = list(TraceEvent.objects.filter(ticket=owner).order_by("seq").values_list("seq", "decision"))
        assert rows == [(1, "filed"), (2, f"{name}0"), (3, f"{name}1")]


@pytest.mark.django_db(transaction=True)
def test_writers_racing_on_one_ticket_lose_no_event_and_take_no_seq_twice(user):
    ticket = ticket_create(user=user("acme-support"), order="ORD-5003", customer="CUST-1001", message="refund please")
    start = threading.Barrier(5)
    errors = []

    def single(n):
        try:
            start.wait()
            for i in range(10):
                trace_record(ticket=ticket, span="tool", decision=f"s{n}-{i}", sensitive=[])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    def together():
        try:
            start.wait()
            for i in range(10):
                with transaction.atomic():
                    trace_events_write(
                        [
                            trace_event_build(ticket=ticket, span="policy", decision=f"b{i}-{j}", sensitive=[])
                            for j in range(4)
                        ]
                    )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=single, args=(n,)) for n in range(4)] + [threading.Thread(target=together)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # (the eager agent run that filing started wrote its own events too)
    rows = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", "decision"))
    seqs = [seq for seq, _ in rows]
    assert seqs == list(range(1, len(seqs) + 1))
    decisions = [decision for _, decision in rows]
    assert sorted(d for d in decisions if d.startswith("s")) == sorted(f"s{n}-{i}" for n in range(4) for i in range(10))
    assert sorted(d for d in decisions if d.startswith("b")) == sorted(f"b{i}-{j}" for i in range(10) for j in range(4))
    # and the four events written together took four consecutive numbers, in their order
    for i in range(10):
        together_seqs = [seq for seq, decision in rows if decision.startswith(f"b{i}-")]
        assert together_seqs == list(range(together_seqs[0], together_seqs[0] + 4))


class _SlowScript(ScriptedProvider):
    """The four calls of a ticket, each model turn taking a moment: other writers get in between."""

    def complete(self, **kwargs):
        time.sleep(0.01)
        return super().complete(**kwargs)


@pytest.mark.django_db(transaction=True)
def test_writers_racing_a_running_agent_on_its_ticket_lose_no_event_and_take_no_seq_twice(user):
    # given a ticket whose agent runs (its events numbered under its run's row), and writers of
    # the ticket's trace (people, approval events) racing it
    from approvals.models import RefundPolicy
    from ledger.models import Order

    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5001")
    ticket = Ticket.objects.create(  # queued, its run not started (filing would start it at once)
        tenant=order.tenant,
        order=order,
        customer=order.customer,
        message="Broken.",
        currency=order.currency,
        created_by=user("acme-support"),
    )
    trace_record(ticket=ticket, span="run", status="queued", decision="filed", sensitive=[])
    version = RefundPolicy.objects.current_for(ticket.tenant).version
    script = _SlowScript(
        [
            {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}},
            {"tool": "payments_get_summary", "input": {"order_id": "ORD-5001"}},
            {"tool": "refund_policy_retrieve", "input": {}},
            {
                "tool": "refunds_create_draft",
                "input": {
                    "recommendation": "refund",
                    "amount": "120.00",
                    "policy_version": version,
                    "rationale": "Broken on arrival.",
                    "customer_reply": "Finance will look at it.",
                },
            },
        ]
    )
    start = threading.Barrier(4)
    errors = []

    def agent():
        try:
            start.wait()
            agent_run_ticket(ticket_id=ticket.pk, provider=script)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    def writer(n):
        try:
            start.wait()
            for i in range(15):
                trace_record(ticket=ticket, span="approval", decision=f"w{n}-{i}", sensitive=[])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=agent)] + [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    # then the agent finished its work, every event is there, and the numbers are 1..n, each once
    assert errors == []
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.APPROVAL_REQUIRED
    rows = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", "span", "decision"))
    assert [seq for seq, _, _ in rows] == list(range(1, len(rows) + 1))
    written = sorted(decision for _, span, decision in rows if span == "approval" and decision.startswith("w"))
    assert written == sorted(f"w{n}-{i}" for n in range(3) for i in range(15))
    agent_spans = [span for _, span, decision in rows if not decision.startswith("w")]
    assert agent_spans == [
        "run",
        "run",
        "model",
        "tool",
        "model",
        "tool",
        "model",
        "tool",
        "model",
        "draft",
        "policy",
        "approval",
        "stop",
    ]


def test_a_nested_block_that_raises_drops_its_own_events_and_keeps_the_outer_ones(ticket):
    # given an outer transaction with an event, and a nested block (a decision) that fails
    with transaction.atomic():
        trace_record(ticket=ticket, span="model", decision="kept", sensitive=[])
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            trace_record(ticket=ticket, span="draft", decision="rolled-back", sensitive=[])
            raise ZeroDivisionError("the decision failed")
        trace_record(ticket=ticket, span="stop", decision="after", sensitive=[])

    # then the outer events are written in order, the nested block's are not
    decisions = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("decision", flat=True))
    assert decisions == ["filed", "kept", "after"]


def test_filing_writes_the_ticket_and_its_first_event_together(user, django_capture_on_commit_callbacks):
    support = user("acme-support")
    statements, capturing = _statements()
    with django_capture_on_commit_callbacks(execute=False), capturing:
        ticket = ticket_create(user=support, order="ORD-5001", customer="CUST-1001", message="refund please")
    # (the filer's role and tenant, the order with its customer are read, then) the ticket and its
    # event are inserted between one savepoint and its release: they commit together; a new
    # ticket's row needs no lock for its first number
    writes = [s.split()[0] + " " + s.split()[2] if s.startswith("INSERT") else s.split()[0] for s in statements]
    assert writes[-4:] == [
        "SAVEPOINT",
        'INSERT "refundagent_ticket"',
        'INSERT "refundagent_traceevent"',
        "RELEASE",
    ], statements
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


def test_filing_inside_a_nested_block_that_raises_keeps_the_outer_events(ticket, user):
    # given an outer transaction with an event of one ticket, and a nested block that files another then fails
    with transaction.atomic():
        trace_record(ticket=ticket, span="model", decision="kept", sensitive=[])
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            filed = ticket_create(user=user("acme-support"), order="ORD-5003", customer="CUST-1001", message="x")
            trace_record(ticket=ticket, span="draft", decision="rolled-back", sensitive=[])
            raise ZeroDivisionError("the block failed")
        trace_record(ticket=ticket, span="stop", decision="after", sensitive=[])

    # then the outer events are written in order, the block's are not, and the filing rolled back
    decisions = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("decision", flat=True))
    assert decisions == ["filed", "kept", "after"]
    assert not Ticket.objects.filter(pk=filed.pk).exists()
