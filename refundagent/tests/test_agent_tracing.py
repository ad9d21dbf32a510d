"""trace_record: the ticket's row lock (and its open run's) and one INSERT per event, seq in
order, safe inside a caller's transaction and under concurrent writers."""

import threading

import pytest
from django.db import connection, transaction

from refundagent.models import TraceEvent
from refundagent.services import ticket_create
from refundagent.tracing import trace_record


def _ticket():
    from django.contrib.auth import get_user_model

    from refundagent.demo import demo_seed

    demo_seed()
    user = get_user_model().objects.get(username="acme-support")
    return ticket_create(user=user, order="ORD-5001", customer="CUST-1001", message="x")


@pytest.mark.django_db
def test_events_get_the_next_seq_and_are_stored_redacted(django_assert_num_queries):
    ticket = _ticket()

    with transaction.atomic(), django_assert_num_queries(3):  # the ticket's and its open run's rows, the INSERT
        trace_record(ticket=ticket, span="tool", reason="jane.doe@example.com", sensitive=[])
    trace_record(ticket=ticket, span="stop", data={"n": None}, duration_ms=None, sensitive=[])

    event, second = TraceEvent.objects.filter(ticket=ticket).exclude(span="run").order_by("seq")
    assert (event.seq, second.seq) == (2, 3)  # 1 is the filing event
    assert event.span == "tool" and event.reason == "[email]" and event.trace_id == ticket.trace_id
    assert second.span == "stop" and second.data == {"n": None} and second.duration_ms is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_never_share_a_seq():
    ticket = _ticket()
    errors = []

    def write():
        try:
            for _ in range(15):
                trace_record(ticket=ticket, span="eval", sensitive=[])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    seqs = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert TraceEvent.objects.filter(ticket=ticket, span="eval").count() == 60
