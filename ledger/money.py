"""Money: what counts as an amount, the currency's places, and the provider's minor units.

One parser, `money_parse`, decides what an amount is for every entry point: the API's schemas
(`MoneyIn`), every form and admin form (`MoneyFormField`), the agent's tool arguments, the order
importer and the services themselves. An amount is ASCII digits with an optional dot and at most
the column's two decimal places, below 10^10 (the column is max_digits=12, decimal_places=2):
"120.00", "120". Nothing else is money: floats (not exact), exponents ("1e3"), underscores
("1_0"), other scripts' digits ("１２０", "٣"), signs ("-0", "+5"), spaces, NaN/Infinity and
booleans. `Decimal()`, `int()` and pydantic's Decimal take most of those, which is why none of
them sees raw input before the grammar here. Python callers may pass an int or a Decimal (a value
already parsed, or read from a column): the same limits apply to its value.

With a currency, an amount finer than the currency ("0.50" yen, "0.004" dollars) is refused,
never rounded: `money_check_currency`, the one currency check. The amount comes back at the
column's scale (two places, as the database returns it), so one amount has one text whether it
was parsed or read back: the ledger's idempotency hash and the approval's args hash are taken over
that text.

A provider wants an integer in the currency's minor unit (cents for USD, yen for JPY, fils for
BHD): `to_minor_units` and `from_minor_units`, with the ISO 4217 exponents.
"""

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from django import forms
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import models
from pydantic import PlainValidator, ValidationInfo, WithJsonSchema

from .exceptions import InvalidAmount, InvalidInput
from .text import text_shown

MAX_DIGITS = 12
DECIMAL_PLACES = 2
WHOLE_DIGITS = MAX_DIGITS - DECIMAL_PLACES
CENT = Decimal("0.01")
ZERO = Decimal("0.00")
MAX_AMOUNT = Decimal(10) ** WHOLE_DIGITS - CENT  # 9999999999.99, the column's largest

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


# The grammar of an amount, as the API's schemas publish it.
MONEY_PATTERN = rf"^[0-9]{{1,{WHOLE_DIGITS}}}(\.[0-9]{{1,{DECIMAL_PLACES}}})?$"
# Wider than an amount (a sign, any number of digits), only to say what is wrong with a number.
# re.ASCII and \Z: [0-9] stays ASCII, and no trailing newline slips past `$`.
_NUMBER = re.compile(r"([-+]?)([0-9]+)(?:\.([0-9]+))?\Z", re.ASCII)


def money_parse(value: Any, *, currency: str | None = None, field: str = "amount") -> Decimal:
    """The one parser: `value` as an amount (see the module's doc) at the column's two places;
    with `currency`, no finer than the currency either. Raises InvalidAmount naming `field`:
    code `float_amount` for a float, `amount_precision` for places the currency lacks,
    `bad_amount` for everything else (`details["problem"]` says which rule)."""
    amount = _amount(value, field)
    if currency is not None:
        money_check_currency(amount=amount, currency=currency, field=field)
    return amount.quantize(CENT)


def money_check_currency(*, amount: Decimal, currency: str, field: str = "amount") -> Decimal:
    """The one currency check: refuse an amount with more places than `currency` has (JPY
    "0.50"), never round it. Returns the amount unchanged."""
    places = currency_exponent(currency)
    try:
        exact = amount == amount.quantize(Decimal(1).scaleb(-places))
    except InvalidOperation:  # more digits than a Decimal holds: no currency pays that
        exact = False
    if not exact:
        raise InvalidAmount(
            f"{field}: {currency} amounts have at most {places} decimal places, got {amount}.",
            code="amount_precision",
            details={"field": field, "problem": "precision", "currency": currency, "decimal_places": places},
        )
    return amount


_SYNTAX = ' (ASCII digits, an optional dot and at most two decimal places, e.g. "120.00")'


def _refused(field: str, problem: str, message: str, code: str = "bad_amount") -> InvalidAmount:
    return InvalidAmount(message, code=code, details={"field": field, "problem": problem})


def _cut(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def _amount(value: Any, field: str) -> Decimal:
    if isinstance(value, float):
        example = f"{value:.2f}" if math.isfinite(value) and 0 <= value <= MAX_AMOUNT else "120.00"
        raise _refused(
            field,
            "float",
            f'{field} must be a decimal string like "{example}", not the number {text_shown(value)}',
            code="float_amount",
        )
    # bool is an int in Python: refused by name, before the int branch could take it.
    if isinstance(value, bool) or not isinstance(value, str | int | Decimal):
        raise _refused(field, "type", f"{field} must be a decimal string, got {text_shown(value)}")
    if isinstance(value, str):
        return _amount_from_text(value, field)
    amount = Decimal(value)
    if not amount.is_finite():
        raise _refused(field, "syntax", f"{field} is not an amount: {text_shown(value)}{_SYNTAX}")
    if amount.is_signed():  # Decimal("-0") too, as the text "-0"
        problem = "negative" if amount else "syntax"
        raise _refused(field, problem, f"{field} must not be negative ({text_shown(value)})")
    if amount > MAX_AMOUNT:
        raise _refused(field, "too_large", f"{field} is too large ({text_shown(value)})")
    if amount != amount.quantize(CENT):
        raise _refused(field, "places", f"{field} is not an amount with at most two decimal places: {amount}")
    return amount


def _amount_from_text(text: str, field: str) -> Decimal:
    number = _NUMBER.match(text)
    if number is None:
        raise _refused(field, "syntax", f"{field} is not an amount: {text_shown(text)}{_SYNTAX}")
    sign, whole, fraction = number.groups()
    fraction = fraction or ""
    if sign == "-" and (whole.strip("0") or fraction.strip("0")):
        raise _refused(field, "negative", f"{field} must not be negative ({_cut(text)})")
    if sign:  # "+5", "-0": a sign is not part of an amount
        raise _refused(field, "syntax", f"{field} is not an amount: {text_shown(text)}{_SYNTAX}")
    if len(fraction) > DECIMAL_PLACES:
        raise _refused(field, "places", f"{field} is not an amount with at most two decimal places: {text_shown(text)}")
    if len(whole) > WHOLE_DIGITS:
        raise _refused(field, "too_large", f"{field} is too large ({_cut(text)})")
    return Decimal(text)


def to_minor_units(amount: Decimal, currency: str) -> int:
    """Decimal("12.34") USD -> 1234; Decimal("500") JPY -> 500; Decimal("1.5") BHD -> 1500."""
    if not isinstance(amount, Decimal):
        raise InvalidInput("Amounts must be Decimal.", code="bad_amount")
    money_check_currency(amount=amount, currency=currency)
    return int(amount.scaleb(currency_exponent(currency)))


def from_minor_units(value: int, currency: str) -> Decimal:
    """1234 USD -> Decimal("12.34"); 500 JPY -> Decimal("500"); 1500 BHD -> Decimal("1.500")."""
    places = currency_exponent(currency)
    return Decimal(int(value)).scaleb(-places).quantize(Decimal(1).scaleb(-places))


# --- the API's schemas --------------------------------------------------------------------

MONEY_JSON_SCHEMA = {
    "type": "string",
    "pattern": MONEY_PATTERN,
    "examples": ["120.00"],
    "description": "An amount: ASCII digits, an optional dot, at most two decimal places.",
}


def _money_from_json(value: Any, info: ValidationInfo) -> Decimal:
    # On the wire money is a JSON string: a JSON number is refused, even a whole one.
    field = info.field_name or "amount"
    if not isinstance(value, str):
        raise ValueError(f'{field} must be a string of ASCII digits, e.g. "120.00"')
    return money_parse(value, field=field)


# For ninja/pydantic input schemas. A PlainValidator replaces pydantic's own Decimal parsing,
# which would take 1e3, floats and other scripts' digits.
MoneyIn = Annotated[Decimal, PlainValidator(_money_from_json), WithJsonSchema(MONEY_JSON_SCHEMA)]


# --- forms and the admin ------------------------------------------------------------------


class MoneyFormField(forms.DecimalField):
    """A forms.DecimalField that parses with `money_parse` (Django's own takes exponents and any
    Unicode digit). Admin forms get it through `StrictMoneyAdminMixin`."""

    widget = forms.TextInput  # a number input would let the browser send "1e3"
    # "invalid" stays Django's "Enter a number."; the others say what is wrong with a number.
    default_error_messages = {
        "negative": "The amount must be positive.",
        "max_decimal_places": "Ensure that there are no more than %(max)s decimal places.",
        "max_whole_digits": "Ensure that there are no more than %(max)s digits before the decimal point.",
    }
    _ERRORS = {
        "negative": ("negative", None),
        "places": ("max_decimal_places", DECIMAL_PLACES),
        "too_large": ("max_whole_digits", WHOLE_DIGITS),
    }

    def __init__(self, *, max_digits=MAX_DIGITS, decimal_places=DECIMAL_PLACES, **kwargs):
        if (max_digits, decimal_places) != (MAX_DIGITS, DECIMAL_PLACES):
            raise ImproperlyConfigured(
                f"MoneyFormField parses the money column (max_digits={MAX_DIGITS}, decimal_places="
                f"{DECIMAL_PLACES}), not max_digits={max_digits}, decimal_places={decimal_places}."
            )
        super().__init__(max_digits=max_digits, decimal_places=decimal_places, **kwargs)
        self.widget.attrs.setdefault("pattern", MONEY_PATTERN.strip("^$"))

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            # Text is stripped, as every Django form field strips it; the API takes no spaces.
            return money_parse(value if isinstance(value, Decimal) else str(value).strip())
        except InvalidAmount as exc:
            key, limit = self._ERRORS.get(exc.details.get("problem"), ("invalid", None))
            raise ValidationError(self.error_messages[key], code=key, params={"max": limit}) from None

    def widget_attrs(self, widget):
        attrs = super().widget_attrs(widget)
        attrs.pop("step", None)
        attrs.setdefault("inputmode", "decimal")
        return attrs


class StrictMoneyAdminMixin:
    """Every DecimalField of an admin form parsed by MoneyFormField."""

    formfield_overrides = {models.DecimalField: {"form_class": MoneyFormField}}
