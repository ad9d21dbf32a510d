"""The one mapping from the codes people see (statuses, stop reasons, gate codes, origins...) to
their human labels, and the one date format. Templates use the `label` and `when` filters
(refundagent/templatetags/refundagent_labels.py); the admin and the views call `label` and
`when` directly. Django's own rendering of dates (the admin's readonly fields and changelist
columns, `{{ value }}` and `|date` in any template) uses the same formats through the format
module refundagent/config/formats/en/formats.py (settings.FORMAT_MODULE_PATH), which imports
them from here. A code without an entry is shown humanised ("budget_exhausted" -> "Budget
exhausted"), never raw."""

from datetime import date, datetime

from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.dateparse import parse_datetime
from django.utils.timesince import timesince

from approvals.services.proposals import WAIVABLE_RULE_WORDS

# Every date a person sees: one format, with the time zone (settings.TIME_ZONE). The format
# module hands these to Django, so `when` and Django's own rendering print the same string.
DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"

LABELS: dict[str, dict[str, str]] = {
    "ticket_status": {
        "queued": "Queued for the agent",
        "running": "Agent investigating",
        "draft_ready": "Draft ready",
        "approval_required": "Waiting for finance",
        "approved": "Approved, refund executing",
        "refunded": "Refunded",
        "escalated": "With a person",
        "denied": "Denied",
        "failed": "Failed: a person must look",
        "closed": "Closed",
        "payment_failed": "Payment failed",
    },
    "stop_reason": {
        "draft_ready": "Draft ready",
        "approval_required": "Needs finance approval",
        "escalated": "Escalated to a person",
        "denied": "Denied",
        "failed": "Something failed",
        "budget_exhausted": "The agent ran out of steps",
        "no_progress": "The agent made no progress",
    },
    # Why a ticket sits in the escalation queue, in plain words (by status).
    "queue_reason": {
        "escalated": "Escalated: the agent or finance handed it to a person",
        "failed": "Failed: the run or the refund's verification went wrong",
        "payment_failed": "Payment failed: the provider refused the payout",
    },
    "approval_status": {
        "pending": "Waiting for approval",
        "approved": "Approved, executing",
        "executed": "Executed and verified",
        "denied": "Denied",
        "changes_requested": "Changes requested",
        "escalated": "Escalated",
        "expired": "Expired",
        "invalidated": "Invalidated: the facts changed",
        "failed": "Execution or verification failed",
    },
    "recommendation": {
        "refund": "Refund",
        "escalate": "Hand to a person",
        "deny": "Deny",
        "request_info": "Ask the customer for more information",
    },
    "gate_outcome": {
        "approval_required": "Eligible: finance approves",
        "escalated": "A person decides",
        "denied": "Not eligible",
    },
    "gate_code": {
        "foreign_destination": "Not one of the customer's payment methods",
        "policy_missing": "No current refund policy",
        "citation_missing": "The draft cites no policy",
        "citation_stale": "The draft cites an old policy",
        "reply_promises_payment": "The reply promised a payment",
        "status_not_eligible": "Order status not eligible",
        "outside_window": "Outside the refund window",
        "fully_refunded": "Already fully refunded",
        "items_already_refunded": "Items already refunded",
        "items_not_on_order": "Items not on the order",
        "items_exceed_quantity": "More units than the order has",
        "currency_mismatch": "Wrong currency",
        "destination_mismatch": "Destination differs from the ticket's",
        "destination_not_allowed": "Destination not allowed by the policy",
        "nothing_refundable": "Nothing to refund",
        "amount_precision": "Finer than the currency allows",
        "eligible": "Eligible",
    },
    "origin": {"agent": "Drafted by the agent", "human": "Proposed by a person"},
    "waivable_rule": {code: words[0].upper() + words[1:] for code, words in WAIVABLE_RULE_WORDS.items()},
}


def label(code, kind: str = "") -> str:
    """The human label of `code` (of `kind`, e.g. "ticket_status"); '' for an empty code."""
    if code in (None, ""):
        return ""
    code = str(code)
    found = LABELS.get(kind, {}).get(code)
    if found is None:
        for mapping in LABELS.values():
            if code in mapping:
                found = mapping[code]
                break
    return found if found is not None else code.replace("_", " ").capitalize()


def when(value) -> str:
    """A date or datetime (or its ISO string) in the one format, in the current time zone."""
    if value in (None, ""):
        return ""
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            return value
        value = parsed
    if isinstance(value, datetime):
        if timezone.is_naive(value):
            value = timezone.make_aware(value)
        return date_format(timezone.localtime(value), DATETIME_FORMAT)
    if isinstance(value, date):
        return date_format(value, DATE_FORMAT)
    return str(value)


def ago(value) -> str:
    """How long ago, in words: "3 days ago", and "just now" under a minute (never "0 minutes ago")."""
    if value in (None, ""):
        return ""
    if isinstance(value, str):
        value = parse_datetime(value)
    if (timezone.now() - value).total_seconds() < 60:
        return "just now"
    return f"{timesince(value, depth=1)} ago"
