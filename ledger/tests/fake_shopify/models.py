"""The fake Shopify's store: shops, customers, orders, line items, transactions and refunds.

Plain objects with snake_case attributes; each GraphQL field of the SDL resolves to the attribute
(or method, for fields with arguments) of the same name in snake_case (`totalPriceSet` ->
`total_price_set`). Money is Decimal; a MoneyBag is built when a field is read.
"""

import bisect
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

ZERO = Decimal("0")
# ISO 4217 currencies of the SDL's CurrencyCode whose minor unit is not 1/100.
ZERO_DECIMAL = frozenset({"JPY", "KRW"})
REFUNDABLE_KINDS = ("SALE", "CAPTURE")
GATEWAY_NAMES = {"shopify_payments": "Shopify Payments", "gift_card": "Gift card", "manual": "Manual"}


def places(currency: str) -> int:
    return 0 if currency in ZERO_DECIMAL else 2


def decimal_text(amount: Decimal) -> str:
    """Shopify's Decimal as it serializes it: no trailing zeros but one ("100.0", "29.99", "10.5")."""
    text = format(amount.normalize(), "f")
    return text if "." in text else f"{text}.0"


def money(amount: Decimal, currency: str) -> dict:
    return {"amount": decimal_text(amount), "currencyCode": currency}


def money_bag(amount: Decimal, currency: str) -> dict:
    # One currency: the fake's orders are presented in the shop's currency.
    value = money(amount, currency)
    return {"shopMoney": value, "presentmentMoney": value}


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def now_seconds() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def parse_moment(value) -> datetime:
    """A datetime, or ISO-8601 text ("2026-04-01T10:00:00Z", "2026-04-01"), as UTC, to the second."""
    if isinstance(value, datetime):
        moment = value
    else:
        text = str(value).strip()
        if len(text) == 10:
            text += "T00:00:00"
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0)


def in_bulk(info) -> bool:
    """Whether this field is resolved inside a bulk operation (connections need no `first`)."""
    return info is not None and isinstance(info.context, dict) and bool(info.context.get("bulk"))


def gid(kind: str, num: int) -> str:
    return f"gid://shopify/{kind}/{num}"


@dataclass(eq=False)
class Customer:
    num: int
    email: str | None
    first_name: str | None
    last_name: str | None
    created: datetime

    @property
    def id(self):
        return gid("Customer", self.num)

    @property
    def created_at(self):
        return iso(self.created)

    @property
    def legacy_resource_id(self):
        return str(self.num)

    updated_at = created_at

    @property
    def display_name(self):
        name = " ".join(part for part in (self.first_name, self.last_name) if part)
        return name or self.email or ""

    @property
    def default_email_address(self):
        return {"emailAddress": self.email} if self.email else None


@dataclass(eq=False)
class LineItem:
    num: int
    order: "Order"
    title: str
    sku: str | None
    quantity: int
    price: Decimal
    variant_title: str | None = None
    refunded_quantity: int = 0

    @property
    def id(self):
        return gid("LineItem", self.num)

    @property
    def name(self):
        return f"{self.title} - {self.variant_title}" if self.variant_title else self.title

    @property
    def current_quantity(self):
        return self.quantity - self.refunded_quantity

    refundable_quantity = current_quantity
    unfulfilled_quantity = current_quantity
    requires_shipping = True
    taxable = True

    @property
    def original_unit_price_set(self):
        return money_bag(self.price, self.order.currency)

    discounted_unit_price_set = original_unit_price_set

    @property
    def original_total_set(self):
        return money_bag(self.price * self.quantity, self.order.currency)

    discounted_total_set = original_total_set


@dataclass(eq=False)
class Transaction:
    num: int
    order: "Order"
    kind: str
    status: str
    gateway: str
    amount: Decimal
    parent: "Transaction | None"
    created: datetime
    error_code: str | None = None
    children: list = field(default_factory=list)

    @property
    def id(self):
        return gid("OrderTransaction", self.num)

    @property
    def formatted_gateway(self):
        return GATEWAY_NAMES.get(self.gateway, self.gateway.replace("_", " ").title())

    @property
    def created_at(self):
        return iso(self.created)

    processed_at = created_at

    test = False
    authorization_code = None

    @property
    def amount_set(self):
        return money_bag(self.amount, self.order.currency)

    @property
    def parent_transaction(self):
        return self.parent

    @property
    def refundable(self) -> bool:
        return self.kind in REFUNDABLE_KINDS and self.status == "SUCCESS"

    @property
    def voided(self) -> bool:
        return any(c.kind == "VOID" and c.status == "SUCCESS" for c in self.children)

    @property
    def remaining(self) -> Decimal:
        """What this sale or capture can still return: its amount less its successful refunds."""
        if not self.refundable or self.voided:
            return ZERO
        refunded = sum((c.amount for c in self.children if c.kind == "REFUND" and c.status == "SUCCESS"), ZERO)
        return max(self.amount - refunded, ZERO)

    @property
    def maximum_refundable_v2(self):
        return money(self.remaining, self.order.currency) if self.refundable else None


@dataclass(eq=False)
class RefundLine:
    num: int | None
    line_item: LineItem
    quantity: int
    restock_type: str = "NO_RESTOCK"

    @property
    def id(self):
        return gid("RefundLineItem", self.num) if self.num else None

    @property
    def restocked(self):
        return self.restock_type in ("RETURN", "CANCEL", "LEGACY_RESTOCK")

    @property
    def price_set(self):
        return self.line_item.original_unit_price_set

    @property
    def subtotal_set(self):
        return money_bag(self.line_item.price * self.quantity, self.line_item.order.currency)

    @property
    def total_tax_set(self):
        return money_bag(ZERO, self.line_item.order.currency)


@dataclass(eq=False)
class Refund:
    num: int
    order: "Order"
    created: datetime
    note: str | None
    txns: list
    lines: list
    shipping: Decimal = ZERO

    @property
    def id(self):
        return gid("Refund", self.num)

    @property
    def legacy_resource_id(self):
        return str(self.num)

    @property
    def created_at(self):
        return iso(self.created)

    updated_at = created_at

    @property
    def total(self) -> Decimal:
        return sum((t.amount for t in self.txns if t.status == "SUCCESS"), ZERO)

    @property
    def total_refunded_set(self):
        return money_bag(self.total, self.order.currency)

    def transactions(self, info=None, first=None, after=None, last=None, before=None, reverse=False):
        from .connections import list_connection

        return list_connection(self.txns, first=first, after=after, last=last, before=before, reverse=reverse)

    def refund_line_items(self, info=None, first=None, after=None, last=None, before=None, reverse=False):
        from .connections import list_connection

        return list_connection(self.lines, first=first, after=after, last=last, before=before, reverse=reverse)


@dataclass(eq=False)
class Order:
    num: int
    shop: "Shop"
    name: str
    email: str | None
    customer: Customer | None
    created: datetime
    updated: datetime
    lines: list = field(default_factory=list)
    txns: list = field(default_factory=list)
    refund_list: list = field(default_factory=list)
    shipping: Decimal = ZERO
    shipping_refunded: Decimal = ZERO
    cancelled: datetime | None = None
    cancel_reason: str | None = None
    note: str | None = None
    tags: list = field(default_factory=list)
    test: bool = False

    @property
    def id(self):
        return gid("Order", self.num)

    @property
    def legacy_resource_id(self):
        return str(self.num)

    @property
    def currency(self):
        return self.shop.currency

    currency_code = currency
    presentment_currency_code = currency

    @property
    def created_at(self):
        return iso(self.created)

    processed_at = created_at

    @property
    def updated_at(self):
        return iso(self.updated)

    @property
    def cancelled_at(self):
        return iso(self.cancelled)

    @property
    def closed(self):
        return self.cancelled is not None

    @property
    def closed_at(self):
        return self.cancelled_at

    @property
    def subtotal(self) -> Decimal:
        return sum((line.price * line.quantity for line in self.lines), ZERO)

    @property
    def total(self) -> Decimal:
        return self.subtotal + self.shipping

    @property
    def received(self) -> Decimal:
        return sum((t.amount for t in self.txns if t.refundable and not t.voided), ZERO)

    @property
    def refunded(self) -> Decimal:
        return sum((t.amount for t in self.txns if t.kind == "REFUND" and t.status == "SUCCESS"), ZERO)

    @property
    def refundable_transactions(self) -> list:
        return [t for t in self.txns if t.refundable and t.remaining > 0]

    @property
    def payment_gateway_names(self):
        return list(dict.fromkeys(t.gateway for t in self.txns if t.kind in REFUNDABLE_KINDS + ("AUTHORIZATION",)))

    @property
    def display_financial_status(self):
        paid = [t for t in self.txns if t.refundable]
        if paid and all(t.voided for t in paid):
            return "VOIDED"
        if not paid:
            authorized = [t for t in self.txns if t.kind == "AUTHORIZATION" and t.status == "SUCCESS"]
            if authorized:
                return "VOIDED" if all(t.voided for t in authorized) else "AUTHORIZED"
            return "PENDING"
        received, refunded = self.received, self.refunded
        if refunded > 0:
            return "REFUNDED" if refunded >= received else "PARTIALLY_REFUNDED"
        return "PAID" if received >= self.total else "PARTIALLY_PAID"

    display_fulfillment_status = "UNFULFILLED"

    def _bag(self, amount):
        return money_bag(amount, self.currency)

    @property
    def subtotal_price_set(self):
        return self._bag(self.subtotal)

    @property
    def total_shipping_price_set(self):
        return self._bag(self.shipping)

    @property
    def total_tax_set(self):
        return self._bag(ZERO)

    @property
    def total_price_set(self):
        return self._bag(self.total)

    @property
    def current_total_price_set(self):
        refunded_items = sum((line.price * line.refunded_quantity for line in self.lines), ZERO)
        return self._bag(self.total - refunded_items - self.shipping_refunded)

    @property
    def total_received_set(self):
        return self._bag(self.received)

    @property
    def total_refunded_set(self):
        return self._bag(self.refunded)

    @property
    def total_refunded_shipping_set(self):
        return self._bag(self.shipping_refunded)

    @property
    def net_payment_set(self):
        return self._bag(self.received - self.refunded)

    @property
    def total_outstanding_set(self):
        return self._bag(max(self.total - self.received, ZERO))

    @property
    def refundable(self):
        return bool(self.refundable_transactions)

    def line_items(self, info=None, first=None, after=None, last=None, before=None, reverse=False):
        from .connections import list_connection

        return list_connection(
            self.lines, first=first, after=after, last=last, before=before, reverse=reverse, bulk=in_bulk(info)
        )

    def transactions(self, info=None, first=None, capturable=None, manually_resolvable=None):
        txns = self.txns
        if capturable:
            txns = [t for t in txns if t.kind == "AUTHORIZATION" and t.status == "SUCCESS" and not t.children]
        return txns[:first] if first is not None else txns

    def refunds(self, info=None, first=None):
        return self.refund_list[:first] if first is not None else self.refund_list

    def suggested_refund(
        self,
        info=None,
        refund_line_items=None,
        refund_shipping=None,
        shipping_amount=None,
        suggest_full_refund=False,
        refund_duties=None,
    ):
        from .refunds import suggest_refund

        return suggest_refund(
            self,
            refund_line_items=refund_line_items,
            refund_shipping=refund_shipping,
            shipping_amount=shipping_amount,
            suggest_full_refund=suggest_full_refund,
        )


class Bucket:
    """Shopify's leaky bucket of query cost points for one app on one shop."""

    def __init__(self, size: float, restore_rate: float, clock):
        self.size = float(size)
        self.restore_rate = float(restore_rate)
        self.clock = clock
        self.available = float(size)
        self.stamp = clock()

    def refill(self) -> float:
        now = self.clock()
        self.available = min(self.size, self.available + (now - self.stamp) * self.restore_rate)
        self.stamp = now
        return self.available

    def status(self) -> dict:
        return {
            "maximumAvailable": self.size,
            "currentlyAvailable": int(self.available),
            "restoreRate": self.restore_rate,
        }


@dataclass(eq=False)
class Shop:
    num: int
    domain: str
    client_id: str
    client_secret: str
    name: str
    currency: str
    scopes: str
    bucket: Bucket
    email: str = "owner@example.com"
    orders: dict = field(default_factory=dict)
    # (updated, order num), kept sorted: orders(sortKey: UPDATED_AT) pages by bisecting it.
    by_updated: list = field(default_factory=list)
    customers: dict = field(default_factory=dict)
    idempotency: dict = field(default_factory=dict)
    next_order_number: int = 1001
    # Gateways a suggested refund takes first (refunds.spread); empty: oldest transaction first.
    suggestion_order: tuple = ()

    @property
    def id(self):
        return gid("Shop", self.num)

    @property
    def myshopify_domain(self):
        return self.domain

    @property
    def contact_email(self):
        return self.email

    currency_code = property(lambda self: self.currency)
    iana_timezone = "UTC"

    def index(self, order: Order):
        bisect.insort(self.by_updated, (order.updated, order.num))

    def reindex(self, order: Order, previous: datetime):
        position = bisect.bisect_left(self.by_updated, (previous, order.num))
        if position < len(self.by_updated) and self.by_updated[position] == (previous, order.num):
            del self.by_updated[position]
        self.index(order)

    def touch(self, order: Order, moment: datetime | None = None):
        """A change to the order: updatedAt moves on, at least one second, as every change shows."""
        previous = order.updated
        order.updated = max(moment or now_seconds(), previous + timedelta(seconds=1))
        self.reindex(order, previous)
