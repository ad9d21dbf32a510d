"""Receivers for the approvals layer's signals, which may not import this app: one per event,
each one call into refundagent.ticket_events. Also the review page's ticket sections, registered
with approvals.review and rendered from templates/refundagent/review/.
"""

from django.dispatch import receiver
from django.template.loader import render_to_string

from approvals import signals
from approvals.models import ApprovalRequest
from approvals.review import review_context_register

from . import ticket_events


@receiver(signals.approval_vote_recorded, dispatch_uid="refundagent.ticket_follow_vote")
def on_approval_vote_recorded(sender, request: ApprovalRequest, actor=None, **kwargs):
    ticket_events.ticket_follow_vote(request=request, actor=actor)


@receiver(signals.approval_approved, dispatch_uid="refundagent.ticket_follow_approved")
def on_approval_approved(sender, request: ApprovalRequest, actor=None, **kwargs):
    ticket_events.ticket_follow_approved(request=request, actor=actor)


@receiver(signals.approval_denied, dispatch_uid="refundagent.ticket_follow_denied")
def on_approval_denied(sender, request: ApprovalRequest, actor=None, **kwargs):
    ticket_events.ticket_follow_denied(request=request, actor=actor)


@receiver(signals.approval_escalated, dispatch_uid="refundagent.ticket_follow_escalated")
def on_approval_escalated(sender, request: ApprovalRequest, actor=None, **kwargs):
    ticket_events.ticket_follow_escalated(request=request, actor=actor)


@receiver(signals.approval_changes_requested, dispatch_uid="refundagent.ticket_follow_changes_requested")
def on_approval_changes_requested(sender, request: ApprovalRequest, actor=None, **kwargs):
    ticket_events.ticket_follow_changes_requested(request=request, actor=actor)


@receiver(signals.approval_expired, dispatch_uid="refundagent.ticket_follow_expired")
def on_approval_expired(sender, request: ApprovalRequest, **kwargs):
    ticket_events.ticket_follow_expired(request=request)


@receiver(signals.approval_invalidated, dispatch_uid="refundagent.ticket_follow_invalidated")
def on_approval_invalidated(sender, request: ApprovalRequest, actor=None, reason="", verdict=None, **kwargs):
    ticket_events.ticket_follow_invalidated(request=request, actor=actor, reason=reason, verdict=verdict or {})


@receiver(signals.approval_replaced, dispatch_uid="refundagent.ticket_follow_replaced")
def on_approval_replaced(sender, request: ApprovalRequest, old: ApprovalRequest, **kwargs):
    ticket_events.ticket_follow_replaced(request=request, old=old)


@receiver(signals.approval_refile_check, dispatch_uid="refundagent.ticket_refile_check")
def on_approval_refile_check(sender, request: ApprovalRequest, **kwargs):
    ticket_events.ticket_refile_check(request=request)


@receiver(signals.refund_executed, dispatch_uid="refundagent.ticket_follow_executed")
def on_refund_executed(sender, request: ApprovalRequest, entry, replayed: bool = False, **kwargs):
    ticket_events.ticket_follow_executed(request=request, entry=entry, replayed=replayed)


@receiver(signals.refund_verified, dispatch_uid="refundagent.ticket_follow_verified")
def on_refund_verified(sender, request: ApprovalRequest, verdict: dict, **kwargs):
    ticket_events.ticket_follow_verified(request=request, verdict=verdict)


@receiver(signals.refund_payment_failed, dispatch_uid="refundagent.ticket_follow_payment_failed")
def on_refund_payment_failed(sender, request: ApprovalRequest, entry, reason: str = "", **kwargs):
    ticket_events.ticket_follow_payment_failed(request=request, entry=entry, reason=reason)


@review_context_register
def ticket_review_sections(request: ApprovalRequest) -> list[dict]:
    """The review page's sections from this layer: the ticket, the draft and its rationale, the
    customer reply draft, the trace timeline."""
    ticket = ticket_events.ticket_of_request(request)
    if ticket is None:
        return [{"title": "Ticket", "html": render_to_string("refundagent/review/ticket.html", {"ticket": None})}]
    sections = [
        {
            "title": f"Ticket #{ticket.pk}",
            "html": render_to_string("refundagent/review/ticket.html", {"ticket": ticket}),
        }
    ]
    if request.origin == ApprovalRequest.Origin.HUMAN:
        sections.append(
            {
                "title": "Proposed by a person" + (" (policy exception)" if request.policy_exception else ""),
                "html": render_to_string("refundagent/review/proposal.html", {"request": request}),
            }
        )
    draft = (
        ticket.drafts.filter(created_at__lte=request.created_at).order_by("-id").first()
        or ticket.drafts.order_by("-id").first()
    )
    context = {"draft": draft, "gate": (draft.gate_verdict or {}) if draft else {}}
    sections.append(
        {
            "title": "Draft recommendation",
            "id": "ra-draft",
            "beside": True,
            "html": render_to_string("refundagent/review/draft.html", context),
        }
    )
    if draft is not None or ticket.customer_reply:
        sections.append(
            {
                "title": "Customer reply draft (never sent by the product)",
                "html": render_to_string("refundagent/review/reply.html", {**context, "ticket": ticket}),
            }
        )
    events = list(ticket.trace_events.order_by("seq"))
    sections.append(
        {
            "title": f"Trace timeline ({ticket.trace_id})",
            "id": "ra-trace",
            "wide": True,
            "html": render_to_string("refundagent/review/trace.html", {"events": events}),
        }
    )
    return sections
