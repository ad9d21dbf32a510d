"""What each payment of an order can still return: one query, built once per process, the same
answer as summing the refunds per destination in a read of their own, and always the database's
answer of the moment."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Exists, OuterRef, Sum
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from ledger.models import Dispute, Order, Payment, PaymentMethod, RefundEntry
from ledger.money import CENT, ZERO
from ledger.selectors import order_payments_returnable, refund_entries_with_effective_amount
from ledger.services import ledger_refund_correct, ledger_refund_issue

pytestmark = pytest.mark.django_db


def _returnable_in_two_reads(order: Order) -> list[tuple]:
    """The rule as it was written before it became one query: the payments, then the counting
    refunds summed per destination; a refund to no method is the first payment's."""
    open_disputes = Dispute.objects.filter(payment=OuterRef("pk")).exclude(status__in=Dispute.SETTLED_FOR_THE_SHOP)
    payments = list(order.payments.annotate(disputed=Exists(open_disputes)).order_by("id"))
    returned = {}
    for row in (
        refund_entries_with_effective_amount(RefundEntry.objects.filter(order=order).counting())
        .values("destination_id")
        .annotate(total=Sum("effective_amount"))
    ):
        returned[row["destination_id"]] = row["total"] or ZERO
    if payments and None in returned and payments[0].payment_method_id is not None:
        returned[payments[0].payment_method_id] = returned.get(payments[0].payment_method_id, ZERO) + returned[None]
    legs = []
    for payment in payments:
        taken = min(returned.get(payment.payment_method_id, ZERO), payment.amount)
        returned[payment.payment_method_id] = returned.get(payment.payment_method_id, ZERO) - taken
        legs.append((payment.pk, payment.payment_method_id, (payment.amount - taken).quantize(CENT), payment.disputed))
    return legs


def _read(order: Order) -> list[tuple]:
    return [(leg.payment_id, leg.method_id, leg.returnable, leg.disputed) for leg in order_payments_returnable(order)]


@pytest.fixture
def tangled_order(tenant, customer, card):
    """250.00 paid four ways: the card twice (50.00, later 40.00), a gift card (30.00), and a payment
    the shop recorded without a method (130.00)."""
    gift = PaymentMethod.objects.create(
        customer=customer, external_id="gift_1", kind=PaymentMethod.Kind.GIFT_CARD, balance=Decimal("0.00")
    )
    order = Order.objects.create(
        tenant=tenant,
        customer=customer,
        external_id="ORD-TANGLED",
        total=Decimal("250.00"),
        currency="USD",
        placed_at=timezone.now() - timedelta(days=2),
    )
    for method, amount in ((card, "50.00"), (gift, "30.00"), (None, "130.00"), (card, "40.00")):
        Payment.objects.create(
            order=order,
            payment_method=method,
            method=method.kind if method else "card",
            payment_ref="" if method is gift else f"pi_tangled_{amount}",
            amount=Decimal(amount),
            currency="USD",
        )
    return order, gift


def test_the_one_query_gives_what_the_two_reads_gave(tenant, customer, tangled_order, card):
    # given refunds to the card beyond its first payment, to no method, to the gift card, to a
    # gift card the order was not paid with, and one of them corrected down
    order, gift = tangled_order
    other_gift = PaymentMethod.objects.create(
        customer=customer, external_id="gift_2", kind=PaymentMethod.Kind.GIFT_CARD, balance=Decimal("0.00")
    )
    assert _read(order) == _returnable_in_two_reads(order)
    to_card = ledger_refund_issue(
        order=order, amount="70.00", currency="USD", idempotency_key="tangled-1", destination=card
    )
    ledger_refund_issue(order=order, amount="15.00", currency="USD", idempotency_key="tangled-2")
    ledger_refund_issue(
        order=order,
        amount="10.00",
        currency="USD",
        idempotency_key="tangled-3",
        destination=gift,
        destination_kind="gift_card",
    )
    ledger_refund_issue(
        order=order,
        amount="5.00",
        currency="USD",
        idempotency_key="tangled-4",
        destination=other_gift,
        destination_kind="gift_card",
    )
    ledger_refund_correct(entry=to_card, new_amount="65.00", reason="Shipping was not refundable.")

    # when the payments are read
    with CaptureQueriesContext(connection) as queries:
        legs = _read(order)

    # then in one query, leg for leg what the two reads give
    assert len(queries) == 1
    assert legs == _returnable_in_two_reads(order)
    # the card's 65.00 and the 15.00 to no method (the first payment's) take its first payment
    # whole and 30.00 of its second; the gift card gave back 10.00; and the payment without a
    # method counts the 15.00 to no method too (as the two reads did: it can only lower what is
    # returnable)
    assert [leg[2] for leg in legs] == [Decimal("0.00"), Decimal("20.00"), Decimal("115.00"), Decimal("10.00")]


def test_a_refund_or_a_dispute_between_two_reads_is_in_the_next(tenant, tangled_order):
    # given the payments read once (the query is now built)
    order, gift = tangled_order
    assert _read(order)[0][2:] == (Decimal("50.00"), False)

    # when a refund to no method is written and a dispute opens on the card's first payment
    ledger_refund_issue(order=order, amount="20.00", currency="USD", idempotency_key="between-1")
    first = order.payments.order_by("id").first()
    Dispute.objects.create(
        tenant=tenant,
        order=order,
        payment=first,
        provider_ref="dp_between",
        status="needs_response",
        amount=first.amount,
        currency="USD",
    )

    # then the next read sees both: only the query was kept, never an answer
    assert _read(order)[0][2:] == (Decimal("30.00"), True)
    assert _read(order) == _returnable_in_two_reads(order)


def test_another_orders_refunds_and_an_order_without_payments(tenant, make_order, tangled_order):
    # given another order of the same card, refunded, and an order with no payment recorded
    order, gift = tangled_order
    other = make_order("100.00")
    ledger_refund_issue(order=other, amount="100.00", currency="USD", idempotency_key="other-1")
    bare = make_order("10.00")
    Payment.objects.filter(order=bare).delete()
    ledger_refund_issue(order=bare, amount="4.00", currency="USD", idempotency_key="bare-1")

    # then each order counts only its own refunds
    assert _read(order) == _returnable_in_two_reads(order)
    assert [leg[2] for leg in _read(order)] == [Decimal("50.00"), Decimal("30.00"), Decimal("130.00"), Decimal("40.00")]
    assert _read(other) == _returnable_in_two_reads(other) == [(_read(other)[0][0], _read(other)[0][1], ZERO, False)]
    assert order_payments_returnable(bare) == []
