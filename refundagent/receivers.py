"""Receivers for the approvals layer's signals, which may not import this app. Every
announcement reaches the ticket through one receiver (`on_approval_event`), which calls the
event's service in refundagent.ticket_events. One receiver, so that one queue: the approvals
layer delivers a receiver's events of one ticket in the order they happened, and keeps and
retries one that failed before any later one runs (approvals.followups). Also the question
asked before a refused payment is filed again, and the review page's ticket sections,
registered with approvals.review and rendered from templates/refundagent/review/.
"""

from django.dispatch import receiver
from django.template.loader import render_to_string

from approvals import signals
from approvals.models import ApprovalRequest
from approvals.review import review_context_register

from . import ticket_events


def _follow_vote(*, request, actor=None, **kwargs):
    ticket_events.ticket_follow_vote(request=request, actor=actor)


def _follow_approved(*, request, actor=None, **kwargs):
    ticket_events.ticket_follow_approved(request=request, actor=actor)


def _follow_denied(*, request, actor=None, **kwargs):
    ticket_events.ticket_follow_denied(request=request, actor=actor)


def _follow_escalated(*, request, actor=None, **kwargs):
    ticket_events.ticket_follow_escalated(request=request, actor=actor)


def _follow_changes_requested(*, request, actor=None, **kwargs):
    ticket_events.ticket_follow_changes_requested(request=request, actor=actor)


def _follow_expired(*, request, **kwargs):
    ticket_events.ticket_follow_expired(request=request)


def _follow_invalidated(*, request, actor=None, reason="", verdict=None, **kwargs):
    ticket_events.ticket_follow_invalidated(request=request, actor=actor, reason=reason, verdict=verdict or {})


def _follow_replaced(*, request, old, **kwargs):
    ticket_events.ticket_follow_replaced(request=request, old=old)


def _follow_executed(*, request, entry, replayed=False, **kwargs):
    ticket_events.ticket_follow_executed(request=request, entry=entry, replayed=replayed)


def _follow_verified(*, request, verdict, **kwargs):
    ticket_events.ticket_follow_verified(request=request, verdict=verdict)


def _follow_payment_failed(*, request, entry, reason="", **kwargs):
    ticket_events.ticket_follow_payment_failed(request=request, entry=entry, reason=reason)


# What the ticket does for each announcement.
TICKET_FOLLOW_UPS = {
    signals.approval_vote_recorded: _follow_vote,
    signals.approval_approved: _follow_approved,
    signals.approval_denied: _follow_denied,
    signals.approval_escalated: _follow_escalated,
    signals.approval_changes_requested: _follow_changes_requested,
    signals.approval_expired: _follow_expired,
    signals.approval_invalidated: _follow_invalidated,
    signals.approval_replaced: _follow_replaced,
    signals.refund_executed: _follow_executed,
    signals.refund_verified: _follow_verified,
    signals.refund_payment_failed: _follow_payment_failed,
}


def on_approval_event(sender, signal, request: ApprovalRequest, **kwargs):
    TICKET_FOLLOW_UPS[signal](request=request, **kwargs)


for _signal in TICKET_FOLLOW_UPS:
    _signal.connect(on_approval_event, dispatch_uid="refundagent.ticket_follow")


@receiver(signals.approval_refile_check, dispatch_uid="refundagent.ticket_refile_check")
def on_approval_refile_check(sender, request: ApprovalRequest, **kwargs):
    ticket_events.ticket_refile_check(request=request)


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
