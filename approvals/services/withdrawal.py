"""Withdrawing the pending approval requests of a ticket that a person closes or escalates, so
finance can no longer approve a refund the ticket no longer asks for. approvals never imports
the agent app: the ticket services call this with the ticket's opaque reference."""

from datetime import datetime

from django.utils import timezone

from ..exceptions import ApprovalConflict
from ..locks import approval_request_lock, order_lock
from ..models import ApprovalRequest
from ..request_state import approval_request_transition


def approval_requests_withdraw(
    *, tenant, ticket_ref: int, reason: str, actor=None, now: datetime | None = None
) -> list[ApprovalRequest]:
    """Mark the ticket's pending requests `withdrawn`. Call it inside the caller's transaction,
    before the caller moves the ticket: each request is taken under the lock order (its order,
    then the request), so a decision racing this one either sees `withdrawn` (409) or has
    approved first, and then this finds nothing pending and the caller's ticket move is refused
    by the ticket's own compare-and-set. Returns the requests withdrawn.

    A request of the ticket that finance approved and that is being executed cannot be
    withdrawn: ApprovalConflict (409), so the caller's ticket move is refused rather than
    leaving money moving under a closed or escalated ticket."""
    now = now or timezone.now()
    open_requests = ApprovalRequest.objects.for_tenant(tenant).filter(
        ticket_ref=ticket_ref, status__in=[ApprovalRequest.Status.PENDING, ApprovalRequest.Status.APPROVED]
    )
    rows = list(open_requests.order_by("order_id", "pk").values_list("pk", "order_id"))
    for order_id in sorted({order_id for _pk, order_id in rows}):
        order_lock(order_id=order_id)
    # Under the order locks nothing is decided meanwhile: read the statuses again.
    executing = open_requests.filter(status=ApprovalRequest.Status.APPROVED).values_list("pk", flat=True).first()
    if executing is not None:
        raise ApprovalConflict(
            f"Approval request #{executing} of this ticket was approved and is being executed; wait for its outcome.",
            code="approval_executing",
        )
    withdrawn = []
    for request_id, order_id in rows:
        _order, request = approval_request_lock(order_id=order_id, request_id=request_id)
        moved = approval_request_transition(
            request=request,
            to=ApprovalRequest.Status.WITHDRAWN,
            decided_by=actor,
            decided_at=now,
            updated_at=now,
            decision_note=f"Withdrawn: {reason}"[:4000],
        )
        if moved:
            request.refresh_from_db()
            withdrawn.append(request)
    return withdrawn
