"""The ledger's lock order, in one place: every write that touches an order's refunds locks the
order row first (what is still refundable on it is decided under this lock), then what it writes
(an entry, a dispute, a gift card). The approvals layer takes the same lock through
approvals.locks. Call it inside `transaction.atomic()`."""

from .models import Order


def order_lock(*, order_id: int) -> Order:
    """Lock 1: the order row, returned as it is now."""
    return Order.objects.select_for_update().get(pk=order_id)
