"""Money: the one strict money type of every input, and currency arithmetic.

Input: the API's schemas (`MoneyIn`) and every form and admin form (`MoneyFormField`) take an
amount as ASCII digits with an optional single dot and at most the column's decimal places (2),
below 10^10 (the column is max_digits=12, decimal_places=2). Nothing else is money: exponents
("1e3"), underscores ("1_0"), other scripts' digits ("１２０", "٣"), signs, spaces, NaN/Infinity,
JSON numbers and booleans. `Decimal()` and `int()` accept most of those, which is why neither is
called on raw input here before the pattern matched.

Currencies: ISO 4217 exponents and the provider's integer minor units. A payment provider wants
an integer in the currency's minor unit (cents for USD, yen for JPY, fils for BHD); an amount the
currency cannot represent (JPY 0.50) is refused, never rounded (`amount_check_representable`,
and `money_check_currency` for input where the currency is known; `amount_is_representable` for
the policy gate, which escalates such an amount rather than refusing it).
"""

import re
from decimal import Decimal
from typing import Annotated, Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from pydantic import PlainValidator, WithJsonSchema

from .exceptions import InvalidInput

MAX_DIGITS = 12
DECIMAL_PLACES = 2

# ISO 4217 currencies whose minor unit is not 1/100. Everything else has two places.
ZERO_DECIMAL = frozenset(
    {
        "BIF",
        "CLP",
        "DJF",
        "GNF",
        "ISK",
        "JPY",
        "KMF",
        "KRW",
        "PYG",
        "RWF",
        "UGX",
        "UYI",
        "VND",
        "VUV",
        "XAF",
        "XOF",
        "XPF",
    }
)
THREE_DECIMAL = frozenset({"BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"})


def currency_exponent(currency: str) -> int:
    """How many decimal places the currency's minor unit has (ISO 4217)."""
    code = (currency or "").upper()
    if code in ZERO_DECIMAL:
        return 0
    if code in THREE_DECIMAL:
        return 3
    return 2


def amount_is_representable(amount: Decimal, currency: str) -> bool:
    """Has the amount no more decimal places than the currency's minor unit (JPY "120" yes, "120.50" no)?"""
    places = currency_exponent(currency)
    return amount == amount.quantize(Decimal(1).scaleb(-places))


def amount_check_representable(amount: Decimal, currency: str) -> Decimal:
    """Refuse an amount with more places than the currency has (JPY "0.50"); returns it unchanged."""
    places = currency_exponent(currency)
    if not amount_is_representable(amount, currency):
        raise InvalidInput(
            f"{amount} {currency} is not representable: {currency} has {places} decimal place(s).",
            code="amount_not_representable",
            details={"currency": currency, "decimal_places": places},
        )
    return amount


def to_minor_units(amount: Decimal, currency: str) -> int:
    """Decimal("12.34") USD -> 1234; Decimal("500") JPY -> 500; Decimal("1.5") BHD -> 1500."""
    if not isinstance(amount, Decimal):
        raise InvalidInput("Amounts must be Decimal.", code="bad_amount")
    amount_check_representable(amount, currency)
    return int(amount.scaleb(currency_exponent(currency)))


def from_minor_units(value: int, currency: str) -> Decimal:
    """1234 USD -> Decimal("12.34"); 500 JPY -> Decimal("500"); 1500 BHD -> Decimal("1.500")."""
    places = currency_exponent(currency)
    return Decimal(int(value)).scaleb(-places).quantize(Decimal(1).scaleb(-places))


def money_pattern(max_digits: int = MAX_DIGITS, decimal_places: int = DECIMAL_PLACES) -> str:
    whole = max_digits - decimal_places
    fraction = rf"(\.[0-9]{{1,{decimal_places}}})?" if decimal_places else ""
    return rf"^[0-9]{{1,{whole}}}{fraction}$"


MONEY_PATTERN = money_pattern()
# re.ASCII is belt and braces: [0-9] is already ASCII-only, and `$` must not accept a trailing newline.
_MONEY_RE = re.compile(MONEY_PATTERN.removesuffix("$") + r"\Z", re.ASCII)


def money_parse(value: Any, *, pattern: re.Pattern = _MONEY_RE) -> Decimal:
    """A strict amount string to a Decimal; anything else raises ValueError (says why)."""
    if not isinstance(value, str):
        # bool is an int in Python; JSON numbers are refused too: money travels as a string.
        raise ValueError('an amount must be a string of ASCII digits, e.g. "120.00"')
    if not pattern.match(value):
        raise ValueError(
            f"an amount is ASCII digits with an optional dot and at most {DECIMAL_PLACES} decimal places, "
            f'below 10^{MAX_DIGITS - DECIMAL_PLACES}, e.g. "120.00"'
        )
    return Decimal(value)


def money_check_currency(*, amount: Decimal, currency: str, field: str) -> None:
    """Refuse an amount with more decimal places than its currency has (422 naming the field)."""
    places = min(currency_exponent(currency), DECIMAL_PLACES)
    if amount != amount.quantize(Decimal(1).scaleb(-places)):
        raise InvalidInput(
            f"{field}: {currency} amounts have at most {places} decimal places, got {amount}.",
            code="amount_precision",
            details={"field": field},
        )


MONEY_JSON_SCHEMA = {
    "type": "string",
    "pattern": MONEY_PATTERN,
    "examples": ["120.00"],
    "description": "An amount: ASCII digits, an optional dot, at most two decimal places.",
}

# For ninja/pydantic input schemas. A PlainValidator replaces pydantic's own Decimal parsing,
# which would take 1e3, floats and other scripts' digits.
MoneyIn = Annotated[Decimal, PlainValidator(money_parse), WithJsonSchema(MONEY_JSON_SCHEMA)]


# A number in the strict syntax except for a sign, too many places or too many digits: only to
# say which of those it is.
PLAIN_NUMBER = re.compile(r"([-+]?)([0-9]+)(?:\.([0-9]+))?\Z", re.ASCII)


class MoneyFormField(forms.DecimalField):
    """A forms.DecimalField that takes only the strict amount syntax (Django's own accepts
    exponents and any Unicode digit). Admin forms get it through `StrictMoneyAdminMixin`."""

    widget = forms.TextInput  # a number input would let the browser send "1e3"
    # "invalid" stays Django's "Enter a number."; the others say what is wrong with a number.
    default_error_messages = {
        "negative": "The amount must be positive.",
        "max_decimal_places": "Ensure that there are no more than %(max)s decimal places.",
        "max_whole_digits": "Ensure that there are no more than %(max)s digits before the decimal point.",
    }

    def __init__(self, *, max_digits=MAX_DIGITS, decimal_places=DECIMAL_PLACES, **kwargs):
        super().__init__(max_digits=max_digits, decimal_places=decimal_places, **kwargs)
        self._pattern = re.compile(money_pattern(max_digits, decimal_places).removesuffix("$") + r"\Z", re.ASCII)
        self.widget.attrs.setdefault("pattern", money_pattern(max_digits, decimal_places).strip("^$"))

    def to_python(self, value):
        if value in self.empty_values:
            return None
        value = str(value).strip()
        if self._pattern.match(value):
            return Decimal(value)
        number = PLAIN_NUMBER.match(value)
        if number is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        sign, whole, fraction = number.groups()
        if sign == "-":
            raise ValidationError(self.error_messages["negative"], code="negative")
        if sign:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        if len(fraction or "") > self.decimal_places:
            raise ValidationError(
                self.error_messages["max_decimal_places"],
                code="max_decimal_places",
                params={"max": self.decimal_places},
            )
        raise ValidationError(
            self.error_messages["max_whole_digits"],
            code="max_whole_digits",
            params={"max": self.max_digits - self.decimal_places},
        )

    def widget_attrs(self, widget):
        attrs = super().widget_attrs(widget)
        attrs.pop("step", None)
        attrs.setdefault("inputmode", "decimal")
        return attrs


class StrictMoneyAdminMixin:
    """Every DecimalField of an admin form parsed by MoneyFormField (with the column's digits)."""

    formfield_overrides = {models.DecimalField: {"form_class": MoneyFormField}}
