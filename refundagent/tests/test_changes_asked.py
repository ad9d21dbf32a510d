"""What finance asked for ("request changes" with a wanted amount) stays on the ticket page and
on the next request's review page, after the agent drafts again."""

from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.services.requests import approval_request_create

pytestmark = pytest.mark.django_db


def approval_request_make(*, order, items, ticket_ref, key, filer):
    policy = policy_current(order.tenant)
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        proposal=Proposal(recommendation="refund", amount=Decimal("50.00"), policy_version=policy.version),
        item_ids=items,
        now=timezone.now(),
    )
    request, _ = approval_request_create(
        order=order, policy=policy, verdict=verdict, idempotency_key=key, requested_by=filer, ticket_ref=ticket_ref
    )
    return request


def test_the_next_review_page_and_the_ticket_show_what_finance_asked_for(demo, user):
    from approvals.services.decisions import approval_request_decide
    from ledger.models import Order
    from refundagent.models import Ticket

    # given a ticket on ORD-5005 whose request finance sent back asking for 20.00
    order = Order.objects.get(tenant__slug="acme", external_id="ORD-5005")
    ticket = Ticket.objects.create(
        tenant=order.tenant,
        order=order,
        customer=order.customer,
        message="Socks",
        created_by=user("acme-support"),
        status=Ticket.Status.APPROVAL_REQUIRED,
    )
    first = approval_request_make(
        order=order, items=["ITEM-6"], ticket_ref=ticket.pk, key="test:socks:1", filer=user("acme-support")
    )
    approval_request_decide(
        request_id=first.pk,
        user=user("acme-finance"),
        decision="request_changes",
        args_hash=first.args_hash,
        note="Only the one pair, less shipping",
        wanted_amount="20.00",
    )
    # and the agent's next draft made a new request for 25.00 again
    second = approval_request_make(
        order=order, items=["ITEM-6"], ticket_ref=ticket.pk, key="test:socks:2", filer=user("acme-support")
    )
    finance = Client()
    finance.force_login(user("acme-finance"))
    # when finance opens the new request, and support the ticket
    review = finance.get(f"/admin/approvals/approvalrequest/{second.pk}/change/").content.decode()
    support = Client()
    support.force_login(user("acme-support"))
    page = support.get(f"/tickets/{ticket.pk}/").content.decode()
    # then both say what finance asked for on which request, and that this one differs
    for html in (review, page):
        assert f"request #{first.pk}" in html
        assert "wanted 20.00 USD" in html
        assert "Only the one pair, less shipping" in html
    assert "not the 20.00 USD finance asked for" in review
