"""Receivers for signals sent by lower layers (approvals), which may not import this app.

They keep the ticket in step with its approval request and write the trace (spans `approval`,
`ledger`, `verify`). Signals are sent inside the transaction that made the change, so these
writes commit or roll back with it. They also register the review page's ticket sections
(draft, customer reply draft, trace timeline) with approvals.review.
"""

import json

from django.db import transaction
from django.dispatch import receiver
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from approvals.models import ApprovalRequest
from approvals.review import review_context_register
from approvals.signals import approval_decided, approval_replaced, refund_executed, refund_verified

from .models import Ticket
from .services import ticket_run_enqueue
from .tracing import trace_record

# Once refunded or closed, a ticket is only moved again by a failed verification (the alert).
SETTLED = {Ticket.Status.REFUNDED, Ticket.Status.CLOSED}


def _ticket(request: ApprovalRequest) -> Ticket | None:
    if request.ticket_ref is None:
        return None
    return Ticket.objects.filter(pk=request.ticket_ref, tenant_id=request.tenant_id).select_related("order").first()


def _ticket_update(ticket: Ticket, *, exclude=SETTLED, **fields) -> bool:
    updated = Ticket.objects.filter(pk=ticket.pk).exclude(status__in=exclude).update(**fields) == 1
    if updated:
        for name, value in fields.items():
            setattr(ticket, name, value)
    return updated


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


@receiver(approval_decided, dispatch_uid="refundagent.ticket_follow_decision")
def ticket_follow_decision(sender, request: ApprovalRequest, vote=None, decision: str = "", actor=None, **kwargs):
    ticket = _ticket(request)
    if ticket is None:
        return
    who = _who(actor)
    note = request.decision_note
    money = f"{request.amount} {request.currency} on {request.order.external_id}"
    approvals = request.votes.filter(decision="approve").count()
    data = _request_data(request, decision=decision, by=who, note=note, approvals=approvals)

    if decision == "approve":
        if request.status == ApprovalRequest.Status.APPROVED:
            _ticket_update(ticket, status=Ticket.Status.APPROVED,
                           stop_detail=f"Approved by {who}: refund of {money} is being executed.")
            trace_record(ticket=ticket, span="approval", status="approved", decision="approve",
                         reason=f"Request #{request.pk} approved by {who} ({approvals} of {request.required_approvals}): {money}.",
                         data=data)
        else:
            trace_record(ticket=ticket, span="approval", status="pending", decision="approve_vote",
                         reason=f"Approval {approvals} of {request.required_approvals} by {who} on request #{request.pk}; "
                                "waiting for another distinct finance approver.",
                         data=data)
    elif decision == "deny":
        _ticket_update(ticket, status=Ticket.Status.DENIED, stop_reason=Ticket.StopReason.DENIED,
                       stop_detail=f"Finance ({who}) denied the refund of {money}" + (f": {note}" if note else "."))
        trace_record(ticket=ticket, span="approval", status="denied", decision="deny",
                     reason=f"Request #{request.pk} denied by {who}" + (f": {note}" if note else "."), data=data)
    elif decision == "escalate":
        _ticket_update(ticket, status=Ticket.Status.ESCALATED, stop_reason=Ticket.StopReason.ESCALATED,
                       stop_detail=f"Finance ({who}) escalated the refund of {money}" + (f": {note}" if note else "."))
        trace_record(ticket=ticket, span="approval", status="escalated", decision="escalate",
                     reason=f"Request #{request.pk} escalated by {who}" + (f": {note}" if note else "."), data=data)
    elif decision == "request_changes":
        _ticket_changes_requested(ticket=ticket, request=request, who=who, data=data)
    elif decision == "expire":
        detail = (f"Approval request #{request.pk} ({money}) expired at {request.expires_at:%Y-%m-%d %H:%M} UTC "
                  "before finance decided: a person must pick this up.")
        _ticket_update(ticket, status=Ticket.Status.ESCALATED, stop_reason=Ticket.StopReason.ESCALATED, stop_detail=detail)
        trace_record(ticket=ticket, span="approval", status="expired", decision="expire", reason=detail, data=data)
    elif decision == "invalidate":
        reason = kwargs.get("reason", "")
        data.update(changed=reason, gate=kwargs.get("verdict"), replaced_by=request.replaced_by_id)
        trace_record(ticket=ticket, span="approval", status="invalidated", decision="invalidate",
                     reason=f"Request #{request.pk} invalidated, facts changed: {reason}", data=data)
        if request.replaced_by_id is None:
            gate_reason = " ".join((kwargs.get("verdict") or {}).get("reasons") or [])
            _ticket_update(ticket, status=Ticket.Status.ESCALATED, stop_reason=Ticket.StopReason.ESCALATED,
                           stop_detail=f"Approval request #{request.pk} was invalidated ({reason}) and the refund is "
                                       f"no longer eligible: {gate_reason}")


def _ticket_changes_requested(*, ticket: Ticket, request: ApprovalRequest, who: str, data: dict) -> None:
    """Back to the agent with the reviewer's note. Finance never edits the request: the new run
    drafts again and the gate makes a new request with its own args and hash."""
    wanted = request.requested_amount_change
    requested = ticket.requested_amount
    if wanted is not None:
        requested = wanted if requested is None else min(requested, wanted)
    note = request.decision_note
    detail = (f"Finance ({who}) requested changes to request #{request.pk} "
              f"({request.amount} {request.currency})"
              + (f"; wanted amount {wanted} {request.currency}" if wanted is not None else "")
              + (f": {note}" if note else "."))
    if not _ticket_update(ticket, status=Ticket.Status.QUEUED, stop_reason=None, stop_detail=detail,
                          requested_amount=requested):
        return
    data.update(wanted_amount=str(wanted) if wanted is not None else None,
                requested_amount=str(requested) if requested is not None else None)
    trace_record(ticket=ticket, span="approval", status="changes_requested", decision="request_changes",
                 reason=detail, data=data)
    ticket_pk = ticket.pk
    transaction.on_commit(lambda: ticket_run_enqueue(ticket_pk))


@receiver(approval_replaced, dispatch_uid="refundagent.ticket_follow_replacement")
def ticket_follow_replacement(sender, request: ApprovalRequest, old: ApprovalRequest, **kwargs):
    ticket = _ticket(request)
    if ticket is None:
        return
    _ticket_update(ticket, status=Ticket.Status.APPROVAL_REQUIRED, stop_reason=Ticket.StopReason.APPROVAL_REQUIRED,
                   stop_detail=f"The facts changed, so approval request #{old.pk} was replaced by #{request.pk} for "
                               f"{request.amount} {request.currency}: finance must decide the new request.")
    trace_record(ticket=ticket, span="approval", status="replaced", decision="replace",
                 reason=f"Request #{old.pk} replaced by #{request.pk}: {request.amount} {request.currency} "
                        f"under {request.policy_version}.",
                 data=_request_data(request, replaces=old.pk, old_amount=str(old.amount)))


@receiver(refund_executed, dispatch_uid="refundagent.ticket_follow_execution")
def ticket_follow_execution(sender, request: ApprovalRequest, entry, replayed: bool = False, **kwargs):
    ticket = _ticket(request)
    if ticket is None:
        return
    trace_record(ticket=ticket, span="ledger", status="ok", decision="refund_replayed" if replayed else "refund_issued",
                 tool="refunds.issue_refund",
                 reason=f"Ledger entry #{entry.pk}: {entry.amount} {entry.currency} on {request.order.external_id}"
                        + (" (already written: replayed by its key)." if replayed else "."),
                 data=_request_data(request, entry=entry.pk, replayed=replayed))


@receiver(refund_verified, dispatch_uid="refundagent.ticket_follow_verification")
def ticket_follow_verification(sender, request: ApprovalRequest, verdict: dict, **kwargs):
    ticket = _ticket(request)
    if ticket is None:
        return
    data = _request_data(request, verdict=verdict)
    if verdict.get("ok"):
        _ticket_update(ticket, status=Ticket.Status.REFUNDED,
                       stop_detail=f"Refunded {request.amount} {request.currency}: ledger entry #{verdict.get('entry')}, "
                                   "verified by the evaluator.")
        trace_record(ticket=ticket, span="verify", status="ok", decision="verified",
                     reason=f"Evaluator: exactly {request.amount} {request.currency} recorded under the approval's key.",
                     data=data)
        return
    failed = [c for c in verdict.get("checks", []) if not c.get("ok")]
    evidence = json.dumps(failed, default=str)
    _ticket_update(ticket, exclude=set(), status=Ticket.Status.FAILED, stop_reason=Ticket.StopReason.FAILED,
                   stop_detail=f"Verification of request #{request.pk} failed ({verdict.get('stage', 'verify')}): "
                               f"{', '.join(c['name'] for c in failed)}. Evidence: {evidence}")
    trace_record(ticket=ticket, span="verify", status="error", decision="verification_failed",
                 reason=f"Evaluator: {', '.join(c['name'] for c in failed)} failed on request #{request.pk}.", data=data)


@review_context_register
def ticket_review_sections(request: ApprovalRequest) -> list[dict]:
    """The review page's sections from this layer: the ticket, the draft and its rationale, the
    customer reply draft, the trace timeline."""
    ticket = _ticket(request)
    if ticket is None:
        return [{"title": "Ticket", "html": mark_safe("<p>No ticket is linked to this request.</p>")}]
    sections = [{
        "title": f"Ticket #{ticket.pk}",
        "html": format_html(
            "<table><tr><th>Status</th><td>{}</td></tr><tr><th>Stop</th><td>{} {}</td></tr>"
            "<tr><th>Filed by</th><td>{} at {}</td></tr><tr><th>Requested amount</th><td>{} {}</td></tr>"
            "<tr><th>Items</th><td>{}</td></tr>"
            "<tr><th>Customer message<br><small>(untrusted input)</small></th><td><pre class='ra-pre'>{}</pre></td></tr>"
            "</table>",
            ticket.get_status_display(), ticket.stop_reason or "", ticket.stop_detail,
            ticket.created_by.get_username(), f"{ticket.created_at:%Y-%m-%d %H:%M}",
            ticket.requested_amount if ticket.requested_amount is not None else "—", ticket.currency,
            ", ".join(ticket.items) or "whole order", ticket.message,
        ),
    }]
    draft = (ticket.drafts.filter(created_at__lte=request.created_at).order_by("-id").first()
             or ticket.drafts.order_by("-id").first())
    if draft is None:
        sections.append({"title": "Draft recommendation", "html": mark_safe("<p>No draft recorded.</p>")})
    else:
        gate = draft.gate_verdict or {}
        sections.append({
            "title": "Draft recommendation",
            "html": format_html(
                "<table><tr><th>Recommendation</th><td>{}</td></tr><tr><th>Drafted amount</th><td>{} {}</td></tr>"
                "<tr><th>Policy cited</th><td>{}</td></tr><tr><th>Rationale</th><td><pre class='ra-pre'>{}</pre></td></tr>"
                "<tr><th>Gate</th><td>{}: allowed {} — {}</td></tr></table>",
                draft.get_recommendation_display(), draft.amount if draft.amount is not None else "—", draft.currency,
                draft.policy_version or "(none)", draft.rationale,
                gate.get("outcome", "?"), gate.get("allowed_amount") or "—", " ".join(gate.get("reasons") or []),
            ),
        })
        sections.append({
            "title": "Customer reply draft (never sent by the product)",
            "html": format_html("<pre class='ra-pre'>{}</pre>", draft.customer_reply or "(empty)"),
        })
    events = list(ticket.trace_events.order_by("seq"))
    rows = format_html_join(
        "", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        ((e.seq, f"{e.at:%H:%M:%S}", e.span, e.status, e.decision, e.tool, e.reason) for e in events),
    )
    sections.append({
        "title": f"Trace timeline ({ticket.trace_id})",
        "html": format_html(
            "<table><thead><tr><th>#</th><th>at</th><th>span</th><th>status</th><th>decision</th><th>tool</th>"
            "<th>reason</th></tr></thead><tbody>{}</tbody></table>",
            rows,
        ) if events else mark_safe("<p>No trace events.</p>"),
    })
    return sections
