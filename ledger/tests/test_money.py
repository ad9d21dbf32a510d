"""The one money parser, and currency minor units with the real ISO 4217 exponent: what is not
an amount, or is finer than its currency, is refused, never rounded."""

from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError

from ledger.exceptions import InvalidAmount, InvalidInput
from ledger.money import (
    MoneyFormField,
    currency_exponent,
    from_minor_units,
    money_check_currency,
    money_parse,
    to_minor_units,
)
from ledger.services import ledger_refund_issue

# Shapes Python (Decimal(), float(), int()) reads as a number, and what the parser says of each.
NOT_MONEY = [
    ("1e2", "bad_amount", "syntax"),
    ("１２０", "bad_amount", "syntax"),  # fullwidth digits
    ("٣", "bad_amount", "syntax"),  # Arabic-Indic three
    ("1_000", "bad_amount", "syntax"),
    (True, "bad_amount", "type"),
    (False, "bad_amount", "type"),
    (1.5, "float_amount", "float"),
    (float("nan"), "float_amount", "float"),
    ("NaN", "bad_amount", "syntax"),
    ("Infinity", "bad_amount", "syntax"),
    ("-Infinity", "bad_amount", "syntax"),
    (Decimal("NaN"), "bad_amount", "syntax"),
    (Decimal("Infinity"), "bad_amount", "syntax"),
    (" 12 ", "bad_amount", "syntax"),
    ("12\n", "bad_amount", "syntax"),
    ("-0", "bad_amount", "syntax"),
    ("+5", "bad_amount", "syntax"),
    ("-5.00", "bad_amount", "negative"),
    (-5, "bad_amount", "negative"),
    (Decimal("-0.01"), "bad_amount", "negative"),
    (Decimal("-0"), "bad_amount", "syntax"),
    ("0.004", "bad_amount", "places"),
    ("120.000", "bad_amount", "places"),
    (Decimal("0.004"), "bad_amount", "places"),
    ("10000000000", "bad_amount", "too_large"),  # 10^10: above the column (max_digits 12, 2 places)
    ("10000000000.00", "bad_amount", "too_large"),
    (10**10, "bad_amount", "too_large"),
    (Decimal("1e30"), "bad_amount", "too_large"),
    ("12.", "bad_amount", "syntax"),
    (".50", "bad_amount", "syntax"),
    ("", "bad_amount", "syntax"),
    (None, "bad_amount", "type"),
    (["1.00"], "bad_amount", "type"),
]


@pytest.mark.parametrize(("value", "code", "problem"), NOT_MONEY, ids=repr)
def test_what_python_reads_as_a_number_is_not_an_amount(value, code, problem):
    with pytest.raises(InvalidAmount) as refused:
        money_parse(value, field="total")

    assert (refused.value.code, refused.value.details["problem"]) == (code, problem)
    assert refused.value.status_code == 422 and refused.value.message.startswith("total")
    assert isinstance(refused.value, ValueError)  # a pydantic validator reports it as the field's error


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("120", "120.00"),
        ("120.5", "120.50"),
        ("0120.00", "120.00"),
        ("0", "0.00"),
        ("9999999999.99", "9999999999.99"),
        (7, "7.00"),
        (Decimal("1.000"), "1.00"),  # a Decimal is judged by its value
    ],
)
def test_an_amount_comes_back_at_the_columns_two_places(value, parsed):
    amount = money_parse(value)

    assert str(amount) == parsed


@pytest.mark.parametrize(
    ("value", "currency", "accepted"),
    [
        ("1.5", "JPY", False),
        ("120.50", "JPY", False),
        ("120", "JPY", True),
        ("120.00", "JPY", True),  # zero cents are a whole yen
        ("0.05", "USD", True),
        ("1.5", "KRW", False),
        ("1.25", "BHD", True),  # three places in BHD, two in the column
    ],
)
def test_an_amount_finer_than_its_currency_is_refused_never_rounded(value, currency, accepted):
    if accepted:
        assert money_parse(value, currency=currency) == Decimal(value)
        return
    with pytest.raises(InvalidAmount) as refused:
        money_parse(value, currency=currency, field="price")
    assert refused.value.code == "amount_precision"
    assert refused.value.message.startswith(f"price: {currency} amounts have at most 0 decimal places")


def test_one_amount_has_one_text_whatever_its_currency():
    # (the ledger's idempotency hash and the approval's args hash are taken over this text)
    assert str(money_parse("500", currency="JPY")) == str(money_parse(Decimal("500.00"), currency="JPY")) == "500.00"


def test_the_currency_check_returns_the_amount_unchanged():
    assert money_check_currency(amount=Decimal("12.345"), currency="BHD") == Decimal("12.345")
    with pytest.raises(InvalidAmount):
        money_check_currency(amount=Decimal("1e30"), currency="JPY")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e3", "Enter a number."),
        ("１２０", "Enter a number."),
        ("-0", "Enter a number."),
        ("-5", "The amount must be positive."),
        ("12.345", "Ensure that there are no more than 2 decimal places."),
        ("10000000000", "Ensure that there are no more than 10 digits before the decimal point."),
    ],
)
def test_the_form_field_words_each_refusal_of_the_parser(value, message):
    with pytest.raises(ValidationError) as refused:
        MoneyFormField().clean(value)

    assert refused.value.messages == [message]


def test_the_form_field_strips_spaces_as_every_form_field_does():
    assert MoneyFormField().clean(" 12.50 ") == Decimal("12.50")


def test_the_form_field_takes_only_the_money_column():
    with pytest.raises(ImproperlyConfigured):
        MoneyFormField(max_digits=15, decimal_places=3)


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
    assert exc.value.code == "amount_precision"


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
    assert exc.value.code == "amount_precision"
    assert not order.refund_entries.exists()
    # and a whole number of yen is fine
    assert ledger_refund_issue(order=order, amount="500", currency="JPY", idempotency_key="k-jpy2").amount == Decimal(
        "500"
    )
