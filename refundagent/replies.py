"""The customer reply that follows the outcome: the words support may send now, one template per
outcome. `ticket_transition` writes it in the same UPDATE that moves the ticket, so the reply can
never lag behind the status. The model's own draft stays on its RefundDraft (the history).

Before finance approves, no template names an amount as granted: the neutral texts only say who
is looking at the request, and after finance asked for another amount, which amount it is now
looking at.

Finance's "request changes" sends the ticket back to the agent, whose new draft makes a new
request: the ticket then waits for finance again. Its reply keeps saying that the team reviewed
the request and is now looking at the new request's amount (not the neutral first-draft text,
which would drop what finance changed); the approval, refund, denial or payment failure that
follows speaks of that newest request.

Which outcomes a reply may be sent for (`SENDABLE`) and the key of one outcome
(`ticket_reply_key`) live here too: the ticket page reads them, support's Send
(refundagent.replies_send) writes by them and the delivery (refundagent.emails) re-checks them.
"""

from approvals.destinations import approval_request_entries
from approvals.models import ApprovalRequest
from approvals.selectors import approval_latest_for_ticket
from ledger.models import PaymentMethod, RefundStatus

from .models import Ticket

# The outcomes a reply may speak of: true and final. `refunded` only once the ledger entry
# succeeded (the ticket becomes refunded no earlier); `denied`, `closed`; a holding reply while a
# person has the ticket (`escalated`, `failed`); and `payment_failed`, the truth after a refund
# the provider refused (the correction of an earlier "we have refunded").
SENDABLE = (
    Ticket.Status.REFUNDED,
    Ticket.Status.DENIED,
    Ticket.Status.CLOSED,
    Ticket.Status.ESCALATED,
    Ticket.Status.FAILED,
    Ticket.Status.PAYMENT_FAILED,
)
# The only outcome whose reply may say that money moved.
MONEY_MOVED = (Ticket.Status.REFUNDED,)
# Outcomes tied to one refund: the key names its approval request, so a refund paid again after a
# correction is a new outcome with its own email.
PER_REQUEST = (Ticket.Status.REFUNDED, Ticket.Status.PAYMENT_FAILED)


def ticket_reply_key(*, ticket: Ticket) -> str:
    """The key of the ticket's current outcome: its status, and for a refund's outcomes the
    approval request it is about (`refunded:r17`)."""
    if ticket.status in PER_REQUEST:
        request = approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk)
        if request is not None:
            return f"{ticket.status}:r{request.pk}"
    return str(ticket.status)


def ticket_denied_by_a_person(ticket: Ticket) -> bool:
    """Finance denied the ticket's newest request (the gate's own denials make none)."""
    request = approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk)
    return request is not None and request.status == "denied" and request.decided_by_id is not None


REPLIES: dict[str, str] = {
    "approval_required": (
        "Hello, thank you for your patience. Your refund request{about} has been passed to our team for review. "
        "We will write to you again as soon as it has been decided."
    ),
    "changed": (
        "Hello, thank you for your patience. Our team has reviewed your request{about} and is now looking at a "
        "refund of {amount} {currency}. We will write to you again as soon as it has been decided."
    ),
    "reviewing_again": (
        "Hello, thank you for your patience. Our team is reviewing your request{about} again. We will write to "
        "you as soon as it has been decided."
    ),
    "approved": (
        "Hello, your refund of {amount} {currency}{about} has been approved and is being processed now. "
        "We will confirm as soon as it is complete."
    ),
    "refunded": (
        "Hello, we have refunded {amount} {currency}{about} to {destination}. Depending on your bank it can take "
        "a few days to appear on your statement."
    ),
    "denied": (
        "Hello, thank you for your patience. We have reviewed your refund request{about} and are unable to offer "
        "a refund in this case. If you have more information, please reply to this message."
    ),
    "payment_failed": (
        "Hello, your refund{about} was approved, but the payment to your account could not be completed. Our team "
        "is looking into it and will contact you shortly."
    ),
    # A refund paid in legs of which some were paid (store credit to a gift card, say) and some refused.
    "partly_paid": (
        "Hello, of your refund{about}, we have refunded {paid} {currency} to {destination}, but the payment of the "
        "remaining {refused} {currency} could not be completed. Our team is looking into it and will contact you "
        "shortly."
    ),
    "with_a_person": (
        "Hello, thank you for your message. A member of our team is looking at your request{about} and will get "
        "back to you."
    ),
}

DESTINATIONS = {"original": "your original payment method", "gift_card": "your gift card"}


def _about(ticket: Ticket) -> str:
    order = getattr(ticket, "order", None) if ticket.order_id else None
    return f" for order {order.external_id}" if order is not None else ""


def ticket_reply_compose(*, ticket: Ticket, to: str) -> str | None:
    """The reply for `ticket` moving (from its current status) to `to`, or None to keep the one it
    has (the agent is still working, or a person closes without a new reply)."""
    about = _about(ticket)
    if to in (Ticket.Status.APPROVAL_REQUIRED, Ticket.Status.DRAFT_READY):
        return _waiting_for_finance(ticket, about)
    if to == Ticket.Status.DENIED:
        return REPLIES["denied"].format(about=about)
    if to in (Ticket.Status.ESCALATED, Ticket.Status.FAILED):
        return REPLIES["with_a_person"].format(about=about)
    if to in (Ticket.Status.APPROVED, Ticket.Status.REFUNDED, Ticket.Status.PAYMENT_FAILED, Ticket.Status.QUEUED):
        request = approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk) if ticket.pk else None
        if to == Ticket.Status.QUEUED:
            # Only finance's "request changes" puts a waiting ticket back in the queue.
            if (
                ticket.status != Ticket.Status.APPROVAL_REQUIRED
                or request is None
                or (request.status != ApprovalRequest.Status.CHANGES_REQUESTED)
            ):
                return None
            if request.requested_amount_change is None:
                return REPLIES["reviewing_again"].format(about=about)
            return REPLIES["changed"].format(
                about=about, amount=request.requested_amount_change, currency=request.currency
            )
        if request is None:
            return None
        if to == Ticket.Status.PAYMENT_FAILED:
            return _payment_failed(request, about)
        if to == Ticket.Status.APPROVED:
            return REPLIES["approved"].format(about=about, amount=request.amount, currency=request.currency)
        # What the ledger recorded for the request: every leg's entry (store credit and the card).
        amounts = [entry.amount for entry in approval_request_entries(request=request)]
        amount = sum(amounts) if amounts else request.amount
        destination = DESTINATIONS.get((request.args or {}).get("destination"), DESTINATIONS["original"])
        return REPLIES["refunded"].format(
            about=about, amount=amount, currency=request.currency, destination=destination
        )
    return None


def _payment_failed(request: ApprovalRequest, about: str) -> str:
    """The provider refused the refund, or some of its legs: what was paid stands and is said,
    with where it went; what was refused is said as not completed."""
    entries = list(approval_request_entries(request=request).select_related("destination"))
    paid = [entry for entry in entries if entry.status == RefundStatus.SUCCEEDED]
    refused = [entry for entry in entries if entry.status in (RefundStatus.FAILED, RefundStatus.CANCELED)]
    if not paid or not refused:
        return REPLIES["payment_failed"].format(about=about)
    kinds = {
        "gift_card"
        if entry.destination is not None and entry.destination.kind == PaymentMethod.Kind.GIFT_CARD
        else "original"
        for entry in paid
    }
    return REPLIES["partly_paid"].format(
        about=about,
        paid=sum(entry.amount for entry in paid),
        refused=sum(entry.amount for entry in refused),
        currency=request.currency,
        destination=" and ".join(DESTINATIONS[kind] for kind in sorted(kinds)),
    )


def _waiting_for_finance(ticket: Ticket, about: str) -> str:
    """Waiting for finance: the neutral text, or, once finance has asked for changes on one of the
    ticket's requests, the amount of the newest request (the one finance now decides; it was made
    before this move, in the same transaction).

    A ticket without a reply yet has never waited for finance (every move to approval_required,
    and finance's "request changes", writes one), so no request of it can have been changed: its
    first draft needs no lookup (the agent's decision path keeps its query budget)."""
    if not ticket.pk or not ticket.customer_reply:
        return REPLIES["approval_required"].format(about=about)
    requests = list(
        ApprovalRequest.objects.filter(tenant_id=ticket.tenant_id, ticket_ref=ticket.pk)
        .order_by("-created_at", "-id")
        .values_list("status", "amount", "currency")
    )
    changed = any(status == ApprovalRequest.Status.CHANGES_REQUESTED for status, _, _ in requests)
    if not changed or requests[0][0] != ApprovalRequest.Status.PENDING:
        return REPLIES["approval_required"].format(about=about)
    _, amount, currency = requests[0]
    return REPLIES["changed"].format(about=about, amount=amount, currency=currency)
