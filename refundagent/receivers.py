"""Receivers for the approvals layer's signals, which may not import this app. Every
announcement reaches the ticket through one receiver (`on_approval_event`), which applies the
event's row of refundagent.ticket_events.TICKET_FOLLOW_UPS (`ticket_follow`). One receiver, so
that one queue: the approvals layer delivers a receiver's events of one ticket in the order they
happened, and keeps and retries one that failed before any later one runs (approvals.followups). Also the question
asked before a refused payment is filed again, and the review page's ticket sections,
registered with approvals.review and rendered from templates/refundagent/review/.
"""

from django.dispatch import receiver
from django.template.loader import render_to_string

from approvals import signals
from approvals.models import ApprovalRequest
from approvals.review import review_context_register

from . import ticket_events


def on_approval_event(sender, signal, request: ApprovalRequest, **kwargs):
    ticket_events.ticket_follow(signal=signal, request=request, **kwargs)


for _signal in ticket_events.TICKET_FOLLOW_UPS:
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
