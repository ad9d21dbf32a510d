"""The order import format: pydantic models of a shop's file, and `import_file_parse`.

This module only reads: it touches no database. `ledger.importing.orders_import` checks what the
file names against the tenant's records and writes it.

The format (docs/ledger.md, "Importing orders"), with the optional extensions for real shops marked *::

    {"tenant": "acme",                                   # slug of an existing tenant
     "customers": [{"id": "CUST-3001", "name": "Ada Lovelace", "email": "ada@example.com",
                    "address": {...},                                             # * any JSON object
                    "payment_methods": [{"id": "card_1", "kind": "card", "brand": "visa", "last4": "4242"},
                                        {"id": "paypal_1", "kind": "paypal"},
                                        {"id": "gift_card_7", "kind": "gift_card", "balance": "25.00"}]}],
     "orders": [{"id": "ORD-9001", "customer": "CUST-3001", "total": "99.00", "currency": "USD",
                 "placed_at": "2026-11-10T10:00:00Z", "status": "delivered",
                 "note": "...",                                                   # * free text, untrusted
                 "address": {...},                                                # * any JSON object
                 "items": [{"id": "ITEM-1", "name": "Water Bottle", "price": "47.84", "quantity": 1,
                            "product_id": "8310926033", "options": {"color": "blue"}}],   # * product_id, options
                 "payment": {"method": "card", "card_brand": "visa", "card_last4": "4242",
                             "payment_method_id": "card_1", "payment_ref": "pi_3PqA1b2C3d4E5f6G",
                             "amount": "99.00"},                                  # * amount, default: total
                 "payments": [{"method": "gift_card", "payment_method_id": "gift_card_7", "amount": "25.00"},
                              {"payment_method_id": "card_1", "amount": "74.00"}],  # * several payments
                 "refunds": [{"amount": "10.00", "payment_method_id": "card_1", "items": ["ITEM-1"],
                              "reason": "..."}]}]}                                # * refunds the shop already made

Rules:

- Amounts are read by the one money parser (`ledger.money.money_parse`): decimal strings with at
  most two places ("99.00"); JSON integers are accepted, JSON floats are refused (a float is not
  an exact amount), and so are exponents, signs, spaces and other scripts' digits. Totals and
  prices may be zero, payments and refunds must be positive.
- ``currency`` is one of settings.LEDGER_CURRENCIES; an order's amounts (total, item prices,
  payments, refunds) have no more decimal places than it has (no "10.50" yen), as in the API.
- ``placed_at`` is ISO 8601; without a timezone it is read as UTC; a bare date is midnight UTC;
  it lies between 1970-01-01 and 2099-12-31 in UTC. ``status`` is one of pending, processed,
  delivered, cancelled (default delivered).
- No string (ids, names, notes, references, reasons, and every key and value inside
  ``address`` and ``options``) may hold a control character other than tab, newline and carriage
  return (the API's rule: NUL fails on PostgreSQL), nor a lone surrogate.
- An item's ``quantity`` is a whole number from 1 to 2,147,483,647 (the column's range; default 1).
- Without ``items`` an order is one line (item id = the order id) for its total. Item prices
  need not add up to the total. An item id may repeat on several lines (one unit each).
- ``payment`` and ``payments`` may both be given; each payment's ``amount`` defaults to the order
  total (only when the order has a single payment); a payment's currency is the order's.
- Refunds never add up to more than the order's total.

Every problem is reported with the record and the field, e.g.
``orders[3] (ORD-9004): items[0]: price must not be negative (-2.00)``.
"""

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from decimal import Decimal
from typing import Annotated, Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from django.utils.dateparse import parse_date, parse_datetime
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .exceptions import InvalidAmount
from .models import Order, PaymentMethod
from .money import ZERO, money_check_currency, money_parse
from .text import json_strings, text_problem, text_shown

# A shop's orders are placed in this range (UTC). Year 1 or 9999 with an offset is outside what a
# datetime holds once in UTC: a row no read survives.
PLACED_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
PLACED_AT_MAX = datetime(2100, 1, 1, tzinfo=UTC)
# OrderItem.quantity is a PositiveIntegerField: PostgreSQL's integer.
MAX_QUANTITY = 2_147_483_647
STATUSES = frozenset(choice.value for choice in Order.Status)
SHOP_REFUND_REASON = "Refunded by the shop before the import."
KINDS = frozenset(choice.value for choice in PaymentMethod.Kind)


# --- field types ---------------------------------------------------------------------------
# Each names its field in its message ("price must not be negative"); `_problems` adds where
# the field is ("orders[2] (ORD-9003): items[0]: ").


def _field_error(message: str) -> PydanticCustomError:
    """A problem with one field; the message names the field."""
    return PydanticCustomError("import_field", "{message}", {"message": message})


def _record_error(message: str) -> PydanticCustomError:
    """A problem with a whole record (an order, a payment), or across its fields."""
    return PydanticCustomError("import_record", "{message}", {"message": message})


def _check_text(key: str, value: Any) -> None:
    """Strings the columns cannot take (a NUL fails on PostgreSQL): in `value` or anywhere inside it."""
    for text in json_strings(value):
        problem = text_problem(text)
        if problem:
            raise _field_error(f"{key} {problem}")


def _text(
    max_length: int,
    *,
    required: bool = False,
    default: str = "",
    choices: Collection[str] | Callable[[], Collection[str]] | None = None,
) -> PlainValidator:
    def read(value: Any, info: ValidationInfo) -> str:
        key = info.field_name
        if value is None or value == "":
            if required:
                raise _field_error(f"{key} is required")
            return default
        if not isinstance(value, str):
            raise _field_error(f"{key} must be a string, got {text_shown(value)}")
        if len(value) > max_length:
            raise _field_error(f"{key} is longer than {max_length} characters")
        _check_text(key, value)
        allowed = choices() if callable(choices) else choices
        if allowed is not None and value not in allowed:
            raise _field_error(f"{key} {value!r} is not one of {', '.join(sorted(allowed))}")
        return value

    return PlainValidator(read)


def _amount(*, required: bool = False, positive: bool = False) -> PlainValidator:
    def read(value: Any, info: ValidationInfo) -> Decimal | None:
        key = info.field_name
        if value is None:
            if required:
                raise _field_error(f"{key} is required")
            return None
        try:
            amount = money_parse(value, field=key)
        except InvalidAmount as exc:
            raise _field_error(exc.message) from None
        if positive and amount == 0:
            raise _field_error(f"{key} must be positive")
        return amount

    return PlainValidator(read)


def _free_form(value: Any, info: ValidationInfo) -> dict:
    """Any JSON object (an address, options), stored as it is: every string in it is checked."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _field_error(f"{info.field_name} must be an object")
    _check_text(info.field_name, value)
    return value


def _when(value: Any, info: ValidationInfo) -> datetime:
    key = info.field_name
    if value is None or value == "":
        raise _field_error(f"{key} is required")
    if not isinstance(value, str):
        raise _field_error(f"{key} must be an ISO 8601 date-time string, got {text_shown(value)}")
    try:
        parsed = parse_datetime(value)
        if parsed is None:
            day = parse_date(value)
            parsed = datetime.combine(day, time.min) if day else None
    except ValueError:
        parsed = None
    if parsed is None:
        raise _field_error(f"{key} is not an ISO 8601 date-time: {text_shown(value)}")
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    # Compared, never converted: comparing aware datetimes cannot overflow.
    if not PLACED_AT_MIN <= parsed < PLACED_AT_MAX:
        raise _field_error(f"{key} {text_shown(value)} is not between 1970-01-01 and 2099-12-31 (UTC)")
    return parsed


def _quantity(value: Any, info: ValidationInfo) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_QUANTITY:
        raise _field_error(
            f"{info.field_name} must be a whole number from 1 to {MAX_QUANTITY}, got {text_shown(value)}"
        )
    return value


def _item_ids(value: Any, info: ValidationInfo) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise _field_error(f"{info.field_name} must be a list of item ids")
    _check_text(info.field_name, value)
    return value


def _email(value: str, info: ValidationInfo) -> str:
    if value:
        try:
            validate_email(value)
        except DjangoValidationError:
            raise _field_error(f"{info.field_name} {value!r} is not an email address") from None
    return value


def _digits(value: str, info: ValidationInfo) -> str:
    if value and not value.isdigit():
        raise _field_error(f"{info.field_name} must be digits, got {value!r}")
    return value


def _none_as_empty(value: Any) -> Any:
    return [] if value is None else value


def _currencies() -> Collection[str]:
    return settings.LEDGER_CURRENCIES


Id = Annotated[str, _text(100, required=True)]
OptionalId = Annotated[str, _text(100)]
Name = Annotated[str, _text(200)]
Amount = Annotated[Decimal, _amount(required=True)]
PositiveAmount = Annotated[Decimal, _amount(required=True, positive=True)]
FreeForm = Annotated[dict, PlainValidator(_free_form)]


class _Record(BaseModel):
    # Unknown keys are ignored: a shop's export carries more than the product reads.
    model_config = ConfigDict(extra="ignore")


class PaymentMethodRow(_Record):
    id: Id
    kind: Annotated[str, _text(20, required=True, choices=KINDS)]
    brand: Annotated[str, _text(40)] = ""
    last4: Annotated[str, _text(4), AfterValidator(_digits)] = ""
    balance: Annotated[Decimal | None, _amount()] = None


class CustomerRow(_Record):
    id: Id
    name: Name = ""
    email: Annotated[str, _text(254), AfterValidator(_email)] = ""
    address: FreeForm = {}
    payment_methods: Annotated[list[PaymentMethodRow], BeforeValidator(_none_as_empty)] = []
    _label: str = PrivateAttr("")

    @property
    def label(self) -> str:
        return self._label

    @model_validator(mode="after")
    def _methods_once(self):
        seen = set()
        for index, method in enumerate(self.payment_methods):
            if method.id in seen:
                raise _record_error(f"payment_methods[{index}]: payment method {method.id} appears twice")
            seen.add(method.id)
        return self


class ItemRow(_Record):
    id: Id
    name: Name = ""
    price: Amount
    quantity: Annotated[int, PlainValidator(_quantity)] = 1
    product_id: OptionalId = ""
    options: FreeForm = {}


class PaymentRow(_Record):
    method: Annotated[str, _text(20, choices=KINDS)] = ""  # "": the kind of its payment method
    amount: Annotated[Decimal | None, _amount(positive=True)] = None  # None: the order's total
    payment_method_id: OptionalId = ""
    card_brand: Annotated[str, _text(40)] = ""
    card_last4: Annotated[str, _text(4)] = ""
    payment_ref: Annotated[str, _text(200)] = ""

    @model_validator(mode="after")
    def _names_a_method(self):
        if not self.method and not self.payment_method_id:
            raise _record_error("needs a method or a payment_method_id")
        return self


class RefundRow(_Record):
    amount: PositiveAmount
    payment_method_id: OptionalId = ""
    items: Annotated[list[str], PlainValidator(_item_ids)] = []
    reason: Annotated[str, _text(10_000, default=SHOP_REFUND_REASON)] = SHOP_REFUND_REASON


class OrderRow(_Record):
    id: Id
    customer: Id
    currency: Annotated[str, _text(3, required=True, choices=_currencies)]
    total: Amount
    placed_at: Annotated[datetime, PlainValidator(_when)]
    status: Annotated[str, _text(20, default=Order.Status.DELIVERED, choices=STATUSES)] = Order.Status.DELIVERED
    note: Annotated[str, _text(100_000)] = ""
    address: FreeForm = {}
    items: Annotated[list[ItemRow], BeforeValidator(_none_as_empty)] = []
    # `payment` joins `payments` (first) once the order is read: the writes read `payments` only.
    payment: PaymentRow | None = None
    payments: Annotated[list[PaymentRow], BeforeValidator(_none_as_empty)] = []
    refunds: Annotated[list[RefundRow], BeforeValidator(_none_as_empty)] = []
    _label: str = PrivateAttr("")

    @property
    def label(self) -> str:
        return self._label

    @model_validator(mode="after")
    def _whole_order(self):
        paid = ([("payment", self.payment)] if self.payment is not None else []) + [
            (f"payments[{index}]", payment) for index, payment in enumerate(self.payments)
        ]
        for where, payment in paid:
            if payment.amount is not None:
                continue
            if len(paid) > 1:
                raise _record_error(f"{where}: amount is required")
            if self.total == 0:
                raise _record_error(f"{where}: an order with a zero total has no payment")
            payment.amount = self.total
        # The API's rule (422 amount_precision): never more places than the currency has.
        amounts = [
            ("total", self.total),
            *((f"items[{index}]: price", item.price) for index, item in enumerate(self.items)),
            *((f"{where}: amount", payment.amount) for where, payment in paid),
            *((f"refunds[{index}]: amount", refund.amount) for index, refund in enumerate(self.refunds)),
        ]
        for where, amount in amounts:
            try:
                money_check_currency(amount=amount, currency=self.currency, field=where)
            except InvalidAmount as exc:
                raise _record_error(exc.message) from None
        if sum((refund.amount for refund in self.refunds), ZERO) > self.total:
            raise _record_error(f"refunds add up to more than the total {self.total}")
        if not self.items:
            self.items = [ItemRow(id=self.id, name=f"Order {self.id}", price=self.total)]
        self.payments = [payment for _, payment in paid]
        self.payment = None
        return self


# --- reading a file ------------------------------------------------------------------------


@dataclass
class ImportFile:
    """A file as read: the tenant's slug, the records that are valid, and every problem found."""

    tenant: str
    customers: list[CustomerRow] = field(default_factory=list)
    orders: list[OrderRow] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def import_file_parse(data: Any) -> ImportFile:
    """Read a whole import file (parsed JSON); every problem of every record is collected."""
    if not isinstance(data, dict):
        return ImportFile(tenant="", errors=["the file must be a JSON object with tenant, customers and orders"])
    parsed = ImportFile(tenant="")
    slug = data.get("tenant")
    if not isinstance(slug, str) or not slug:
        parsed.errors.append("tenant is required (the slug of an existing tenant)")
    elif text_problem(slug):
        parsed.errors.append(f"tenant {text_problem(slug)}")
    else:
        parsed.tenant = slug
    parsed.customers = _records(data, "customers", CustomerRow, parsed.errors)
    parsed.orders = _records(data, "orders", OrderRow, parsed.errors)
    return parsed


def _records(data: dict, collection: str, model: type[CustomerRow | OrderRow], errors: list[str]) -> list:
    rows = data.get(collection, [])
    if not isinstance(rows, list):
        errors.append(f"{collection} must be a list")
        return []
    records, seen = [], {}
    for index, row in enumerate(rows):
        label = _row_label(collection, index, row)
        if not isinstance(row, dict):
            errors.append(f"{label}: must be an object")
            continue
        try:
            record = model.model_validate(row)
        except ValidationError as exc:
            errors.extend(f"{label}: {problem}" for problem in _problems(exc))
            continue
        if record.id in seen:
            errors.append(f"{label}: id {record.id} already appears at {seen[record.id]}")
            continue
        record._label = seen[record.id] = label
        records.append(record)
    return records


def _row_label(collection: str, index: int, row: Any) -> str:
    ident = row.get("id") if isinstance(row, dict) else None
    shown = isinstance(ident, str) and ident and not text_problem(ident)  # never print a NUL back
    return f"{collection}[{index}]" + (f" ({ident})" if shown else "")


def _problems(error: ValidationError) -> list[str]:
    """pydantic's errors as the shop's developer reads them: `items[0]: price must not be negative`."""
    problems = []
    for problem in error.errors(include_url=False, include_context=False, include_input=False):
        location = problem["loc"]
        key = location[-1] if location and isinstance(location[-1], str) else None
        kind = problem["type"]
        if kind == "import_field" or (key and kind in ("missing", "model_type", "list_type")):
            # The message is about the field at the end of the location (and names it).
            location = location[:-1]
            message = {
                "missing": f"{key} is required",
                "model_type": f"{key} must be an object",
                "list_type": f"{key} must be a list",
            }.get(kind, problem["msg"])
        elif kind == "model_type":  # a list's element
            message = "must be an object"
        else:
            message = problem["msg"]
        problems.append(": ".join([*_where(location), message]))
    return problems


def _where(location: tuple) -> list[str]:
    """("items", 0, "options") -> ["items[0]", "options"]."""
    parts: list[str] = []
    for step in location:
        if isinstance(step, int) and parts:
            parts[-1] += f"[{step}]"
        else:
            parts.append(str(step))
    return parts
