from ninja import Router

from .schemas import OrderLedgerOut, RefundPaidIn, RefundPaidOut
from .selectors import order_get, order_ledger, order_refund_position
from .services import ledger_refund_record_paid
from .tenancy import tenant_for_user, user_require_access, user_require_role

router = Router(tags=["ledger"])
refunds_router = Router(tags=["ledger"])


@refunds_router.post("/{int:refund_id}/paid", response=RefundPaidOut)
def refund_paid(request, refund_id: int, payload: RefundPaidIn):
    """Finance records that they paid a refund by hand (the `manual` gateway): the entry becomes
    `succeeded` and its ticket `refunded`. 409 when the entry is not waiting for a manual payout."""
    user_require_role(request.user, "finance")
    entry = ledger_refund_record_paid(
        entry_id=refund_id, tenant=tenant_for_user(request.user), reference=payload.reference, user=request.user
    )
    event = entry.events.order_by("-id").first()
    return {
        "refund_id": entry.pk,
        "status": entry.status,
        "provider_ref": entry.provider_ref or None,
        "amount": entry.amount,
        "currency": entry.currency,
        "recorded_by": request.user.get_username(),
        "recorded_at": event.created_at,
    }


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
