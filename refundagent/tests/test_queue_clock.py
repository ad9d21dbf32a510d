"""The escalation queue counts from when a ticket began waiting for a person
(`Ticket.awaiting_person_since`, kept by ticket_transition), not from when it was filed: a
ticket filed long ago and escalated just now is young in the queue and waits behind one
escalated earlier, in the support app's queue and in the admin's. Every test builds its own shop."""

import importlib
from datetime import timedelta

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from refundagent.models import Ticket, TraceEvent
from refundagent.selectors import ticket_queue
from refundagent.services import ticket_escalate
from refundagent.ticket_state import ticket_transition

pytestmark = pytest.mark.django_db


@pytest.fixture
def make_ticket(people, customer, make_order):
    """make_ticket(status, filed_days_ago) -> a ticket of its own order, filed that long ago."""

    def make(status=Ticket.Status.APPROVAL_REQUIRED, filed_days_ago=0):
        order = make_order("120.00")
        ticket = Ticket.objects.create(
            tenant=order.tenant,
            order=order,
            customer=customer,
            message="Help.",
            currency="USD",
            created_by=people["support"],
            status=status,
        )
        Ticket.objects.filter(pk=ticket.pk).update(created_at=timezone.now() - timedelta(days=filed_days_ago))
        ticket.refresh_from_db()
        return ticket

    return make


def waiting_since(ticket):
    return Ticket.objects.values_list("awaiting_person_since", flat=True).get(pk=ticket.pk)


def test_entering_the_queue_starts_the_clock_moving_within_keeps_it_and_leaving_clears_it(make_ticket):
    # given a ticket the agent is running on
    ticket = make_ticket(Ticket.Status.RUNNING, filed_days_ago=10)
    assert ticket.awaiting_person_since is None
    # when the run fails
    before = timezone.now()
    assert ticket_transition(ticket=ticket, to=Ticket.Status.FAILED, detail="The model provider failed.")
    # then the clock starts now (not at the filing 10 days ago), on the row and on the instance
    failed_at = waiting_since(ticket)
    assert failed_at >= before and ticket.awaiting_person_since == failed_at
    # when a person escalates the failed ticket (a move within the queue), on a stale instance too
    stale = Ticket.objects.get(pk=ticket.pk)
    Ticket.objects.filter(pk=ticket.pk).update(updated_at=timezone.now())
    stale.status = Ticket.Status.QUEUED  # what this reader believes; the row says failed
    assert ticket_transition(ticket=stale, to=Ticket.Status.ESCALATED, detail="Looking into it.")
    # then it has waited since it failed
    assert waiting_since(ticket) == failed_at and stale.awaiting_person_since == failed_at
    # when it leaves the queue (the agent runs again), the clock is cleared
    assert ticket_transition(ticket=stale, to=Ticket.Status.QUEUED)
    assert waiting_since(ticket) is None and stale.awaiting_person_since is None
    # and a refused move leaves it as it was
    assert not ticket_transition(ticket=stale, to=Ticket.Status.REFUNDED)
    assert waiting_since(ticket) is None


def test_a_ticket_filed_long_ago_but_escalated_now_is_young_and_waits_behind_one_escalated_earlier(
    people, make_ticket, client
):
    # given a ticket filed a day ago and escalated two hours ago
    earlier = make_ticket(filed_days_ago=1)
    ticket_escalate(ticket=earlier, user=people["support"], note="Out of policy.")
    two_hours_ago = timezone.now() - timedelta(hours=2)
    Ticket.objects.filter(pk=earlier.pk).update(awaiting_person_since=two_hours_ago, updated_at=two_hours_ago)
    # and a ticket filed 30 days ago that is escalated just now
    old = make_ticket(filed_days_ago=30)
    ticket_escalate(ticket=old, user=people["support"], note="Finance wants a person.")
    # then the queue (the selector) puts the one escalated earlier first
    assert list(ticket_queue(tenant=old.tenant).values_list("pk", flat=True)) == [earlier.pk, old.pk]

    # when support opens the queue page
    client.force_login(people["support"])
    html = client.get(reverse("ticket_queue")).content.decode()
    # then the same order, the old ticket's age is minutes (not 30 days), the other's two hours
    assert html.index(f'data-ticket="{earlier.pk}"') < html.index(f'data-ticket="{old.pk}"')
    row = html[html.index(f'data-ticket="{old.pk}"') :].split("</tr>")[0]
    assert "0\xa0minutes" in row and "days" not in row.split('class="age"')[1]
    first = html[html.index(f'data-ticket="{earlier.pk}"') :].split("</tr>")[0]
    assert "2\xa0hours" in first.split('class="age"')[1]

    # when finance opens the admin's escalation queue
    client.force_login(people["finance"])
    admin_html = client.get(reverse("admin:refundagent_escalatedticket_changelist")).content.decode()
    # then the same order and ages there
    assert admin_html.index(f'value="{earlier.pk}"') < admin_html.index(f'value="{old.pk}"')
    old_row = admin_html[admin_html.index(f'value="{old.pk}"') :].split("</tr>")[0]
    assert "0\xa0minutes" in old_row and "30\xa0days" not in old_row


def test_the_admins_queue_sorts_by_the_clock_in_both_directions(people, make_ticket, client):
    # given two escalated tickets, the older-filed one (and the lower id) escalated later
    late = make_ticket(filed_days_ago=9)
    early = make_ticket(filed_days_ago=1)
    for ticket, hours in ((early, 5), (late, 1)):
        ticket_escalate(ticket=ticket, user=people["support"])
        Ticket.objects.filter(pk=ticket.pk).update(awaiting_person_since=timezone.now() - timedelta(hours=hours))
    client.force_login(people["finance"])
    url = reverse("admin:refundagent_escalatedticket_changelist")
    # when the "waiting" column (after the checkbox, id, order and reason) is sorted descending
    newest_first = client.get(url, {"o": "-4"}).content.decode()
    # then the later escalation comes first; by default the longest waiting comes first
    assert newest_first.index(f'value="{late.pk}"') < newest_first.index(f'value="{early.pk}"')
    default = client.get(url).content.decode()
    assert default.index(f'value="{early.pk}"') < default.index(f'value="{late.pk}"')


def test_the_migration_backfills_the_clock_from_the_trace(people, make_ticket):
    # given tickets in the queue from before the clock existed: one escalated (its escalation event, then a take),
    # one failed without any event, and one that is not in the queue
    escalated, failed, waiting = (
        make_ticket(Ticket.Status.ESCALATED, 5),
        make_ticket(Ticket.Status.FAILED, 4),
        make_ticket(Ticket.Status.APPROVAL_REQUIRED),
    )
    escalated_at, taken_at = timezone.now() - timedelta(days=3), timezone.now() - timedelta(days=2)
    for seq, (decision, at) in enumerate((("escalate", escalated_at), ("take", taken_at)), start=1):
        event = TraceEvent.objects.create(
            ticket=escalated, trace_id=escalated.trace_id, seq=seq, span="stop", decision=decision
        )
        TraceEvent.objects.filter(pk=event.pk).update(at=at)
    failed_updated = timezone.now() - timedelta(days=1)
    Ticket.objects.filter(pk=failed.pk).update(updated_at=failed_updated)
    # when the migration's backfill runs
    migration = importlib.import_module("refundagent.migrations.0007_ticket_awaiting_person_since")
    migration.backfill(apps, None)
    # then the escalated ticket waits since its escalation (not the take), the failed one since its last move,
    # and the other has no clock
    assert waiting_since(escalated) == escalated_at
    assert waiting_since(failed) == failed_updated
    assert waiting_since(waiting) is None


def test_the_queue_is_read_in_order_from_its_index(tenant):
    # given the queue's query, as the support app pages it, with a reason filter too
    for queryset in (ticket_queue(tenant=tenant)[:20], ticket_queue(tenant=tenant, reason=Ticket.Status.FAILED)[:20]):
        sql, params = queryset.query.sql_with_params()
        # when PostgreSQL plans it, with sequential scans discouraged (the test table is tiny)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        # then it reads ticket_queue_idx in the queue's order: no sort
        assert "ticket_queue_idx" in plan and "Sort" not in plan, plan
