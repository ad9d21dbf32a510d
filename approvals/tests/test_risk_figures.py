"""The risk figures' read: one query whose subqueries are built once per process, so every call
must still read the ledger of the moment, its own customer, currency, window and method."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from approvals.risk import risk_check
from ledger.models import Customer, PaymentMethod
from ledger.services import ledger_refund_issue
from tests.factories import policy_publish

pytestmark = pytest.mark.django_db

RULES = {"window_days": 30, "max_refunds_per_customer": 5, "unpaid_destination_kinds": ["card", "gift_card"]}


@pytest.fixture
def risky_policy(tenant):
    return policy_publish(tenant=tenant, now=timezone.now(), risk_rules=RULES)


def figures(order, policy, *, method=None, now=None) -> dict:
    check = risk_check(
        order=order,
        policy=policy,
        amount=Decimal("1.00"),
        method=method,
        open_tickets_on_order=1,
        now=now or timezone.now(),
    )
    return check.figures


def test_each_read_sees_the_ledger_and_the_arguments_of_its_own_call(tenant, customer, card, risky_policy, make_order):
    # given two orders of the customer, one read once already (the subqueries are now built)
    order, other = make_order("100.00"), make_order("50.00")
    assert figures(order, risky_policy)["customer_refunds_in_window"] == 0

    # when a refund is written on the other order, and another customer refunds too
    ledger_refund_issue(order=other, amount="30.00", currency="USD", idempotency_key="figures-1")
    stranger = Customer.objects.create(tenant=tenant, external_id="CUST-2", name="Other", email="o@example.com")
    foreign = make_order("40.00")
    foreign.customer = stranger
    foreign.save(update_fields=["customer"])
    ledger_refund_issue(order=foreign, amount="40.00", currency="USD", idempotency_key="figures-2")

    # then the next read, in one query, counts the customer's refund on any of their orders and no one else's
    with CaptureQueriesContext(connection) as queries:
        now_figures = figures(order, risky_policy)
    assert len(queries) == 1
    assert (now_figures["customer_refunds_in_window"], now_figures["customer_refunded_in_window"]) == (1, "30.00")

    # and a read whose window starts after the refund (a month on) counts nothing
    later = timezone.now() + timedelta(days=31)
    assert figures(order, risky_policy, now=later)["customer_refunds_in_window"] == 0


def test_the_destination_is_the_one_of_each_call(customer, card, risky_policy, make_order):
    # given an order paid with the card, and a gift card the customer never paid with
    order = make_order("100.00")
    gift = PaymentMethod.objects.create(customer=customer, external_id="gift_9", kind=PaymentMethod.Kind.GIFT_CARD)

    # then each call reads whether its own method paid: the card did, the gift card did not, none is not asked
    assert figures(order, risky_policy, method=card)["destination_paid_with"] is True
    assert figures(order, risky_policy, method=gift)["destination_paid_with"] is False
    assert figures(order, risky_policy)["destination_paid_with"] is None
    assert risk_check(
        order=order,
        policy=risky_policy,
        amount=Decimal("1.00"),
        method=gift,
        open_tickets_on_order=1,
        now=timezone.now(),
    ).codes == ["risk_unpaid_destination"]
