"""Writes to the ledger. `ledger_refund_issue` is the only function in the product that moves money."""

import hashlib
import json
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import IntegrityError, transaction

from .exceptions import IdempotencyConflict, InvalidInput, RefundRefused
from .models import Order, PaymentMethod, RefundEntry, RefundEntryItem, RefundRevision
from .selectors import order_refund_position
from .telemetry import traced

CENT = Decimal("0.01")


def money(value) -> Decimal:
    """Parse an amount (str, int or Decimal; never float) into a 2-place Decimal."""
    if isinstance(value, float):
        raise InvalidInput("Amounts must be decimal strings, not floats.", code="float_amount")
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidInput(f"{value!r} is not an amount.", code="bad_amount") from None
    if not amount.is_finite():
        raise InvalidInput(f"{value!r} is not an amount.", code="bad_amount")
    if amount != amount.quantize(CENT):
        raise InvalidInput(f"{value} has more than two decimal places.", code="bad_amount")
    return amount.quantize(CENT)


def canonical_hash(args: dict) -> str:
    """SHA-256 of a JSON object with sorted keys and no whitespace: the same args, the same hash."""
    return hashlib.sha256(json.dumps(args, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _entry_attributes(entry: RefundEntry) -> dict:
    return {"refund.ledger.entry_id": entry.pk, "refund.ledger.amount": entry.amount,
            "refund.ledger.currency": entry.currency, "refund.ledger.source": entry.source,
            "refund.approval.id": entry.approval_ref}


# The ledger write's span: a refusal (RefundRefused, IdempotencyConflict) marks it failed.
@traced("refund.ledger.refund_issue", result=_entry_attributes)
def ledger_refund_issue(
    *,
    order: Order,
    amount,
    currency: str,
    idempotency_key: str,
    destination: PaymentMethod | None = None,
    destination_kind: str = "original",
    item_ids: list[str] | None = None,
    source: str = RefundEntry.Source.APPROVAL,
    approval_ref: str = "",
    reason: str = "",
    created_by=None,
) -> RefundEntry:
    """Record one refund, exactly once.

    The same key with the same arguments returns the entry already written and writes
    nothing; the same key with other arguments raises IdempotencyConflict. The order row is
    locked first, so the cap (order total minus what is already refunded, and for item
    refunds the price of the items not yet refunded) is computed under the lock.
    """
    amount = money(amount)
    item_ids = list(item_ids or [])
    if not idempotency_key:
        raise InvalidInput("An idempotency key is required.", code="idempotency_key_required")
    request_hash = canonical_hash(
        {
            "order": order.pk,
            "amount": str(amount),
            "currency": currency,
            "destination": destination.pk if destination else None,
            "destination_kind": destination_kind,
            "items": sorted(item_ids),
            "source": str(source),
            "approval": str(approval_ref),
        }
    )
    try:
        with transaction.atomic():
            # Lock order: the order row first, always (see docs/ledger.md).
            locked = Order.objects.select_for_update().get(pk=order.pk)
            existing = RefundEntry.objects.filter(idempotency_key=idempotency_key).first()
            if existing is not None:
                return _replay(existing, request_hash)
            lines = _check_refund(locked, amount, currency, destination, item_ids)
            entry = RefundEntry.objects.create(
                tenant_id=locked.tenant_id,
                order=locked,
                amount=amount,
                currency=currency,
                destination=destination,
                destination_kind=destination_kind,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
                source=source,
                approval_ref=str(approval_ref),
                reason=reason,
                created_by=created_by,
            )
            RefundEntryItem.objects.bulk_create(
                RefundEntryItem(entry=entry, order_item_id=item_pk, quantity=quantity, amount=value)
                for item_pk, (quantity, value) in lines.items()
            )
            return entry
    except IntegrityError:
        # Another transaction inserted the same key between our check and insert (possible
        # only where the order lock is not held, e.g. a key reused across orders).
        existing = RefundEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return _replay(existing, request_hash)


def _replay(existing: RefundEntry, request_hash: str) -> RefundEntry:
    if existing.request_hash != request_hash:
        raise IdempotencyConflict(
            f"Idempotency key {existing.idempotency_key} was already used for refund #{existing.pk} "
            "with different arguments.",
            details={"refund_id": existing.pk},
        )
    return existing


def _check_refund(order: Order, amount: Decimal, currency: str, destination, item_ids) -> dict[int, tuple[int, Decimal]]:
    """Refuse what the ledger must never hold. Returns the order lines an item refund covers."""
    if amount <= 0:
        raise RefundRefused(f"A refund must be positive, got {amount}.", code="refund_not_positive")
    if currency != order.currency:
        raise RefundRefused(
            f"Refund currency {currency} differs from order currency {order.currency}.", code="currency_mismatch"
        )
    if destination is not None and destination.customer_id != order.customer_id:
        raise RefundRefused("The refund destination belongs to another customer.", code="foreign_destination")
    position = order_refund_position(order)
    if amount > position.refundable:
        raise RefundRefused(
            f"Refund of {amount} {currency} exceeds what is still refundable on {order.external_id} "
            f"({position.refundable} of {position.total}).",
            code="refund_exceeds_refundable",
            details={"refundable": str(position.refundable)},
        )
    if not item_ids:
        return {}
    value, unmatched = position.items_value(item_ids)
    if unmatched:
        raise RefundRefused(
            f"Items {', '.join(unmatched)} are not on {order.external_id} or were already refunded.",
            code="item_not_refundable",
        )
    if amount > value:
        raise RefundRefused(
            f"Refund of {amount} {currency} exceeds the price of the items ({value}).", code="refund_exceeds_items"
        )
    # Allocate each named unit to an order line that still has unrefunded units.
    items = {item.line_no: item for item in order.items.all()}
    remaining = {line.line_no: line.remaining_quantity for line in position.lines}
    allocated: dict[int, tuple[int, Decimal]] = {}
    for item_id in item_ids:
        line_no = next(n for n, item in items.items() if item.item_id == item_id and remaining[n] > 0)
        remaining[line_no] -= 1
        item = items[line_no]
        quantity, value = allocated.get(item.pk, (0, Decimal("0.00")))
        allocated[item.pk] = (quantity + 1, value + item.price)
    return allocated


def ledger_refund_correct(*, entry: RefundEntry, new_amount, reason: str, corrected_by=None) -> RefundRevision:
    """Correct a refund's amount by appending a revision; the old amount stays in the ledger."""
    new_amount = money(new_amount)
    if not reason.strip():
        raise InvalidInput("A correction needs a reason.", code="reason_required")
    if new_amount < 0:
        raise RefundRefused("A corrected amount cannot be negative.", code="refund_not_positive")
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=entry.order_id)
        position = order_refund_position(order)
        last = entry.revisions.order_by("-id").first()
        old_amount = last.new_amount if last else entry.amount
        if position.refunded_total - old_amount + new_amount > order.total:
            raise RefundRefused(
                f"Correcting refund #{entry.pk} to {new_amount} would refund more than the order total {order.total}.",
                code="refund_exceeds_refundable",
            )
        return RefundRevision.objects.create(
            entry=entry, old_amount=old_amount, new_amount=new_amount, reason=reason, created_by=corrected_by
        )


def currency_check(currency: str) -> str:
    if currency not in settings.LEDGER_CURRENCIES:
        raise InvalidInput(f"Unknown currency {currency!r}.", code="unknown_currency")
    return currency
