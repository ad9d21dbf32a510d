"""Loading a shop's customers and orders into a tenant: `orders_import(data=...)`.

This is how the shop's records reach the product (`manage.py import_orders PATH`; a shop
integration would call the same service). The whole file is validated first and refused as a
whole, naming the row, e.g. ``orders[3] (ORD-9004): total must not be negative``; only a valid
file is written, in one transaction.

The format (API.md, "Order import format"), with the optional extensions marked *::

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

- Amounts are decimal strings with at most two places ("99.00"); JSON integers are accepted,
  JSON floats are refused (a float is not an exact amount). Totals and prices may be zero,
  payments and refunds must be positive.
- ``currency`` is one of settings.LEDGER_CURRENCIES; an order's amounts (total, item prices,
  payments, refunds) have no more decimal places than it has (no "10.50" yen), as in the API.
- ``placed_at`` is ISO 8601; without a timezone it is read as UTC; a bare date is midnight UTC;
  it lies between 1970-01-01 and 2099-12-31 in UTC. ``status`` is one of pending, processed,
  delivered, cancelled (default delivered).
- No string (ids, names, notes, references, reasons, and every key and value inside
  ``address`` and ``options``) may hold a control character other than tab, newline and carriage
  return (the API's rule: NUL fails on PostgreSQL), nor a lone surrogate.
- ``customer`` names a customer of the file or one the tenant already has.
- An item's ``quantity`` is a whole number from 1 to 2,147,483,647 (the column's range; default 1).
- Without ``items`` an order is one line (item id = the order id) for its total. Item prices
  need not add up to the total. An item id may repeat on several lines (one unit each).
- ``payment`` and ``payments`` may both be given; each payment's ``method`` defaults to the
  kind of its ``payment_method_id``, its ``amount`` to the order total (only when the order has
  a single payment); a payment's currency is the order's.
- ``refunds`` are written to the ledger through ``ledger_refund_issue`` with source ``import``
  and the idempotency key ``import:<tenant>:<order>:<n>`` (n counts from 1 in the list), so a
  re-import replays them, and a re-import that changes an already imported refund is refused.
  The ledger's own checks apply (never above the order total, an item once).

Re-importing the same ids duplicates nothing. What a refund depends on never changes on an
existing order: its customer, total, currency, placed_at, items and payments stay as first
imported; a difference there is reported as a warning in the result, not applied. What may
change is applied and counted as ``updated``: an order's status, note and address; a
customer's name, email and address; a payment method's brand, last four and gift card
balance (its kind may not change: that is an error). New payment methods and new refunds of
an existing order are added.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils.dateparse import parse_date, parse_datetime

from .exceptions import DomainError, ImportRefused, InvalidInput
from .models import Customer, Order, OrderItem, Payment, PaymentMethod, RefundEntry, Tenant
from .money import money_check_currency, money_parse
from .services import ledger_refund_issue
from .text import json_strings, text_problem

MAX_ERRORS_SHOWN = 20
# A shop's orders are placed in this range (UTC). Year 1 or 9999 with an offset is outside what a
# datetime holds once in UTC: an OverflowError on SQLite, and on PostgreSQL a row no read survives.
PLACED_AT_MIN = datetime(1970, 1, 1, tzinfo=UTC)
PLACED_AT_MAX = datetime(2100, 1, 1, tzinfo=UTC)
# OrderItem.quantity is a PositiveIntegerField: PostgreSQL's integer, whatever the backend.
MAX_QUANTITY = 2_147_483_647
STATUSES = {choice.value for choice in Order.Status}
KINDS = {choice.value for choice in PaymentMethod.Kind}


@dataclass
class Counts:
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    def __str__(self):
        return f"{self.created} created, {self.updated} updated, {self.unchanged} unchanged"


@dataclass
class ImportResult:
    tenant: str
    customers: Counts = field(default_factory=Counts)
    payment_methods: Counts = field(default_factory=Counts)
    orders: Counts = field(default_factory=Counts)
    refunds: Counts = field(default_factory=Counts)
    warnings: list[str] = field(default_factory=list)

    @property
    def created(self) -> int:
        return sum(c.created for c in (self.customers, self.payment_methods, self.orders, self.refunds))

    @property
    def updated(self) -> int:
        return sum(c.updated for c in (self.customers, self.payment_methods, self.orders, self.refunds))

    @property
    def unchanged(self) -> int:
        return sum(c.unchanged for c in (self.customers, self.payment_methods, self.orders, self.refunds))

    def summary(self) -> str:
        return (
            f"tenant {self.tenant}: customers {self.customers}; payment methods {self.payment_methods}; "
            f"orders {self.orders}; refunds {self.refunds}"
        )


# --- the parsed file -------------------------------------------------------------------


@dataclass
class _PaymentMethodRow:
    external_id: str
    kind: str
    brand: str
    last4: str
    balance: Decimal | None


@dataclass
class _CustomerRow:
    label: str
    external_id: str
    name: str
    email: str
    address: dict
    payment_methods: list[_PaymentMethodRow]


@dataclass
class _ItemRow:
    item_id: str
    name: str
    price: Decimal
    quantity: int
    product_id: str
    options: dict


@dataclass
class _PaymentRow:
    method: str | None
    payment_method_id: str
    card_brand: str
    card_last4: str
    payment_ref: str
    amount: Decimal


@dataclass
class _RefundRow:
    amount: Decimal
    payment_method_id: str
    items: list[str]
    reason: str


@dataclass
class _OrderRow:
    label: str
    external_id: str
    customer: str
    total: Decimal
    currency: str
    placed_at: datetime
    status: str
    note: str
    address: dict
    items: list[_ItemRow]
    payments: list[_PaymentRow]
    refunds: list[_RefundRow]


class _Invalid(Exception):
    """One problem in one field; collected with the row's label."""


class _Reader:
    """Field readers that raise _Invalid with a message a shop's developer can act on."""

    @staticmethod
    def text(obj: dict, key: str, *, max_length: int, required: bool = False, default: str = "") -> str:
        value = obj.get(key)
        if value is None or value == "":
            if required:
                raise _Invalid(f"{key} is required")
            return default
        if not isinstance(value, str):
            raise _Invalid(f"{key} must be a string, got {value!r}")
        if len(value) > max_length:
            raise _Invalid(f"{key} is longer than {max_length} characters")
        _Reader.check_text(key, value)
        return value

    @staticmethod
    def check_text(key: str, value) -> None:
        """Strings the columns cannot take (a NUL fails on PostgreSQL, was stored on SQLite)."""
        for text in json_strings(value):
            problem = text_problem(text)
            if problem:
                raise _Invalid(f"{key} {problem}")

    @staticmethod
    def amount(
        obj: dict, key: str, *, required: bool = True, positive: bool = False, currency: str | None = None
    ) -> Decimal | None:
        value = obj.get(key)
        if value is None:
            if required:
                raise _Invalid(f"{key} is required")
            return None
        if isinstance(value, float):
            raise _Invalid(f'{key} must be a decimal string like "{value:.2f}", not the JSON number {value!r}')
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise _Invalid(f"{key} must be a decimal string, got {value!r}")
        try:
            amount = money_parse(value, field=key)
        except InvalidInput as exc:
            raise _Invalid(exc.message) from None
        if positive and amount == 0:
            raise _Invalid(f"{key} must be positive")
        if currency is not None:
            # The API's rule (422 amount_precision): never more places than the currency has.
            try:
                money_check_currency(amount=amount, currency=currency, field=key)
            except InvalidInput as exc:
                raise _Invalid(exc.message) from None
        return amount

    @staticmethod
    def mapping(obj: dict, key: str) -> dict:
        value = obj.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise _Invalid(f"{key} must be an object")
        return value

    @staticmethod
    def free_form(obj: dict, key: str) -> dict:
        """Any JSON object (an address, options), stored as it is: every string in it is checked."""
        value = _Reader.mapping(obj, key)
        _Reader.check_text(key, value)
        return value

    @staticmethod
    def rows(obj: dict, key: str) -> list:
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise _Invalid(f"{key} must be a list")
        return value

    @staticmethod
    def when(obj: dict, key: str) -> datetime:
        value = obj.get(key)
        if value is None or value == "":
            raise _Invalid(f"{key} is required")
        if not isinstance(value, str):
            raise _Invalid(f"{key} must be an ISO 8601 date-time string, got {value!r}")
        try:
            parsed = parse_datetime(value)
            if parsed is None:
                day = parse_date(value)
                parsed = datetime.combine(day, time.min) if day else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise _Invalid(f"{key} is not an ISO 8601 date-time: {value!r}")
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        # Compared, never converted: comparing aware datetimes cannot overflow.
        if not PLACED_AT_MIN <= parsed < PLACED_AT_MAX:
            raise _Invalid(f"{key} {value!r} is not between 1970-01-01 and 2099-12-31 (UTC)")
        return parsed


def _label(collection: str, index: int, row) -> str:
    ident = row.get("id") if isinstance(row, dict) else None
    shown = isinstance(ident, str) and ident and not text_problem(ident)  # never print a NUL back
    return f"{collection}[{index}]" + (f" ({ident})" if shown else "")


def _parse_customer(row: dict, label: str, errors: list[str]) -> _CustomerRow | None:
    r = _Reader
    try:
        external_id = r.text(row, "id", max_length=100, required=True)
        email = r.text(row, "email", max_length=254)
        if email:
            try:
                validate_email(email)
            except ValidationError:
                raise _Invalid(f"email {email!r} is not an email address") from None
        methods, seen = [], set()
        for j, pm in enumerate(r.rows(row, "payment_methods")):
            where = f"payment_methods[{j}]"
            if not isinstance(pm, dict):
                raise _Invalid(f"{where} must be an object")
            try:
                pm_id = r.text(pm, "id", max_length=100, required=True)
                kind = r.text(pm, "kind", max_length=20, required=True)
                if kind not in KINDS:
                    raise _Invalid(f"kind {kind!r} is not one of {', '.join(sorted(KINDS))}")
                last4 = r.text(pm, "last4", max_length=4)
                if last4 and not last4.isdigit():
                    raise _Invalid(f"last4 must be digits, got {last4!r}")
                if pm_id in seen:
                    raise _Invalid(f"payment method {pm_id} appears twice")
                seen.add(pm_id)
                methods.append(
                    _PaymentMethodRow(
                        external_id=pm_id,
                        kind=kind,
                        brand=r.text(pm, "brand", max_length=40),
                        last4=last4,
                        balance=r.amount(pm, "balance", required=False),
                    )
                )
            except _Invalid as exc:
                raise _Invalid(f"{where}: {exc}") from None
        return _CustomerRow(
            label=label,
            external_id=external_id,
            name=r.text(row, "name", max_length=200),
            email=email,
            address=r.free_form(row, "address"),
            payment_methods=methods,
        )
    except _Invalid as exc:
        errors.append(f"{label}: {exc}")
        return None


def _parse_order(row: dict, label: str, errors: list[str]) -> _OrderRow | None:
    r = _Reader
    try:
        external_id = r.text(row, "id", max_length=100, required=True)
        customer = r.text(row, "customer", max_length=100, required=True)
        currency = r.text(row, "currency", max_length=3, required=True)
        if currency not in settings.LEDGER_CURRENCIES:
            raise _Invalid(f"currency {currency!r} is not one of {', '.join(sorted(settings.LEDGER_CURRENCIES))}")
        total = r.amount(row, "total", currency=currency)
        placed_at = r.when(row, "placed_at")
        status = r.text(row, "status", max_length=20, default=Order.Status.DELIVERED)
        if status not in STATUSES:
            raise _Invalid(f"status {status!r} is not one of {', '.join(sorted(STATUSES))}")
        items = []
        for j, item in enumerate(r.rows(row, "items")):
            try:
                if not isinstance(item, dict):
                    raise _Invalid("must be an object")
                quantity = item.get("quantity", 1)
                if isinstance(quantity, bool) or not isinstance(quantity, int) or not 1 <= quantity <= MAX_QUANTITY:
                    raise _Invalid(f"quantity must be a whole number from 1 to {MAX_QUANTITY}, got {quantity!r}")
                items.append(
                    _ItemRow(
                        item_id=r.text(item, "id", max_length=100, required=True),
                        name=r.text(item, "name", max_length=200),
                        price=r.amount(item, "price", currency=currency),
                        quantity=quantity,
                        product_id=r.text(item, "product_id", max_length=100),
                        options=r.free_form(item, "options"),
                    )
                )
            except _Invalid as exc:
                raise _Invalid(f"items[{j}]: {exc}") from None
        if not items:
            items = [
                _ItemRow(
                    item_id=external_id, name=f"Order {external_id}", price=total, quantity=1, product_id="", options={}
                )
            ]
        raw_payments = []
        if row.get("payment") is not None:
            raw_payments.append(("payment", r.mapping(row, "payment")))
        raw_payments += [(f"payments[{j}]", p) for j, p in enumerate(r.rows(row, "payments"))]
        payments = []
        for where, p in raw_payments:
            try:
                if not isinstance(p, dict):
                    raise _Invalid("must be an object")
                method = r.text(p, "method", max_length=20) or None
                if method is not None and method not in KINDS:
                    raise _Invalid(f"method {method!r} is not one of {', '.join(sorted(KINDS))}")
                amount = r.amount(p, "amount", required=len(raw_payments) > 1, positive=True, currency=currency)
                if amount is None:
                    if total == 0:
                        raise _Invalid("an order with a zero total has no payment")
                    amount = total
                payment_method_id = r.text(p, "payment_method_id", max_length=100)
                if method is None and not payment_method_id:
                    raise _Invalid("needs a method or a payment_method_id")
                payments.append(
                    _PaymentRow(
                        method=method,
                        payment_method_id=payment_method_id,
                        card_brand=r.text(p, "card_brand", max_length=40),
                        card_last4=r.text(p, "card_last4", max_length=4),
                        payment_ref=r.text(p, "payment_ref", max_length=200),
                        amount=amount,
                    )
                )
            except _Invalid as exc:
                raise _Invalid(f"{where}: {exc}") from None
        refunds = []
        for j, refund in enumerate(r.rows(row, "refunds")):
            try:
                if not isinstance(refund, dict):
                    raise _Invalid("must be an object")
                refund_items = r.rows(refund, "items")
                if not all(isinstance(i, str) and i for i in refund_items):
                    raise _Invalid("items must be a list of item ids")
                r.check_text("items", refund_items)
                refunds.append(
                    _RefundRow(
                        amount=r.amount(refund, "amount", positive=True, currency=currency),
                        payment_method_id=r.text(refund, "payment_method_id", max_length=100),
                        items=list(refund_items),
                        reason=r.text(
                            refund, "reason", max_length=10_000, default="Refunded by the shop before the import."
                        ),
                    )
                )
            except _Invalid as exc:
                raise _Invalid(f"refunds[{j}]: {exc}") from None
        if sum((rf.amount for rf in refunds), Decimal("0")) > total:
            raise _Invalid(f"refunds add up to more than the total {total}")
        return _OrderRow(
            label=label,
            external_id=external_id,
            customer=customer,
            total=total,
            currency=currency,
            placed_at=placed_at,
            status=status,
            note=r.text(row, "note", max_length=100_000),
            address=r.free_form(row, "address"),
            items=items,
            payments=payments,
            refunds=refunds,
        )
    except _Invalid as exc:
        errors.append(f"{label}: {exc}")
        return None


def _refuse(errors: list[str]):
    shown = errors[:MAX_ERRORS_SHOWN]
    more = f"\n... and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    raise ImportRefused(
        "The import file was refused; nothing was imported.\n" + "\n".join(shown) + more,
        details={"errors": errors},
    )


def _parse(data) -> tuple[Tenant | None, list[_CustomerRow], list[_OrderRow], list[str]]:
    errors: list[str] = []
    if not isinstance(data, dict):
        return None, [], [], ["the file must be a JSON object with tenant, customers and orders"]
    tenant = None
    slug = data.get("tenant")
    if not isinstance(slug, str) or not slug:
        errors.append("tenant is required (the slug of an existing tenant)")
    elif text_problem(slug):
        errors.append(f"tenant {text_problem(slug)}")
    else:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            errors.append(f"tenant {slug!r} does not exist")
    customers: list[_CustomerRow] = []
    orders: list[_OrderRow] = []
    for collection in ("customers", "orders"):
        rows = data.get(collection, [])
        if not isinstance(rows, list):
            errors.append(f"{collection} must be a list")
            continue
        parse = _parse_customer if collection == "customers" else _parse_order
        target = customers if collection == "customers" else orders
        seen: dict[str, str] = {}
        for i, row in enumerate(rows):
            label = _label(collection, i, row)
            if not isinstance(row, dict):
                errors.append(f"{label}: must be an object")
                continue
            parsed = parse(row, label, errors)
            if parsed is None:
                continue
            if parsed.external_id in seen:
                errors.append(f"{label}: id {parsed.external_id} already appears at {seen[parsed.external_id]}")
                continue
            seen[parsed.external_id] = label
            target.append(parsed)
    return tenant, customers, orders, errors


def _check_references(tenant: Tenant, customers, orders, errors: list[str]) -> tuple[dict, dict]:
    """Customers and payment methods the orders name must exist in the file or in the tenant."""
    known_customers = {c.external_id: c for c in customers}
    existing = {
        c.external_id: c for c in Customer.objects.filter(tenant=tenant, external_id__in={o.customer for o in orders})
    }
    existing_methods: dict[str, dict[str, PaymentMethod]] = {}
    for pm in PaymentMethod.objects.filter(
        customer__tenant=tenant, customer__external_id__in={*known_customers, *(o.customer for o in orders)}
    ).select_related("customer"):
        existing_methods.setdefault(pm.customer.external_id, {})[pm.external_id] = pm
    for c in customers:
        for pm in c.payment_methods:
            stored = existing_methods.get(c.external_id, {}).get(pm.external_id)
            if stored is not None and stored.kind != pm.kind:
                errors.append(f"{c.label}: payment method {pm.external_id} is a {stored.kind}, the file says {pm.kind}")
    for o in orders:
        if o.customer not in known_customers and o.customer not in existing:
            errors.append(f"{o.label}: customer {o.customer} is neither in the file nor a customer of {tenant.slug}")
            continue
        methods = {pm.external_id: pm.kind for pm in getattr(known_customers.get(o.customer), "payment_methods", [])}
        methods.update({k: v.kind for k, v in existing_methods.get(o.customer, {}).items() if k not in methods})
        for where, pm_id in [("payment", p.payment_method_id) for p in o.payments] + [
            ("refund", rf.payment_method_id) for rf in o.refunds
        ]:
            if pm_id and pm_id not in methods:
                errors.append(f"{o.label}: {where} names payment method {pm_id}, which {o.customer} does not have")
        for p in o.payments:
            if p.method is None and p.payment_method_id in methods:
                p.method = methods[p.payment_method_id]
        units = {}
        for item in o.items:
            units[item.item_id] = units.get(item.item_id, 0) + item.quantity
        for j, rf in enumerate(o.refunds):
            for item_id in rf.items:
                units[item_id] = units.get(item_id, 0) - 1
                if units[item_id] < 0:
                    errors.append(
                        f"{o.label}: refunds[{j}] refunds item {item_id}, which is not (or no longer) on the order"
                    )
                    break
    return existing, existing_methods


def orders_import(*, data: dict) -> ImportResult:
    """Validate a whole import file, then write it in one transaction (see the module doc)."""
    tenant, customers, orders, errors = _parse(data)
    if tenant is not None and not errors:
        _check_references(tenant, customers, orders, errors)
    if errors:
        _refuse(errors)
    result = ImportResult(tenant=tenant.slug)
    with transaction.atomic():
        customer_by_id = _write_customers(tenant, customers, result)
        _write_orders(tenant, orders, customer_by_id, result)
    return result


def _write_customers(tenant: Tenant, rows: list[_CustomerRow], result: ImportResult) -> dict[str, Customer]:
    existing = {
        c.external_id: c for c in Customer.objects.filter(tenant=tenant, external_id__in=[r.external_id for r in rows])
    }
    new, changed = [], []
    for row in rows:
        customer = existing.get(row.external_id)
        if customer is None:
            new.append(
                Customer(
                    tenant=tenant, external_id=row.external_id, name=row.name, email=row.email, address=row.address
                )
            )
        elif (customer.name, customer.email, customer.address) != (row.name, row.email, row.address):
            customer.name, customer.email, customer.address = row.name, row.email, row.address
            changed.append(customer)
        else:
            result.customers.unchanged += 1
    Customer.objects.bulk_create(new)
    Customer.objects.bulk_update(changed, ["name", "email", "address"])
    result.customers.created += len(new)
    result.customers.updated += len(changed)
    by_id = {c.external_id: c for c in [*existing.values(), *new]}

    stored = {
        (pm.customer_id, pm.external_id): pm for pm in PaymentMethod.objects.filter(customer__in=list(by_id.values()))
    }
    new_methods, changed_methods = [], []
    for row in rows:
        customer = by_id[row.external_id]
        for pm_row in row.payment_methods:
            pm = stored.get((customer.pk, pm_row.external_id))
            values = (pm_row.brand, pm_row.last4, pm_row.balance)
            if pm is None:
                new_methods.append(
                    PaymentMethod(
                        customer=customer,
                        external_id=pm_row.external_id,
                        kind=pm_row.kind,
                        brand=pm_row.brand,
                        last4=pm_row.last4,
                        balance=pm_row.balance,
                    )
                )
            elif (pm.brand, pm.last4, pm.balance) != values:
                pm.brand, pm.last4, pm.balance = values
                changed_methods.append(pm)
            else:
                result.payment_methods.unchanged += 1
    PaymentMethod.objects.bulk_create(new_methods)
    PaymentMethod.objects.bulk_update(changed_methods, ["brand", "last4", "balance"])
    result.payment_methods.created += len(new_methods)
    result.payment_methods.updated += len(changed_methods)
    return by_id


def _write_orders(tenant: Tenant, rows: list[_OrderRow], customer_by_id: dict[str, Customer], result: ImportResult):
    missing = {r.customer for r in rows} - set(customer_by_id)
    customer_by_id = {
        **customer_by_id,
        **{c.external_id: c for c in Customer.objects.filter(tenant=tenant, external_id__in=missing)},
    }
    methods: dict[tuple[int, str], PaymentMethod] = {
        (pm.customer_id, pm.external_id): pm
        for pm in PaymentMethod.objects.filter(customer__in=list(customer_by_id.values()))
    }
    existing = {
        o.external_id: o
        for o in Order.objects.filter(tenant=tenant, external_id__in=[r.external_id for r in rows])
        .select_related("customer")
        .prefetch_related("items", "payments__payment_method")
    }
    new_orders, changed = [], []
    for row in rows:
        order = existing.get(row.external_id)
        if order is None:
            new_orders.append(
                Order(
                    tenant=tenant,
                    customer=customer_by_id[row.customer],
                    external_id=row.external_id,
                    total=row.total,
                    currency=row.currency,
                    placed_at=row.placed_at,
                    status=row.status,
                    note=row.note,
                    address=row.address,
                )
            )
            continue
        _warn_about_kept_fields(order, row, result)
        if (order.status, order.note, order.address) != (row.status, row.note, row.address):
            order.status, order.note, order.address = row.status, row.note, row.address
            changed.append(order)
        else:
            result.orders.unchanged += 1
    Order.objects.bulk_create(new_orders, batch_size=500)
    Order.objects.bulk_update(changed, ["status", "note", "address"], batch_size=500)
    result.orders.created += len(new_orders)
    result.orders.updated += len(changed)

    order_by_id = {o.external_id: o for o in [*existing.values(), *new_orders]}
    lines, payments = [], []
    for row in rows:
        if row.external_id in existing:
            continue
        order = order_by_id[row.external_id]
        for line_no, item in enumerate(row.items, start=1):
            lines.append(
                OrderItem(
                    order=order,
                    line_no=line_no,
                    item_id=item.item_id,
                    name=item.name,
                    price=item.price,
                    quantity=item.quantity,
                    product_id=item.product_id,
                    options=item.options,
                )
            )
        for p in row.payments:
            pm = methods.get((order.customer_id, p.payment_method_id)) if p.payment_method_id else None
            payments.append(
                Payment(
                    order=order,
                    payment_method=pm,
                    method=p.method,
                    amount=p.amount,
                    currency=row.currency,
                    card_brand=p.card_brand or (pm.brand if pm and pm.kind == PaymentMethod.Kind.CARD else ""),
                    card_last4=p.card_last4 or (pm.last4 if pm and pm.kind == PaymentMethod.Kind.CARD else ""),
                    payment_ref=p.payment_ref,
                )
            )
    OrderItem.objects.bulk_create(lines, batch_size=1000)
    Payment.objects.bulk_create(payments, batch_size=1000)

    keys = [f"import:{tenant.slug}:{row.external_id}:{n}" for row in rows for n in range(1, len(row.refunds) + 1)]
    recorded = set(RefundEntry.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", flat=True))
    for row in rows:
        order = order_by_id[row.external_id]
        for n, refund in enumerate(row.refunds, start=1):
            key = f"import:{tenant.slug}:{row.external_id}:{n}"
            pm = methods.get((order.customer_id, refund.payment_method_id)) if refund.payment_method_id else None
            paid_with = {p.payment_method_id for p in row.payments}
            kind = (
                "gift_card"
                if pm is not None and pm.kind == PaymentMethod.Kind.GIFT_CARD and pm.external_id not in paid_with
                else "original"
            )
            try:
                ledger_refund_issue(
                    order=order,
                    amount=refund.amount,
                    currency=order.currency,
                    idempotency_key=key,
                    destination=pm,
                    destination_kind=kind,
                    item_ids=refund.items,
                    source=RefundEntry.Source.IMPORT,
                    reason=refund.reason,
                )
            except DomainError as exc:
                # Raising rolls the whole import back: a bad file writes nothing.
                raise ImportRefused(
                    f"The import file was refused; nothing was imported.\n{row.label}: refunds[{n - 1}]: {exc.message}",
                    details={"errors": [f"{row.label}: refunds[{n - 1}]: {exc.message}"]},
                ) from exc
            if key in recorded:
                result.refunds.unchanged += 1
            else:
                result.refunds.created += 1


def _warn_about_kept_fields(order: Order, row: _OrderRow, result: ImportResult):
    kept = []
    if order.customer.external_id != row.customer:
        kept.append(f"customer {order.customer.external_id}")
    if order.total != row.total:
        kept.append(f"total {order.total}")
    if order.currency != row.currency:
        kept.append(f"currency {order.currency}")
    if order.placed_at != row.placed_at:
        kept.append(f"placed_at {order.placed_at.isoformat()}")
    stored_items = [(i.item_id, i.price, i.quantity) for i in order.items.all()]
    if stored_items != [(i.item_id, i.price, i.quantity) for i in row.items]:
        kept.append("items")
    stored_payments = sorted(
        (p.amount, p.payment_method.external_id if p.payment_method_id else "") for p in order.payments.all()
    )
    if stored_payments != sorted((p.amount, p.payment_method_id) for p in row.payments):
        kept.append("payments")
    if kept:
        result.warnings.append(f"{row.label}: already imported; kept its recorded {', '.join(kept)}")
