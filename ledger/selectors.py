"""Tenant-scoped reads of the ledger. Views, tools and services start here, never from
`Model.objects` with a hand-written tenant filter."""

import functools
from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import DecimalField, Exists, F, Func, IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from .exceptions import NotFound
from .models import (
    COUNTING_STATUSES,
    Customer,
    Dispute,
    Order,
    OrderItem,
    Payment,
    PaymentMethod,
    ReconciliationFinding,
    RefundEntry,
    RefundEntryItem,
    RefundRevision,
    Tenant,
)
from .money import CENT, ZERO

# The output field of an expression over 2-place amounts (PostgreSQL keeps their scale).
MONEY_FIELD = DecimalField(max_digits=12, decimal_places=2)


def customer_get(*, tenant: Tenant, external_id: str) -> Customer:
    try:
        return Customer.objects.for_tenant(tenant).get(external_id=external_id)
    except Customer.DoesNotExist:
        raise NotFound(f"Customer {external_id} not found.") from None


def order_get(*, tenant: Tenant, external_id: str) -> Order:
    """One order of the tenant, with its customer (every filing reads both)."""
    try:
        return Order.objects.for_tenant(tenant).select_related("customer").get(external_id=external_id)
    except Order.DoesNotExist:
        raise NotFound(f"Order {external_id} not found.") from None


def refund_entries_with_effective_amount(queryset=None):
    """Refund entries annotated with `effective_amount`: the newest revision's amount, else the original."""
    latest_revision = RefundRevision.objects.filter(entry=OuterRef("pk")).order_by("-id").values("new_amount")[:1]
    queryset = RefundEntry.objects.all() if queryset is None else queryset
    return queryset.annotate(effective_amount=Coalesce(Subquery(latest_revision), "amount", output_field=MONEY_FIELD))


def store_credit_movements(*, method_ids) -> dict[int, Decimal]:
    """The store credit the ledger itself issued to each gift card (counting entries, at their
    effective amount), by payment method id. An imported refund is not a movement: the shop's
    balance already holds it."""
    rows = (
        refund_entries_with_effective_amount(
            RefundEntry.objects.counting()
            .filter(destination_id__in=method_ids, gateway=RefundEntry.Gateway.STORE_CREDIT)
            .exclude(source=RefundEntry.Source.IMPORT)
        )
        .values("destination_id")
        .annotate(moved=Sum("effective_amount"))
    )
    return {row["destination_id"]: row["moved"].quantize(CENT) for row in rows}


def gift_card_balance(*, method: PaymentMethod) -> Decimal | None:
    """A gift card's balance as the ledger derives it: its opening balance plus the store credit
    the ledger issued to it (as hordak derives an account's balance from its legs). None when
    the shop never gave a balance and the ledger never moved it."""
    moved = store_credit_movements(method_ids=[method.pk]).get(method.pk)
    if moved is None:
        return method.opening_balance
    return ((method.opening_balance or ZERO) + moved).quantize(CENT)


def order_refunded_total(order: Order) -> Decimal:
    """What counts against the order: pending, succeeded and external entries (failed and
    canceled refunds moved no money)."""
    total = refund_entries_with_effective_amount(RefundEntry.objects.filter(order=order).counting()).aggregate(
        s=Sum("effective_amount")
    )["s"]
    return (total or ZERO).quantize(CENT)


@dataclass(frozen=True)
class LinePosition:
    line_no: int
    item_id: str
    name: str
    price: Decimal
    quantity: int
    refunded_quantity: int

    @property
    def remaining_quantity(self) -> int:
        return self.quantity - self.refunded_quantity


@dataclass(frozen=True)
class RefundPosition:
    """What an order is worth and what is still refundable, derived from the ledger."""

    order_id: int
    external_id: str
    total: Decimal
    currency: str
    refunded_total: Decimal
    lines: list[LinePosition] = field(default_factory=list)

    @property
    def refundable(self) -> Decimal:
        return max(self.total - self.refunded_total, ZERO)

    def items_match(self, item_ids: list[str]) -> "ItemsMatch":
        return items_match(self.lines, item_ids)


@dataclass(frozen=True)
class ItemsMatch:
    """Named item ids matched to the order lines' unrefunded units (see items_match)."""

    value: Decimal  # the price of the matched units
    units: dict[int, int]  # line_no -> units matched on that line, in the order first matched
    unmatched: list[str]  # the ids with no unrefunded unit left for them, as named
    not_on_order: list[str]  # of those, the ids on no line at all
    # Of those, the ids named more times than the order has units of them (whatever the ledger
    # says): {item id: (units named, units on the order)}. Only the rest were already refunded.
    over_quantity: dict[str, tuple[int, int]] = field(default_factory=dict)


def items_match(lines: list[LinePosition], item_ids: list[str]) -> ItemsMatch:
    """The one rule for matching item ids to order lines. An id may repeat: one unit each, taken
    from the first line (by line order) with the id and an unrefunded unit left; an id with none
    left is unmatched."""
    remaining = {line.line_no: line.remaining_quantity for line in lines}
    on_order = {line.item_id for line in lines}
    value, units, unmatched = ZERO, {}, []
    for item_id in item_ids:
        line = next((ln for ln in lines if ln.item_id == item_id and remaining[ln.line_no] > 0), None)
        if line is None:
            unmatched.append(item_id)
            continue
        remaining[line.line_no] -= 1
        units[line.line_no] = units.get(line.line_no, 0) + 1
        value += line.price
    named: dict[str, int] = {}
    for item_id in item_ids:
        named[item_id] = named.get(item_id, 0) + 1
    ordered: dict[str, int] = {}
    for line in lines:
        ordered[line.item_id] = ordered.get(line.item_id, 0) + line.quantity
    return ItemsMatch(
        value=value,
        units=units,
        unmatched=unmatched,
        not_on_order=[item_id for item_id in unmatched if item_id not in on_order],
        over_quantity={
            item_id: (named[item_id], ordered[item_id])
            for item_id in dict.fromkeys(unmatched)
            if item_id in on_order and named[item_id] > ordered[item_id]
        },
    )


def sum_subquery(queryset, name: str, output_field) -> Subquery:
    """SUM(`name`) over all of `queryset`'s rows as a subquery of one value, NULL without rows,
    as a GROUP BY on the one outer key gave: without the grouping, the subquery costs the
    compiler less at every read (the reads below, and the decision record's exposure, compile
    it each time)."""
    total = Func(F(name), function="SUM", output_field=output_field)
    return Subquery(queryset.order_by().values(total=total), output_field=output_field)


@functools.cache
def _order_position_rows():
    """Each line with the units already refunded and the order's refunded total, in one query.
    Only entries that count (pending, succeeded, external) are counted. Built once per process
    and filtered per order: the agent reads a position at every order lookup and again at its
    decision, and building the subqueries costs more than running them."""
    refunded_units = RefundEntryItem.objects.filter(order_item=OuterRef("pk"), entry__status__in=COUNTING_STATUSES)
    refunded_total = refund_entries_with_effective_amount(
        RefundEntry.objects.filter(order=OuterRef("order_id")).counting()
    )
    return (
        OrderItem.objects.annotate(
            refunded_units=Coalesce(sum_subquery(refunded_units, "quantity", IntegerField()), 0),
            order_refunded=Coalesce(
                sum_subquery(refunded_total, "effective_amount", MONEY_FIELD), ZERO, output_field=MONEY_FIELD
            ),
        )
        .order_by("line_no")
        .values("line_no", "item_id", "name", "price", "quantity", "refunded_units", "order_refunded")
    )


def order_refund_position(order: Order) -> RefundPosition:
    items = list(_order_position_rows().filter(order_id=order.pk))
    lines = [
        LinePosition(
            line_no=item["line_no"],
            item_id=item["item_id"],
            name=item["name"],
            price=item["price"],
            quantity=item["quantity"],
            refunded_quantity=item["refunded_units"],
        )
        for item in items
    ]
    return RefundPosition(
        order_id=order.pk,
        external_id=order.external_id,
        total=order.total,
        currency=order.currency,
        # An order without lines has no row to carry the total: ask for it alone.
        refunded_total=items[0]["order_refunded"].quantize(CENT) if items else order_refunded_total(order),
        lines=lines,
    )


def order_ledger(order: Order):
    """The order's refund entries with their revisions and effective amounts, oldest first."""
    return refund_entries_with_effective_amount(
        RefundEntry.objects.filter(order=order).prefetch_related("revisions", "items__order_item")
    ).order_by("id")


def reconciliation_findings_unresolved(*, tenant: Tenant | None = None):
    """Findings finance has not resolved yet (for the finance queue's count, and the command)."""
    findings = ReconciliationFinding.objects.unresolved()
    return findings if tenant is None else findings.filter(tenant=tenant)


@dataclass(frozen=True)
class PaymentReturnable:
    """One payment of an order (a tender) and what it can still return, from the ledger."""

    payment_id: int
    method_id: int | None  # the PaymentMethod's pk, None when the shop recorded none
    method: str | None  # its external id
    kind: str  # card, paypal, gift_card
    payment_ref: str  # pi_…/ch_… for a provider payment, "" for a gift card
    paid: Decimal
    returnable: Decimal
    # A dispute the customer's bank still holds against this payment (order_open_disputes says which).
    disputed: bool = False
    # The method itself, as read with the payment (None when the shop recorded none, or when a
    # replay rebuilt the payment from its record): the decision's original method comes from it.
    payment_method: PaymentMethod | None = field(default=None, repr=False, compare=False)


@functools.cache
def _order_payments_rows():
    """The payments of an order (filtered per order) with their method, whether a dispute is open
    on each, and the counting refunds made to each one's method and to no method, in one query.
    Built once per process, as `_order_position_rows`: the gate reads it at every decision."""
    open_disputes = Dispute.objects.filter(payment=OuterRef("pk")).exclude(status__in=Dispute.SETTLED_FOR_THE_SHOP)
    order_refunds = RefundEntry.objects.filter(order_id=OuterRef("order_id")).counting()

    def refunded(entries) -> Subquery:
        return sum_subquery(refund_entries_with_effective_amount(entries), "effective_amount", MONEY_FIELD)

    # A refund that names its payment (a tender leg) is that payment's; one written before legs
    # named payments is counted by its method.
    by_method = order_refunds.filter(payment__isnull=True)
    return (
        Payment.objects.select_related("payment_method")
        .annotate(
            disputed=Exists(open_disputes),
            returned_to_payment=refunded(order_refunds.filter(payment_id=OuterRef("pk"))),
            returned_to_method=refunded(by_method.filter(destination_id=OuterRef("payment_method_id"))),
            returned_unnamed=refunded(by_method.filter(destination__isnull=True)),
        )
        .order_by("id")
    )


def order_payments_returnable(order: Order) -> list[PaymentReturnable]:
    """The order's payments in the order they were made, each with what it can still return: what
    it paid minus the counting refunds made to it. A refund names its payment (a tender leg);
    one written before legs did is counted by its method, the earliest payment made with that
    method first, and one recorded without a method is the first payment's (as it was paid out
    before methods were named)."""
    payments = list(_order_payments_rows().filter(order_id=order.pk))
    # What went back to each payment's method (None: to no method), as the query summed it.
    returned: dict[int | None, Decimal] = {}
    if payments and payments[0].returned_unnamed is not None:
        returned[None] = payments[0].returned_unnamed
    for payment in payments:
        if payment.payment_method_id is not None and payment.returned_to_method is not None:
            returned[payment.payment_method_id] = payment.returned_to_method
    if payments and None in returned and payments[0].payment_method_id is not None:
        returned[payments[0].payment_method_id] = returned.get(payments[0].payment_method_id, ZERO) + returned[None]
    legs = []
    for payment in payments:
        method_id = payment.payment_method_id
        # Its own refunds first; then payments made with one method share what it got back
        # without naming a payment, the earliest first.
        own = min(payment.returned_to_payment or ZERO, payment.amount)
        taken = own + min(returned.get(method_id, ZERO), payment.amount - own)
        returned[method_id] = returned.get(method_id, ZERO) - (taken - own)
        legs.append(
            PaymentReturnable(
                payment_id=payment.pk,
                method_id=method_id,
                method=payment.payment_method.external_id if payment.payment_method_id else None,
                kind=payment.payment_method.kind if payment.payment_method_id else payment.method,
                payment_ref=payment.payment_ref,
                paid=payment.amount,
                returnable=(payment.amount - taken).quantize(CENT),
                disputed=payment.disputed,
                payment_method=payment.payment_method,
            )
        )
    return legs


def order_open_disputes(order: Order) -> list[Dispute]:
    """The order's disputes the customer's bank still holds against the shop (neither won nor a
    closed inquiry), newest first: while there is one, a refund is a person's call."""
    disputes = Dispute.objects.filter(order=order).exclude(status__in=Dispute.SETTLED_FOR_THE_SHOP)
    return list(disputes.select_related("payment").order_by("-id"))
