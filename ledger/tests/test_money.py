"""Currency minor units with the real ISO 4217 exponent; amounts a currency cannot hold are refused."""

from decimal import Decimal

import pytest

from ledger.exceptions import InvalidInput
from ledger.money import currency_exponent, from_minor_units, to_minor_units
from ledger.services import ledger_refund_issue


@pytest.mark.parametrize(
    ("amount", "currency", "minor"),
    [
        ("12.34", "USD", 1234),
        ("500", "JPY", 500),
        ("1000", "KRW", 1000),
        ("12.345", "BHD", 12345),
        ("1.5", "KWD", 1500),
        ("0.01", "EUR", 1),
        ("120.00", "usd", 12000),
    ],
)
def test_amounts_become_the_providers_minor_units(amount, currency, minor):
    assert to_minor_units(Decimal(amount), currency) == minor
    assert from_minor_units(minor, currency) == Decimal(amount)


@pytest.mark.parametrize(
    ("amount", "currency"), [("0.50", "JPY"), ("10.1", "KRW"), ("1.001", "USD"), ("1.0001", "BHD")]
)
def test_an_amount_the_currency_cannot_represent_is_refused(amount, currency):
    with pytest.raises(InvalidInput) as exc:
        to_minor_units(Decimal(amount), currency)
    assert exc.value.code == "amount_not_representable"


def test_exponents_follow_iso_4217():
    assert [currency_exponent(c) for c in ("USD", "JPY", "BHD", "TND", "OMR", "JOD", "KWD", "CHF")] == [
        2,
        0,
        3,
        3,
        3,
        3,
        3,
        2,
    ]


def test_the_ledger_refuses_half_a_yen(make_order):
    # given a JPY order
    order = make_order("1000", currency="JPY")
    # when half a yen is refunded
    with pytest.raises(InvalidInput) as exc:
        ledger_refund_issue(order=order, amount="0.50", currency="JPY", idempotency_key="k-jpy")
    # then the ledger refuses it and writes nothing
    assert exc.value.code == "amount_not_representable"
    assert not order.refund_entries.exists()
    # and a whole number of yen is fine
    assert ledger_refund_issue(order=order, amount="500", currency="JPY", idempotency_key="k-jpy2").amount == Decimal(
        "500"
    )
