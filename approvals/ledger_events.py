"""The approvals layer's receivers of the ledger's events, made durable.

The ledger sends `refund_entry_status_changed` (the provider answered about a refund: a payout,
a webhook, the reconciliation) and `order_dispute_changed` inside the transaction that records
them, under the order's lock. They are plain signals, so each receiver here only finds the
approval requests concerned and announces the event again as an approval event of this module
(an ApprovalEvent, approvals.signals). What the approvals layer does about it is connected to
that event, so it is delivered as every approval event is (approvals.followups): in its own
savepoint inside the ledger's transaction; if it raises, its writes roll back, the ledger's
record stands, and the event is kept in the same transaction and delivered again by the sweep,
in order per ticket, until it works. Nothing is dropped.

- `failed` / `canceled`: the request becomes `payment_failed` (approval_payment_failed,
  approvals.services.execution) with the provider's reason in its verification record, and
  `refund_payment_failed` tells the ticket (which goes back to finance as `payment_failed`). The
  entry no longer counts, so the amount is refundable again. Finance files it again with
  approvals.services.refile.
- `succeeded` (a webhook, the reconciliation or a person's record of a payout by hand learned it
  after the payout said `pending`): the request's settlement is published after commit
  (`approval_settle_task`, approvals.outbox); the provider is never called inside the ledger's
  transaction. Settling runs the execution again, which is more than the verification: its replay
  announces the entries again (`refund_executed`, replayed: the ticket's trace records each
  payout made by hand and who recorded it, refundagent.ticket_events), pays a leg still pending
  under its own key, and verifies once every leg succeeded. Should the broker lose it, the
  request is still `approved` and the outbox sweep publishes its execution again.
- a dispute opened on the order: each of its requests waiting for a decision, or approved but not
  yet written to the ledger, is held (approval_request_hold_for_dispute, approvals.services.invalidation).
"""

from django.dispatch import receiver

from ledger.models import RefundEntry, RefundStatus
from ledger.outbox import publish_on_commit
from ledger.services import REFUSED_STATUSES
from ledger.signals import order_dispute_changed, refund_entry_status_changed

from .destinations import approval_request_entries, approval_request_of_entry
from .locks import order_lock
from .models import ApprovalRequest
from .outbox import approval_settlement_publish
from .services.execution import approval_payment_failed
from .services.invalidation import approval_request_hold_for_dispute
from .signals import ApprovalEvent

# request=ApprovalRequest, entry=ledger.RefundEntry, to_status=str, reason=str: the provider's
# answer about one of the request's refunds, as the ledger recorded it.
approval_refund_answered = ApprovalEvent("approval_refund_answered")
# request=ApprovalRequest (waiting for a decision, or approved and not in the ledger yet),
# dispute=ledger.Dispute (open): a dispute opened on the request's order.
approval_order_disputed = ApprovalEvent("approval_order_disputed")


@receiver(refund_entry_status_changed, dispatch_uid="approvals.on_refund_entry_status_changed")
def on_refund_entry_status_changed(
    sender, entry: RefundEntry, from_status: str, to_status: str, reason: str = "", **kwargs
):
    # Only a read here; what follows is delivered durably. A read that fails is the database
    # failing, and the ledger's transaction with it (its caller retries the record).
    request = approval_request_of_entry(entry=entry)
    if request is not None:
        approval_refund_answered.send(
            sender=ApprovalRequest, request=request, entry=entry, to_status=to_status, reason=reason
        )


@receiver(approval_refund_answered, dispatch_uid="approvals.approval_follow_refund_status")
def on_approval_refund_answered(sender, request: ApprovalRequest, entry: RefundEntry, to_status: str, **kwargs):
    approval_follow_refund_status(entry=entry, to_status=to_status, reason=kwargs.get("reason") or "")


def approval_follow_refund_status(*, entry: RefundEntry, to_status: str, reason: str = "") -> ApprovalRequest | None:
    """The request whose refund the provider answered about follows it (see the module doc).
    Under the order's lock: the ledger's transaction holds it; a delivery by the sweep takes it."""
    request = approval_request_of_entry(entry=entry)
    if request is None:
        return None
    order_lock(order_id=request.order_id)
    request.refresh_from_db()
    if to_status in REFUSED_STATUSES:
        return approval_payment_failed(request=request, entry=entry, reason=reason)
    if to_status == RefundStatus.SUCCEEDED and request.status == ApprovalRequest.Status.APPROVED:
        # The replay, not only the verification: see the module doc.
        publish_on_commit(approval_settlement_publish, request_id=request.pk)
    return request


@receiver(order_dispute_changed, dispatch_uid="approvals.approval_hold_on_dispute")
def on_order_dispute_changed(sender, dispute, order, **kwargs):
    # Inside the ledger's transaction, under the order's lock: only a read here, the hold of each
    # request is delivered durably.
    if not dispute.is_open:
        return
    for request in approval_requests_to_hold(order=order):
        approval_order_disputed.send(sender=ApprovalRequest, request=request, dispute=dispute)


@receiver(approval_order_disputed, dispatch_uid="approvals.approval_hold_for_dispute")
def on_approval_order_disputed(sender, request: ApprovalRequest, dispute, **kwargs):
    approval_request_hold_for_dispute(request=request, dispute=dispute)


def approval_requests_to_hold(*, order) -> list[ApprovalRequest]:
    """The order's requests a dispute holds: waiting for a decision, or approved but not yet
    written to the ledger (a refund already written is the provider's to answer)."""
    waiting = ApprovalRequest.objects.filter(
        order_id=order.pk,
        status__in=(ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED),
        ledger_entry__isnull=True,
    ).order_by("id")
    return [request for request in waiting if not approval_request_entries(request=request).exists()]
