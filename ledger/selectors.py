"""Tenant-scoped reads of the ledger. Views, tools and services start here, never from
`Model.objects` with a hand-written tenant filter."""

from dataclasses import dataclass, field
from decimal import Decimal

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import DecimalField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from .exceptions import Forbidden, NotFound
from .models import (
    COUNTING_STATUSES,
    Customer,
    Order,
    OrderItem,
    ReconciliationFinding,
    RefundEntry,
    RefundEntryItem,
    RefundRevision,
    Tenant,
)

ZERO = Decimal("0.00")


class _MoneyField(DecimalField):
    """A 2-place decimal output field that also quantizes on SQLite, whose COALESCE drops the scale."""

    def from_db_value(self, value, expression, connection):
        return None if value is None else Decimal(value).quantize(Decimal("0.01"))


MONEY_FIELD = _MoneyField(max_digits=12, decimal_places=2)
ROLES = ("support", "finance")


def tenant_for_user(user: AbstractBaseUser) -> Tenant:
    """The caller's tenant. A user without one may reach nothing."""
    membership = getattr(user, "membership", None) if user.is_authenticated else None
    if membership is None:
        raise Forbidden("This user belongs to no tenant.", code="no_tenant")
    return membership.tenant


def user_roles(user: AbstractBaseUser) -> set[str]:
    # Cached on the instance: one query per request however often roles are asked for.
    if not hasattr(user, "_refundagent_roles"):
        user._refundagent_roles = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
    return user._refundagent_roles


def user_require_role(user: AbstractBaseUser, *roles: str) -> None:
    if not user_roles(user) & set(roles):
        raise Forbidden(f"This needs the {' or '.join(roles)} role.", code="role_required")


def customer_get(*, tenant: Tenant, external_id: str) -> Customer:
    try:
        return Customer.objects.for_tenant(tenant).get(external_id=external_id)
    except Customer.DoesNotExist:
        raise NotFound(f"Customer {external_id} not found.") from None


def order_get(*, tenant: Tenant, external_id: str) -> Order:
    try:
        return Order.objects.for_tenant(tenant).select_related("customer").get(external_id=external_id)
    except Order.DoesNotExist:
        raise NotFound(f"Order {external_id} not found.") from None


def refund_entries_with_effective_amount(queryset=None):
    """Refund entries annotated with `effective_amount`: the newest revision's amount, else the original."""
    latest_revision = RefundRevision.objects.filter(entry=OuterRef("pk")).order_by("-id").values("new_amount")[:1]
    queryset = RefundEntry.objects.all() if queryset is None else queryset
    return queryset.annotate(
        effective_amount=Coalesce(Subquery(latest_revision), "amount", output_field=MONEY_FIELD)
    )


def order_refunded_total(order: Order) -> Decimal:
    """What counts against the order: pending, succeeded and external entries (failed and
    canceled refunds moved no money)."""
    total = refund_entries_with_effective_amount(RefundEntry.objects.filter(order=order).counting()).aggregate(
        s=Sum("effective_amount")
    )["s"]
    return (total or ZERO).quantize(Decimal("0.01"))


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

    def items_value(self, item_ids: list[str]) -> tuple[Decimal, list[str]]:
        """The price of the named items not yet refunded (an id may repeat: one unit each), and
        the ids that could not be matched to an unrefunded unit."""
        remaining = {line.line_no: line.remaining_quantity for line in self.lines}
        value, unmatched = ZERO, []
        for item_id in item_ids:
            line = next((ln for ln in self.lines if ln.item_id == item_id and remaining[ln.line_no] > 0), None)
            if line is None:
                unmatched.append(item_id)
                continue
            remaining[line.line_no] -= 1
            value += line.price
        return value, unmatched


def order_refund_position(order: Order) -> RefundPosition:
    # Each line with the units already refunded, in one query (two with the refunded total).
    refunded_units = RefundEntryItem.objects.filter(
        order_item=OuterRef("pk"), entry__status__in=COUNTING_STATUSES
    ).values("order_item").annotate(
        q=Sum("quantity")
    ).values("q")
    lines = [
        LinePosition(
            line_no=item.line_no,
            item_id=item.item_id,
            name=item.name,
            price=item.price,
            quantity=item.quantity,
            refunded_quantity=item.refunded_units,
        )
        for item in OrderItem.objects.filter(order=order)
        .annotate(refunded_units=Coalesce(Subquery(refunded_units), 0))
        .order_by("line_no")
    ]
    return RefundPosition(
        order_id=order.pk,
        external_id=order.external_id,
        total=order.total,
        currency=order.currency,
        refunded_total=order_refunded_total(order),
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
