"""What a ticket does when its approval request moves: one row per approval event.

The receiver (refundagent/receivers.py) calls `ticket_follow` for every event; it applies the
event's row of TICKET_FOLLOW_UPS (the ticket's next status and detail, the trace event, and a
hook for an event with logic of its own). Every status change goes through `ticket_transition`
(compare-and-set on the transition table); the trace spans are `approval`, `ledger` and `verify`.
They run inside the approvals layer's transaction, in a savepoint (approvals.signals), so the
ticket moves with the decision when they work and a failure here never undoes the decision. A
failed one is kept and called again later by the sweep, with the request and the rows it carried
read again, before any later event of the ticket (approvals.followups): each must write all or
nothing, which its savepoint guarantees.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from functools import cached_property

from django.db import transaction

from approvals import signals
from approvals.destinations import approval_request_entries
from approvals.models import ApprovalRequest
from ledger.models import RefundEntry

from .exceptions import TicketStateConflict
from .models import Ticket
from .services import ticket_run_enqueue
from .ticket_state import ticket_transition
from .tracing import trace_record


def ticket_of_request(request: ApprovalRequest) -> Ticket | None:
    """The ticket an approval request was made for (ticket_ref is opaque to approvals, so the
    tenant is checked here)."""
    if request.ticket_ref is None:
        return None
    return Ticket.objects.filter(pk=request.ticket_ref, tenant_id=request.tenant_id).select_related("order").first()


def ticket_refile_check(*, request: ApprovalRequest) -> None:
    """Before finance files a refused payment again: only while its ticket still waits on that
    payment. A ticket a person closed or took into the human queue is theirs (as close and
    escalate withdraw pending requests); they propose a refund on it if one is still due. The
    caller holds the order lock, which close and escalate take first too."""
    ticket = ticket_of_request(request)
    if ticket is not None and ticket.status != Ticket.Status.PAYMENT_FAILED:
        raise TicketStateConflict(
            f"Ticket #{ticket.pk} is {ticket.get_status_display()}: a person has it, so request #{request.pk} "
            "is not filed again (they can propose a refund on the ticket)."
        )


def _who(user) -> str:
    return user.get_username() if user is not None else "the system"


@dataclass
class Announcement:
    """One approval event as its ticket reads it: the request and what the signal carried
    beside it (approvals.signals lists them per event)."""

    ticket: Ticket
    request: ApprovalRequest
    actor: object = None
    reason: str = ""
    verdict: dict = field(default_factory=dict)
    old: ApprovalRequest | None = None
    entry: RefundEntry | None = None
    replayed: bool = False

    @property
    def who(self) -> str:
        return _who(self.actor)

    @property
    def note(self) -> str:
        return self.request.decision_note

    @property
    def money(self) -> str:
        return f"{self.request.amount} {self.request.currency} on {self.request.order.external_id}"

    @cached_property
    def approvals(self) -> int:
        return self.request.votes.filter(decision="approve").count()

    @cached_property
    def requested_amount(self) -> Decimal | None:
        """What the ticket asks for once finance named the amount it wants (never more than asked)."""
        wanted, requested = self.request.requested_amount_change, self.ticket.requested_amount
        if wanted is None:
            return requested
        return wanted if requested is None else min(requested, wanted)


def _request_data(request: ApprovalRequest, **extra) -> dict:
    data = {
        "approval": request.pk,
        "status": request.status,
        "amount": str(request.amount),
        "currency": request.currency,
        "order": request.order.external_id,
        "args_hash": request.args_hash,
        "idempotency_key": request.idempotency_key,
        "policy_version": request.policy_version,
        "required_approvals": request.required_approvals,
    }
    data.update(extra)
    return data


def _decision_data(decision: str) -> Callable[[Announcement], dict]:
    def data(a: Announcement) -> dict:
        return _request_data(a.request, decision=decision, by=a.who, note=a.note, approvals=a.approvals)

    return data


def _with_note(text: str, note: str) -> str:
    return text + (f": {note}" if note else ".")


@dataclass(frozen=True)
class FollowUp:
    """What a ticket does for one approval event: moves to `to` (None: it stays) with the status
    detail `detail`, then records one trace event (`trace_reason` defaults to the detail). `hook`
    is the event's own logic where a table row is not enough: it gets the row and the
    announcement and returns the row to apply (itself or a variant), or None once it has done all
    the event needs."""

    span: str
    trace_status: str
    decision: str
    data: Callable[[Announcement], dict]
    trace_reason: Callable[[Announcement], str] | None = None
    to: str | None = None
    detail: Callable[[Announcement], str] | None = None
    tool: str = ""
    hook: Callable[["FollowUp", Announcement], "FollowUp | None"] | None = None


# What a signal carries that a follow-up reads (`verdict` apart: None reads as {}).
_CARRIED = ("actor", "reason", "old", "entry", "replayed")


def ticket_follow(*, signal, request: ApprovalRequest, **carried) -> None:
    """The ticket's follow-up of one approval event (`signal`, with what it carried): its row of
    TICKET_FOLLOW_UPS applied. Requests made for no ticket are not followed."""
    follow_up = TICKET_FOLLOW_UPS[signal]
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    known = {name: carried[name] for name in _CARRIED if name in carried}
    announcement = Announcement(ticket=ticket, request=request, verdict=carried.get("verdict") or {}, **known)
    if follow_up.hook is not None:
        follow_up = follow_up.hook(follow_up, announcement)
        if follow_up is None:
            return
    if follow_up.to is not None:
        ticket_transition(ticket=ticket, to=follow_up.to, detail=follow_up.detail(announcement))
    trace_record(
        ticket=ticket,
        span=follow_up.span,
        status=follow_up.trace_status,
        decision=follow_up.decision,
        tool=follow_up.tool,
        reason=(follow_up.trace_reason or follow_up.detail)(announcement),
        data=follow_up.data(announcement),
    )


def _back_to_the_agent(follow_up: FollowUp, a: Announcement) -> FollowUp | None:
    """Request changes: back to the agent with the reviewer's note (and the amount finance wants,
    written with the move). Finance never edits the request: the new run drafts again and the gate
    makes a new request with its own args and hash. A ticket that did not move is not traced."""
    moved = ticket_transition(
        ticket=a.ticket, to=follow_up.to, detail=follow_up.detail(a), requested_amount=a.requested_amount
    )
    if not moved:
        return None
    ticket_pk = a.ticket.pk
    transaction.on_commit(lambda: ticket_run_enqueue(ticket_pk))
    return replace(follow_up, to=None)


def _changes_requested_detail(a: Announcement) -> str:
    wanted, currency = a.request.requested_amount_change, a.request.currency
    return _with_note(
        f"Finance ({a.who}) requested changes to request #{a.request.pk} ({a.request.amount} {currency})"
        + (f"; wanted amount {wanted} {currency}" if wanted is not None else ""),
        a.note,
    )


def _changes_requested_data(a: Announcement) -> dict:
    wanted, requested = a.request.requested_amount_change, a.requested_amount
    return _decision_data("request_changes")(a) | {
        "wanted_amount": str(wanted) if wanted is not None else None,
        "requested_amount": str(requested) if requested is not None else None,
    }


def _escalated_unless_replaced(follow_up: FollowUp, a: Announcement) -> FollowUp:
    """Invalidated: the facts changed. With a replacement, finance decides the new request
    (`approval_replaced` moves the ticket); without one (no longer eligible) a person takes over."""
    return follow_up if a.request.replaced_by_id is None else replace(follow_up, to=None)


def _invalidated_detail(a: Announcement) -> str:
    gate_reason = " ".join(a.verdict.get("reasons") or [])
    if gate_reason:
        return (
            f"Approval request #{a.request.pk} was invalidated ({a.reason}) and the refund is "
            f"no longer eligible: {gate_reason}"
        )
    # Withdrawn without the gate's say (approvals.services.execution: a leg failed after a refile).
    return f"Approval request #{a.request.pk} was withdrawn: {a.reason}."


def _executed_or_paid_by_hand(follow_up: FollowUp, a: Announcement) -> FollowUp | None:
    if not a.replayed:
        return follow_up
    if not (a.entry.gateway == "manual" and a.entry.status == "succeeded"):
        return replace(follow_up, decision="refund_replayed")
    # The execution that follows the last payout recorded by hand: the records are the news,
    # not the replay. Every leg paid by hand is traced, each with who recorded it and when.
    legs = approval_request_entries(request=a.request).filter(gateway="manual", status="succeeded")
    for leg in legs:
        paid = leg.events.filter(source="person").select_related("recorded_by").order_by("-id").first()
        who = paid.recorded_by.get_username() if paid is not None and paid.recorded_by_id else "a person"
        trace_record(
            ticket=a.ticket,
            span="ledger",
            status="ok",
            decision="payout_recorded",
            tool="refunds.issue_refund",
            reason=f"Ledger entry #{leg.pk}: {leg.amount} {leg.currency} paid by hand, recorded by {who}.",
            data=_request_data(
                a.request,
                entry=leg.pk,
                replayed=True,
                recorded_by=who,
                recorded_at=paid.created_at.isoformat() if paid is not None else None,
            ),
        )
    return None


def _verified_or_failed(follow_up: FollowUp, a: Announcement) -> FollowUp:
    """The evaluator's verdict settles the ticket as refunded, or raises the alert (failed)."""
    return follow_up if a.verdict.get("ok") else VERIFICATION_FAILED


def _failed_checks(a: Announcement) -> str:
    return ", ".join(c["name"] for c in a.verdict.get("checks", []) if not c.get("ok"))


def _verification_failed_detail(a: Announcement) -> str:
    evidence = json.dumps([c for c in a.verdict.get("checks", []) if not c.get("ok")], default=str)
    return (
        f"Verification of request #{a.request.pk} failed ({a.verdict.get('stage', 'verify')}): "
        f"{_failed_checks(a)}. Evidence: {evidence}"
    )


def _payment_failed_detail(a: Announcement) -> str:
    """The provider refused (or canceled) the payout: the ticket goes back to finance as
    `payment_failed` with the provider's reason; nothing was paid and the amount is refundable
    again (finance files it again: approvals.services.refile.approval_request_payment_retry)."""
    request, entry = a.request, a.entry
    if entry.amount == request.amount:
        return (
            f"The payment provider refused the refund of {a.money} (request #{request.pk}, ledger entry "
            f"#{entry.pk} {entry.status}): {a.reason}. Nothing was paid; the amount is refundable again."
        )
    # one leg of a refund paid in several
    detail = (
        f"The payment provider refused {entry.amount} {request.currency} of the refund of {a.money} "
        f"(request #{request.pk}, ledger entry #{entry.pk} {entry.status}, to {entry.destination or 'the payment'})"
        f": {a.reason}. That part was not paid and is refundable again; the other legs stand."
    )
    if request.replaced_by_id is not None:
        detail += (
            f" Request #{request.pk} was already filed again as #{request.replaced_by_id} for what the provider"
            f" refused before: propose a refund of {entry.amount} {request.currency} on this ticket for this part."
        )
    return detail


def _finance_said(*, to: str, verb: str, decision: str) -> FollowUp:
    """Finance denied or escalated: the ticket and its trace say who, and the decision's note."""
    return FollowUp(
        to=to,
        detail=lambda a: _with_note(f"Finance ({a.who}) {verb} the refund of {a.money}", a.note),
        span="approval",
        trace_status=verb,
        decision=decision,
        trace_reason=lambda a: _with_note(f"Request #{a.request.pk} {verb} by {a.who}", a.note),
        data=_decision_data(decision),
    )


VERIFICATION_FAILED = FollowUp(
    to=Ticket.Status.FAILED,
    detail=_verification_failed_detail,
    span="verify",
    trace_status="error",
    decision="verification_failed",
    trace_reason=lambda a: f"Evaluator: {_failed_checks(a)} failed on request #{a.request.pk}.",
    data=lambda a: _request_data(a.request, verdict=a.verdict),
)

# What the ticket does for each announcement (the receiver, refundagent.receivers, connects
# itself to every signal here).
TICKET_FOLLOW_UPS: dict[signals.ApprovalEvent, FollowUp] = {
    # One approval of several: the ticket waits for the next distinct approver.
    signals.approval_vote_recorded: FollowUp(
        span="approval",
        trace_status="pending",
        decision="approve_vote",
        trace_reason=lambda a: (
            f"Approval {a.approvals} of {a.request.required_approvals} by {a.who} on request "
            f"#{a.request.pk}; waiting for another distinct finance approver."
        ),
        data=_decision_data("approve"),
    ),
    signals.approval_approved: FollowUp(
        to=Ticket.Status.APPROVED,
        detail=lambda a: f"Approved by {a.who}: refund of {a.money} is being executed.",
        span="approval",
        trace_status="approved",
        decision="approve",
        trace_reason=lambda a: (
            f"Request #{a.request.pk} approved by {a.who} ({a.approvals} of {a.request.required_approvals}): {a.money}."
        ),
        data=_decision_data("approve"),
    ),
    signals.approval_denied: _finance_said(to=Ticket.Status.DENIED, verb="denied", decision="deny"),
    signals.approval_escalated: _finance_said(to=Ticket.Status.ESCALATED, verb="escalated", decision="escalate"),
    signals.approval_changes_requested: FollowUp(
        to=Ticket.Status.QUEUED,
        detail=_changes_requested_detail,
        span="approval",
        trace_status="changes_requested",
        decision="request_changes",
        data=_changes_requested_data,
        hook=_back_to_the_agent,
    ),
    signals.approval_expired: FollowUp(
        to=Ticket.Status.ESCALATED,
        detail=lambda a: (
            f"Approval request #{a.request.pk} ({a.money}) expired at "
            f"{a.request.expires_at:%Y-%m-%d %H:%M} UTC before finance decided: a person must pick this up."
        ),
        span="approval",
        trace_status="expired",
        decision="expire",
        data=_decision_data("expire"),
    ),
    signals.approval_invalidated: FollowUp(
        to=Ticket.Status.ESCALATED,
        detail=_invalidated_detail,
        span="approval",
        trace_status="invalidated",
        decision="invalidate",
        trace_reason=lambda a: f"Request #{a.request.pk} invalidated, facts changed: {a.reason}",
        data=lambda a: (
            _decision_data("invalidate")(a)
            | {"changed": a.reason, "gate": a.verdict, "replaced_by": a.request.replaced_by_id}
        ),
        hook=_escalated_unless_replaced,
    ),
    signals.approval_replaced: FollowUp(
        to=Ticket.Status.APPROVAL_REQUIRED,
        detail=lambda a: (
            f"The facts changed, so approval request #{a.old.pk} was replaced by #{a.request.pk} "
            f"for {a.request.amount} {a.request.currency}: finance must decide the new request."
        ),
        span="approval",
        trace_status="replaced",
        decision="replace",
        trace_reason=lambda a: (
            f"Request #{a.old.pk} replaced by #{a.request.pk}: {a.request.amount} "
            f"{a.request.currency} under {a.request.policy_version}."
        ),
        data=lambda a: _request_data(a.request, replaces=a.old.pk, old_amount=str(a.old.amount)),
    ),
    signals.refund_executed: FollowUp(
        span="ledger",
        trace_status="ok",
        decision="refund_issued",
        tool="refunds.issue_refund",
        trace_reason=lambda a: (
            f"Ledger entry #{a.entry.pk}: {a.entry.amount} {a.entry.currency} on "
            f"{a.request.order.external_id}" + (" (already written: replayed by its key)." if a.replayed else ".")
        ),
        data=lambda a: _request_data(a.request, entry=a.entry.pk, replayed=a.replayed),
        hook=_executed_or_paid_by_hand,
    ),
    signals.refund_verified: FollowUp(
        to=Ticket.Status.REFUNDED,
        detail=lambda a: (
            f"Refunded {a.request.amount} {a.request.currency}: ledger entry "
            f"#{a.verdict.get('entry')}, verified by the evaluator."
        ),
        span="verify",
        trace_status="ok",
        decision="verified",
        trace_reason=lambda a: (
            f"Evaluator: exactly {a.request.amount} {a.request.currency} recorded under the approval's key."
        ),
        data=lambda a: _request_data(a.request, verdict=a.verdict),
        hook=_verified_or_failed,
    ),
    # Also from `refunded`: the provider reported the refund paid, then failed it; the money did
    # not move, so the ticket is finance's again, not the evaluator's alert. And from a request
    # filed again that waits for finance: a leg of the first failed since (approvals.services.execution).
    signals.refund_payment_failed: FollowUp(
        to=Ticket.Status.PAYMENT_FAILED,
        detail=_payment_failed_detail,
        span="ledger",
        trace_status="error",
        decision="payment_failed",
        tool="refunds.issue_refund",
        data=lambda a: _request_data(
            a.request,
            entry=a.entry.pk,
            entry_status=a.entry.status,
            provider_ref=a.entry.provider_ref,
            provider_reason=a.reason,
        ),
    ),
}
