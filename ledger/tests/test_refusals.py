"""What `ledger_refund_issue` refuses, and that a refusal writes nothing."""

from decimal import Decimal

import pytest

from ledger.exceptions import InvalidInput, RefundRefused
from ledger.models import PaymentMethod, RefundEntry
from ledger.services import ledger_refund_issue


@pytest.mark.parametrize(
    "amount, currency, code",
    [
        ("0.00", "USD", "refund_not_positive"),
        ("-5.00", "USD", "bad_amount"),  # not an amount: refused before the ledger looks
        ("10.00", "EUR", "currency_mismatch"),
        ("100.01", "USD", "refund_exceeds_refundable"),
        (10.0, "USD", "float_amount"),
        ("1.005", "USD", "bad_amount"),
        ("ten", "USD", "bad_amount"),
        ("NaN", "USD", "bad_amount"),
        # Text Python's Decimal reads as a number, which an amount is not.
        ("１２０", "USD", "bad_amount"),
        ("1e1", "USD", "bad_amount"),
        ("1_0.00", "USD", "bad_amount"),
        ("10.00\x00", "USD", "bad_amount"),
    ],
)
def test_a_refused_refund_writes_nothing(make_order, amount, currency, code):
    order = make_order("100.00")

    with pytest.raises(InvalidInput) as refused:
        ledger_refund_issue(order=order, amount=amount, currency=currency, idempotency_key="k")

    assert refused.value.code == code
    assert refused.value.status_code == 422
    assert not RefundEntry.objects.exists()


def test_above_what_is_left_after_earlier_refunds(make_order):
    order = make_order("100.00")
    ledger_refund_issue(order=order, amount="70.00", currency="USD", idempotency_key="k1")

    with pytest.raises(RefundRefused) as refused:
        ledger_refund_issue(order=order, amount="30.01", currency="USD", idempotency_key="k2")

    assert refused.value.details == {"refundable": "30.00"}
    assert ledger_refund_issue(order=order, amount="30.00", currency="USD", idempotency_key="k3").amount == Decimal(
        "30.00"
    )


def test_a_refund_to_another_customers_payment_method_is_refused(make_order, tenant):
    order = make_order("100.00")
    stranger = order.customer.__class__.objects.create(tenant=tenant, external_id="CUST-2")
    their_card = PaymentMethod.objects.create(customer=stranger, external_id="card_9", kind="card", last4="0000")

    with pytest.raises(RefundRefused) as refused:
        ledger_refund_issue(order=order, amount="1.00", currency="USD", idempotency_key="k", destination=their_card)

    assert refused.value.code == "foreign_destination"
    assert not RefundEntry.objects.exists()


def test_a_refund_without_an_idempotency_key_is_refused(make_order):
    with pytest.raises(InvalidInput):
        ledger_refund_issue(order=make_order("100.00"), amount="1.00", currency="USD", idempotency_key="")
    assert not RefundEntry.objects.exists()
