"""A refund entry names the payment it gives back (one tender leg): never more than that payment
can still return, checked under the order lock, whatever else the order could still refund."""

from decimal import Decimal

import pytest

from ledger.exceptions import IdempotencyConflict, RefundRefused
from ledger.models import Payment, PaymentMethod, RefundEntry
from ledger.selectors import order_payments_returnable
from ledger.services import ledger_refund_issue

THREADS = 8


@pytest.fixture
def split(make_order, customer, card):
    """An order of 150.00 of which 20.00 was paid by gift card and 100.00 by card (30.00 unrecorded)."""
    gift_card = PaymentMethod.objects.create(customer=customer, external_id="gift_1", kind="gift_card")
    order = make_order("150.00", payment_ref="pi_card")
    card_payment = order.payments.get()
    Payment.objects.filter(pk=card_payment.pk).update(amount=Decimal("100.00"))
    gift_payment = Payment.objects.create(
        order=order, payment_method=gift_card, method="gift_card", amount=Decimal("20.00"), currency="USD"
    )
    card_payment.refresh_from_db()
    return order, gift_card, gift_payment, card_payment


def issue(order, amount, key, method, payment):
    return ledger_refund_issue(
        order=order, amount=amount, currency="USD", idempotency_key=key, destination=method, payment=payment
    )


@pytest.mark.django_db
def test_a_leg_never_returns_more_than_its_payment_though_the_order_could(split, card):
    order, gift_card, gift_payment, card_payment = split
    # the order could still refund 150.00, the card's payment only 100.00
    with pytest.raises(RefundRefused) as refused:
        issue(order, "100.01", "over", card, card_payment)
    assert refused.value.code == "refund_exceeds_payment" and refused.value.details["returnable"] == "100.00"
    entry = issue(order, "100.00", "card-leg", card, card_payment)
    assert entry.payment_id == card_payment.pk
    # a replay with the same payment returns it; the same key naming another payment is a conflict
    assert issue(order, "100.00", "card-leg", card, card_payment).pk == entry.pk
    with pytest.raises(IdempotencyConflict):
        issue(order, "100.00", "card-leg", card, None)
    assert RefundEntry.objects.filter(order=order).count() == 1


@pytest.mark.django_db
def test_a_leg_on_another_orders_payment_or_method_is_refused(split, card, make_order):
    order, gift_card, gift_payment, card_payment = split
    elsewhere = make_order("50.00", external_id="ORD-OTHER").payments.get()
    for method, payment in ((card, elsewhere), (card, gift_payment), (gift_card, card_payment)):
        with pytest.raises(RefundRefused) as refused:
            issue(order, "5.00", f"wrong-{payment.pk}-{method.pk}", method, payment)
        assert refused.value.code == "payment_not_order"
    assert not RefundEntry.objects.filter(order=order).exists()


@pytest.mark.django_db(transaction=True)
def test_concurrent_legs_on_one_payment_never_exceed_it(split, run_concurrently):
    order, gift_card, gift_payment, card_payment = split

    def leg(key):
        return issue(order, "15.00", key, gift_card, gift_payment)

    # when 8 workers each write a 15.00 leg on the 20.00 gift card payment at once
    results = run_concurrently(leg, [(f"race-{n}",) for n in range(THREADS)])

    # then exactly one is written; every other is refused by the payment's cap, not by the order's
    accepted = [r for r in results if isinstance(r, RefundEntry)]
    refused = [r for r in results if isinstance(r, RefundRefused)]
    assert len(accepted) == 1 and len(refused) == THREADS - 1
    assert {r.code for r in refused} == {"refund_exceeds_payment"}
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("15.00")


@pytest.mark.django_db
def test_a_leg_is_counted_against_its_own_payment_when_one_method_paid_twice(make_order, card):
    # given an order of 100.00 paid in two charges of 50.00 with the same card
    order = make_order("100.00", payment_ref="pi_first")
    first = order.payments.get()
    Payment.objects.filter(pk=first.pk).update(amount=Decimal("50.00"))
    second = Payment.objects.create(
        order=order,
        payment_method=card,
        method="card",
        payment_ref="pi_second",
        amount=Decimal("50.00"),
        currency="USD",
    )
    # when a leg of 30.00 refunds the second charge
    issue(order, "30.00", "second-leg", card, second)
    # then the second charge can return 20.00 more and the first all of its 50.00 (counted by the
    # method alone, the 30.00 would have been the first charge's: a later 50.00 leg on the second
    # would then be more than the provider can give back on it)
    returnable = {leg.payment_id: leg.returnable for leg in order_payments_returnable(order)}
    assert returnable == {first.pk: Decimal("50.00"), second.pk: Decimal("20.00")}
    # and the second charge's cap holds under the lock: 20.01 more is refused
    with pytest.raises(RefundRefused) as refused:
        issue(order, "20.01", "second-over", card, second)
    assert refused.value.details["returnable"] == "20.00"
    # and a refund that names no payment (written before legs did) still counts by its method,
    # against the earliest payment made with it
    issue(order, "50.00", "by-method", card, None)
    returnable = {leg.payment_id: leg.returnable for leg in order_payments_returnable(order)}
    assert returnable == {first.pk: Decimal("0.00"), second.pk: Decimal("20.00")}
