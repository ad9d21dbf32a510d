from ninja import Router

from .schemas import OrderLedgerOut
from .selectors import order_get, order_ledger, order_refund_position
from .tenancy import tenant_for_user, user_require_access

router = Router(tags=["ledger"])


@router.get("/{order}/ledger", response=OrderLedgerOut)
def order_ledger_get(request, order: str):
    """An order's refunds as the ledger records them (another tenant's order answers 404)."""
    user_require_access(request.user, "tickets.read")
    found = order_get(tenant=tenant_for_user(request.user), external_id=order)
    return order_ledger_serialize(found)


def order_ledger_serialize(order) -> dict:
    position = order_refund_position(order)
    entries = []
    for entry in order_ledger(order):
        revisions = list(entry.revisions.all())
        entries.append(
            {
                "refund_id": entry.pk,
                "amount": entry.effective_amount,
                "original_amount": entry.amount,
                "currency": entry.currency,
                # docs/api.md (Payments): pending, succeeded, failed, canceled or external.
                "status": entry.status,
                "corrected": bool(revisions),
                "provider_ref": entry.provider_ref or None,
                "needs_review": entry.needs_review,
                "idempotency_key": entry.idempotency_key,
                "approval": entry.approval_ref or None,
                "destination": str(entry.destination) if entry.destination_id else entry.destination_kind or None,
                "items": [ri.order_item.item_id for ri in entry.items.all() for _ in range(ri.quantity)],
                "source": entry.source,
                "created_at": entry.created_at,
                "revisions": [
                    {
                        "old_amount": r.old_amount,
                        "new_amount": r.new_amount,
                        "reason": r.reason,
                        "created_by": r.created_by.get_username() if r.created_by_id else None,
                        "created_at": r.created_at,
                    }
                    for r in revisions
                ],
            }
        )
    return {
        "order": order.external_id,
        "customer": order.customer.external_id,
        "status": order.status,
        "total": position.total,
        "currency": position.currency,
        "refunded_total": position.refunded_total,
        "refundable": position.refundable,
        "items": [
            {
                "id": line.item_id,
                "name": line.name,
                "price": line.price,
                "quantity": line.quantity,
                "refunded_quantity": line.refunded_quantity,
            }
            for line in position.lines
        ],
        "entries": entries,
    }
