"""The operator dashboard's escalated panel counts the wait from when a ticket was escalated
(the queue's clock, `Ticket.awaiting_person_since`), not from when it was filed."""

from datetime import timedelta

import pytest
from django.utils import timezone

from evals.operations import operations_overview
from refundagent.models import Ticket
from refundagent.services import ticket_escalate

pytestmark = pytest.mark.django_db


def test_a_ticket_filed_long_ago_and_escalated_now_has_waited_minutes(make_user, customer, make_order, policy):
    # given a ticket filed 30 days ago that a person escalates just now
    support = make_user("support", "support")
    order = make_order("120.00")
    ticket = Ticket.objects.create(
        tenant=order.tenant, order=order, customer=customer, message="x", currency="USD", created_by=support
    )
    Ticket.objects.filter(pk=ticket.pk).update(created_at=timezone.now() - timedelta(days=30))
    ticket_escalate(ticket=ticket, user=support, note="A person decides.")
    # when the operator's dashboard is computed
    escalated = operations_overview(tenant=order.tenant)["escalated"]
    # then one escalated ticket, waiting for under a minute
    assert escalated.count == 1
    assert escalated.age < timedelta(minutes=1)
    assert escalated.oldest == Ticket.objects.get(pk=ticket.pk).awaiting_person_since
