"""What a ticket does when its approval request moves: one service per approval event.

The receiver (refundagent/receivers.py) calls one of these per event. Every status change goes
through `ticket_transition` (compare-and-set on the transition table); the trace spans are
`approval`, `ledger` and `verify`. They run inside the approvals layer's transaction, in a
savepoint (approvals.signals), so the ticket moves with the decision when they work and a failure
here never undoes the decision. A failed one is kept and called again later by the sweep, with the
request and the rows it carried read again, before any later event of the ticket
(approvals.followups): each must write all or nothing, which its savepoint guarantees.
"""

import json

from django.db import transaction

from approvals.destinations import approval_request_entries
from approvals.models import ApprovalRequest

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


def _who(user) -> str:
    return user.get_username() if user is not None else "the system"


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


def _decision_data(request: ApprovalRequest, *, decision: str, actor) -> dict:
    approvals = request.votes.filter(decision="approve").count()
    return _request_data(request, decision=decision, by=_who(actor), note=request.decision_note, approvals=approvals)


def _money(request: ApprovalRequest) -> str:
    return f"{request.amount} {request.currency} on {request.order.external_id}"


def _with_note(text: str, note: str) -> str:
    return text + (f": {note}" if note else ".")


def ticket_follow_vote(*, request: ApprovalRequest, actor) -> None:
    """One approval of several: the ticket waits for the next distinct approver."""
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    data = _decision_data(request, decision="approve", actor=actor)
    trace_record(
        ticket=ticket,
        span="approval",
        status="pending",
        decision="approve_vote",
        reason=f"Approval {data['approvals']} of {request.required_approvals} by {_who(actor)} on request "
        f"#{request.pk}; waiting for another distinct finance approver.",
        data=data,
    )


def ticket_follow_approved(*, request: ApprovalRequest, actor) -> None:
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    who, money = _who(actor), _money(request)
    data = _decision_data(request, decision="approve", actor=actor)
    ticket_transition(
        ticket=ticket, to=Ticket.Status.APPROVED, detail=f"Approved by {who}: refund of {money} is being executed."
    )
    trace_record(
        ticket=ticket,
        span="approval",
        status="approved",
        decision="approve",
        reason=f"Request #{request.pk} approved by {who} ({data['approvals']} of "
        f"{request.required_approvals}): {money}.",
        data=data,
    )


def ticket_follow_denied(*, request: ApprovalRequest, actor) -> None:
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    who, note = _who(actor), request.decision_note
    data = _decision_data(request, decision="deny", actor=actor)
    ticket_transition(
        ticket=ticket,
        to=Ticket.Status.DENIED,
        detail=_with_note(f"Finance ({who}) denied the refund of {_money(request)}", note),
    )
    trace_record(
        ticket=ticket,
        span="approval",
        status="denied",
        decision="deny",
        reason=_with_note(f"Request #{request.pk} denied by {who}", note),
        data=data,
    )


def ticket_follow_escalated(*, request: ApprovalRequest, actor) -> None:
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    who, note = _who(actor), request.decision_note
    data = _decision_data(request, decision="escalate", actor=actor)
    ticket_transition(
        ticket=ticket,
        to=Ticket.Status.ESCALATED,
        detail=_with_note(f"Finance ({who}) escalated the refund of {_money(request)}", note),
    )
    trace_record(
        ticket=ticket,
        span="approval",
        status="escalated",
        decision="escalate",
        reason=_with_note(f"Request #{request.pk} escalated by {who}", note),
        data=data,
    )


def ticket_follow_changes_requested(*, request: ApprovalRequest, actor) -> None:
    """Back to the agent with the reviewer's note. Finance never edits the request: the new run
    drafts again and the gate makes a new request with its own args and hash."""
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    who, note = _who(actor), request.decision_note
    data = _decision_data(request, decision="request_changes", actor=actor)
    wanted = request.requested_amount_change
    requested = ticket.requested_amount
    if wanted is not None:
        requested = wanted if requested is None else min(requested, wanted)
    detail = _with_note(
        f"Finance ({who}) requested changes to request #{request.pk} ({request.amount} {request.currency})"
        + (f"; wanted amount {wanted} {request.currency}" if wanted is not None else ""),
        note,
    )
    if not ticket_transition(ticket=ticket, to=Ticket.Status.QUEUED, detail=detail, requested_amount=requested):
        return
    data.update(
        wanted_amount=str(wanted) if wanted is not None else None,
        requested_amount=str(requested) if requested is not None else None,
    )
    trace_record(
        ticket=ticket, span="approval", status="changes_requested", decision="request_changes", reason=detail, data=data
    )
    ticket_pk = ticket.pk
    transaction.on_commit(lambda: ticket_run_enqueue(ticket_pk))


def ticket_follow_expired(*, request: ApprovalRequest) -> None:
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    data = _decision_data(request, decision="expire", actor=None)
    detail = (
        f"Approval request #{request.pk} ({_money(request)}) expired at {request.expires_at:%Y-%m-%d %H:%M} "
        "UTC before finance decided: a person must pick this up."
    )
    ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED, detail=detail)
    trace_record(ticket=ticket, span="approval", status="expired", decision="expire", reason=detail, data=data)


def ticket_follow_invalidated(*, request: ApprovalRequest, actor, reason: str, verdict: dict) -> None:
    """The facts changed: traced; without a replacement (no longer eligible) a person takes over."""
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    data = _decision_data(request, decision="invalidate", actor=actor)
    data.update(changed=reason, gate=verdict, replaced_by=request.replaced_by_id)
    trace_record(
        ticket=ticket,
        span="approval",
        status="invalidated",
        decision="invalidate",
        reason=f"Request #{request.pk} invalidated, facts changed: {reason}",
        data=data,
    )
    if request.replaced_by_id is None:
        gate_reason = " ".join((verdict or {}).get("reasons") or [])
        ticket_transition(
            ticket=ticket,
            to=Ticket.Status.ESCALATED,
            detail=f"Approval request #{request.pk} was invalidated ({reason}) and the refund is "
            f"no longer eligible: {gate_reason}"
            if gate_reason
            # Withdrawn without the gate's say (approvals.services.execution: a leg failed after a refile).
            else f"Approval request #{request.pk} was withdrawn: {reason}.",
        )


def ticket_follow_replaced(*, request: ApprovalRequest, old: ApprovalRequest) -> None:
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    ticket_transition(
        ticket=ticket,
        to=Ticket.Status.APPROVAL_REQUIRED,
        detail=f"The facts changed, so approval request #{old.pk} was replaced by #{request.pk} for "
        f"{request.amount} {request.currency}: finance must decide the new request.",
    )
    trace_record(
        ticket=ticket,
        span="approval",
        status="replaced",
        decision="replace",
        reason=f"Request #{old.pk} replaced by #{request.pk}: {request.amount} {request.currency} "
        f"under {request.policy_version}.",
        data=_request_data(request, replaces=old.pk, old_amount=str(old.amount)),
    )


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


def ticket_follow_executed(*, request: ApprovalRequest, entry, replayed: bool) -> None:
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    if replayed and entry.gateway == "manual" and entry.status == "succeeded":
        # The execution that follows the last payout recorded by hand: the records are the news,
        # not the replay. Every leg paid by hand is traced, each with who recorded it and when.
        legs = approval_request_entries(request=request).filter(gateway="manual", status="succeeded")
        for leg in legs:
            paid = leg.events.filter(source="person").select_related("recorded_by").order_by("-id").first()
            who = paid.recorded_by.get_username() if paid is not None and paid.recorded_by_id else "a person"
            trace_record(
                ticket=ticket,
                span="ledger",
                status="ok",
                decision="payout_recorded",
                tool="refunds.issue_refund",
                reason=f"Ledger entry #{leg.pk}: {leg.amount} {leg.currency} paid by hand, recorded by {who}.",
                data=_request_data(
                    request,
                    entry=leg.pk,
                    replayed=True,
                    recorded_by=who,
                    recorded_at=paid.created_at.isoformat() if paid is not None else None,
                ),
            )
        return
    trace_record(
        ticket=ticket,
        span="ledger",
        status="ok",
        decision="refund_replayed" if replayed else "refund_issued",
        tool="refunds.issue_refund",
        reason=f"Ledger entry #{entry.pk}: {entry.amount} {entry.currency} on {request.order.external_id}"
        + (" (already written: replayed by its key)." if replayed else "."),
        data=_request_data(request, entry=entry.pk, replayed=replayed),
    )


def ticket_follow_verified(*, request: ApprovalRequest, verdict: dict) -> None:
    """The evaluator's verdict settles the ticket as refunded, or raises the alert (failed)."""
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    data = _request_data(request, verdict=verdict)
    if verdict.get("ok"):
        ticket_transition(
            ticket=ticket,
            to=Ticket.Status.REFUNDED,
            detail=f"Refunded {request.amount} {request.currency}: ledger entry #{verdict.get('entry')}, "
            "verified by the evaluator.",
        )
        trace_record(
            ticket=ticket,
            span="verify",
            status="ok",
            decision="verified",
            reason=f"Evaluator: exactly {request.amount} {request.currency} recorded under the approval's key.",
            data=data,
        )
        return
    failed = [c for c in verdict.get("checks", []) if not c.get("ok")]
    evidence = json.dumps(failed, default=str)
    ticket_transition(
        ticket=ticket,
        to=Ticket.Status.FAILED,
        detail=f"Verification of request #{request.pk} failed ({verdict.get('stage', 'verify')}): "
        f"{', '.join(c['name'] for c in failed)}. Evidence: {evidence}",
    )
    trace_record(
        ticket=ticket,
        span="verify",
        status="error",
        decision="verification_failed",
        reason=f"Evaluator: {', '.join(c['name'] for c in failed)} failed on request #{request.pk}.",
        data=data,
    )


def ticket_follow_payment_failed(*, request: ApprovalRequest, entry, reason: str) -> None:
    """The provider refused (or canceled) the payout: the ticket goes back to finance as
    `payment_failed` with the provider's reason; nothing was paid and the amount is refundable
    again (finance files it again: approvals.services.refile.approval_request_payment_retry)."""
    ticket = ticket_of_request(request)
    if ticket is None:
        return
    if entry.amount == request.amount:
        detail = (
            f"The payment provider refused the refund of {_money(request)} (request #{request.pk}, ledger entry "
            f"#{entry.pk} {entry.status}): {reason}. Nothing was paid; the amount is refundable again."
        )
    else:  # one leg of a refund paid in several
        detail = (
            f"The payment provider refused {entry.amount} {request.currency} of the refund of {_money(request)} "
            f"(request #{request.pk}, ledger entry #{entry.pk} {entry.status}, to {entry.destination or 'the payment'})"
            f": {reason}. That part was not paid and is refundable again; the other legs stand."
        )
        if request.replaced_by_id is not None:
            detail += (
                f" Request #{request.pk} was already filed again as #{request.replaced_by_id} for what the provider"
                f" refused before: propose a refund of {entry.amount} {request.currency} on this ticket for this part."
            )
    # Also from `refunded`: the provider reported the refund paid, then failed it; the money did
    # not move, so the ticket is finance's again, not the evaluator's alert. And from a request
    # filed again that waits for finance: a leg of the first failed since (approvals.services.execution).
    ticket_transition(ticket=ticket, to=Ticket.Status.PAYMENT_FAILED, detail=detail)
    trace_record(
        ticket=ticket,
        span="ledger",
        status="error",
        decision="payment_failed",
        tool="refunds.issue_refund",
        reason=detail,
        data=_request_data(
            request, entry=entry.pk, entry_status=entry.status, provider_ref=entry.provider_ref, provider_reason=reason
        ),
    )
