"""Currency arithmetic: ISO 4217 exponents and the provider's integer minor units.

The ledger stores Decimal(12, 2); a payment provider wants an integer in the currency's minor
unit (cents for USD, yen for JPY, fils for BHD). The exponent is the currency's real one, and
an amount the currency cannot represent (JPY 0.50) is refused, never rounded.
"""

from decimal import Decimal

from .exceptions import InvalidInput

# ISO 4217 currencies whose minor unit is not 1/100. Everything else has two places.
ZERO_DECIMAL = frozenset(
    {"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"}
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


def amount_check_representable(amount: Decimal, currency: str) -> Decimal:
    """Refuse an amount with more places than the currency has (JPY "0.50"); returns it unchanged."""
    places = currency_exponent(currency)
    if amount != amount.quantize(Decimal(1).scaleb(-places)):
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
