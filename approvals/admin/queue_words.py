"""The review queue's words and small reads, shared by its list, its detail page and its views:
status badges and words, decision labels, destinations and verification checks in words, and the
leg still waiting for a payout by hand."""

from django.utils.html import format_html

from ..destinations import approval_request_entries
from ..models import (
    ApprovalRequest,
)
from ..reason_words import destination_words

BADGE_COLOURS = {
    ApprovalRequest.Status.PENDING: "#205067",
    ApprovalRequest.Status.APPROVED: "#447e9b",
    ApprovalRequest.Status.EXECUTED: "#2e7d32",
    ApprovalRequest.Status.FAILED: "#ba2121",
    ApprovalRequest.Status.DENIED: "#6b6b6b",
    ApprovalRequest.Status.CHANGES_REQUESTED: "#8a6d3b",
    ApprovalRequest.Status.ESCALATED: "#8a6d3b",
    ApprovalRequest.Status.EXPIRED: "#6b6b6b",
    ApprovalRequest.Status.INVALIDATED: "#6b6b6b",
    ApprovalRequest.Status.PAYMENT_FAILED: "#ba2121",
}
DECISION_LABELS = {
    "approve": "Approve",
    "deny": "Deny",
    "request_changes": "Request changes",
    "escalate": "Escalate",
}


def status_badge_html(request: ApprovalRequest):
    colour = BADGE_COLOURS.get(request.status, "#6b6b6b")
    label = "FAILED" if request.status == ApprovalRequest.Status.FAILED else status_words(request.status)
    return format_html(
        '<span class="ra-badge ra-badge-{}" style="background:{};color:#fff;padding:2px 7px;border-radius:9px;'
        'font-weight:600;white-space:nowrap">{}</span>',
        request.status,
        colour,
        label,
    )


def destination_of_request_words(request) -> str:
    """Where the request's refund goes, in words with the exact method: "the original payment
    method (card_4242)" (the args' destination kind is a code)."""
    args = request.args or {}
    method = args.get("destination_method")
    return destination_words(args.get("destination") or "original") + (f" ({method})" if method else "")


def status_words(status: str) -> str:
    """An approval status as the queue writes it: the model's label with a capital first letter,
    so "Pending" and "Executed and verified" read alike (filter, badge, review page)."""
    words = ApprovalRequest.Status(status).label if status in ApprovalRequest.Status.values else str(status)
    return words[:1].upper() + words[1:]


SUPPORT_TICKET_URL = "/tickets/{}/"

# The evaluator's checks (approvals.services.verification) in words for the review page; a check without
# an entry is shown humanised ("new_check" -> "New check"), never as its code.
VERIFICATION_CHECK_WORDS = {
    "one_entry_under_key": "One ledger entry under the request's key",
    "args_match_hash": "The executed arguments match the approved hash",
    "entry_on_order": "The entry is on the request's order",
    "entry_same_tenant": "The entry is in the request's shop",
    "entry_recorded_on_request": "The request records the entry",
    "approval_ref": "The entry names the approval",
    "amount_exact": "The amount is the approved amount",
    "amount_within_refundable_at_request": "Within what was refundable when requested",
    "currency_exact": "The currency is the approved currency",
    "destination": "Paid to the approved destination",
    "destination_method_exact": "Paid to the approved payment method",
    "items_exact": "The items are the approved items",
    "distinct_approvers": "Enough distinct finance approvers",
    "filer_not_approver": "Nobody approved what they filed or proposed",
    "within_policy_window": "Within the policy's refund window",
    "exception_within_policy": "The exception waives only waivable rules",
    "entry_succeeded": "The ledger entry succeeded",
    "order_refunds_within_total": "The order's refunds stay within its total",
    "provider_has_refund": "The payment provider has the refund",
    "provider_status": "The provider says it succeeded",
    "provider_amount": "The provider's amount matches",
    "provider_refund_id": "The provider's refund id matches",
    "provider_metadata_approval": "The provider's record names the approval",
    "one_entry_per_leg": "One ledger entry per approved leg",
    "legs_sum": "The legs add up to the approved amount",
    "leg_payment": "Paid back to the leg's payment",
    "leg_method": "Paid to the leg's payment method",
    "leg_amount": "The leg's amount is the approved one",
    "leg_tender": "Paid the way the leg's tender is paid",
    "leg_provider_payment": "The provider refunded the leg's payment",
}


def verification_check_words(name: str) -> str:
    return VERIFICATION_CHECK_WORDS.get(name) or str(name).replace("_", " ").capitalize()


def manual_leg_waiting(obj: ApprovalRequest):
    """The request's first leg written for a payout by hand and not recorded paid yet, or None."""
    return approval_request_entries(request=obj).filter(gateway="manual", status="pending").first()
