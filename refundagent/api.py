"""The ticket endpoints (docs/api.md), mounted at /api/tickets by the wiring. Thin: parse, call one service or
selector, serialise."""

from ninja import Query, Router, Status
from ninja.pagination import paginate

from approvals.schemas import ApprovalOut, approval_serialize
from approvals.selectors import approvals_for_tenant
from ledger.pagination import LimitOffsetPage, SerializedQuerySet
from ledger.tenancy import tenant_for_user, user_require_access

from .models import Ticket
from .replies_send import ticket_reply_send
from .schemas import (
    AssignIn,
    ProposalIn,
    ReplyIn,
    ReplyOut,
    TicketFilter,
    TicketIn,
    TicketOut,
    TicketSummaryOut,
    TraceOut,
)
from .selectors import ticket_detail_serialize, ticket_get, ticket_list, ticket_summary_serialize
from .services import ticket_assign, ticket_create, ticket_refund_propose
from .tracing import trace_export

router = Router(tags=["tickets"])


@router.post("", response={201: TicketOut})
def ticket_file(request, payload: TicketIn):
    """File a refund ticket (support). The agent run is queued once the ticket is stored."""
    ticket = ticket_create(
        user=request.user,
        order=payload.order,
        customer=payload.customer,
        message=payload.message,
        requested_amount=payload.requested_amount,
        items=payload.items,
        refund_to=payload.refund_to,
        source=Ticket.Source.API,
    )
    # Made from the ticket as filed, not read back (what GET /api/tickets/{id} answers right
    # after): no query is left to fail once the filing committed, so no transaction of the
    # view's own is needed to answer a stored ticket with 201.
    return Status(201, ticket_detail_serialize(ticket, filed_now=True))


@router.get("", response=list[TicketSummaryOut])
@paginate(LimitOffsetPage)
def ticket_index(request, filters: Query[TicketFilter]):
    """The caller's tenant's tickets, newest first (`?status=escalated` to filter)."""
    user_require_access(request.user, "tickets.read")
    return SerializedQuerySet(
        ticket_list(tenant=tenant_for_user(request.user), status=filters.status), ticket_summary_serialize
    )


@router.get("/{int:ticket_id}", response=TicketOut)
def ticket_detail(request, ticket_id: int):
    user_require_access(request.user, "tickets.read")
    return ticket_detail_serialize(ticket_get(tenant=tenant_for_user(request.user), ticket_id=ticket_id))


@router.get("/{int:ticket_id}/trace", response=TraceOut)
def ticket_trace(request, ticket_id: int):
    """The ticket's trace, in order, redacted (it was redacted before it was stored)."""
    user_require_access(request.user, "tickets.read")
    return trace_export(ticket_get(tenant=tenant_for_user(request.user), ticket_id=ticket_id))


@router.post("/{int:ticket_id}/proposal", response={201: ApprovalOut})
def ticket_proposal(request, ticket_id: int, payload: ProposalIn):
    """A person proposes an exact refund on an escalated, failed or payment_failed ticket (support,
    finance): 201 with the approval request (origin `human`). The gate's hard limits answer 422 and
    nothing is written; a ticket not in the queue 409."""
    user_require_access(request.user, "tickets.work")
    tenant = tenant_for_user(request.user)
    ticket = ticket_get(tenant=tenant, ticket_id=ticket_id)
    made = ticket_refund_propose(
        ticket=ticket,
        user=request.user,
        amount=payload.amount,
        reason=payload.reason,
        exception=payload.exception,
        items=payload.items,
        refund_to=payload.refund_to,
        currency=payload.currency,
        order=payload.order,
    )
    # Read back by tenant: a support proposer may not have the finance role approval_get asks for.
    return Status(201, approval_serialize(approvals_for_tenant(tenant).get(pk=made.pk)))


@router.post("/{int:ticket_id}/assign", response=TicketOut)
def ticket_assign_endpoint(request, ticket_id: int, payload: AssignIn):
    """Take a ticket of the escalation queue (`{"to": "me"}`) or hand it back (`{"to": null}`)."""
    user_require_access(request.user, "tickets.work")
    tenant = tenant_for_user(request.user)
    ticket_assign(ticket=ticket_get(tenant=tenant, ticket_id=ticket_id), user=request.user, to_me=payload.to == "me")
    return ticket_detail_serialize(ticket_get(tenant=tenant, ticket_id=ticket_id))


@router.post("/{int:ticket_id}/reply", response={200: ReplyOut, 202: ReplyOut})
def ticket_reply(request, ticket_id: int, payload: ReplyIn):
    """Send the reviewed reply to the customer (support): 202, emailed once per ticket and outcome
    by a worker; a repeat answers 200 with the same send. 409 `outcome_not_final` while the refund
    is not paid yet or the agent or finance still has the ticket."""
    reply, created = ticket_reply_send(ticket_id=ticket_id, user=request.user, text=payload.text)
    body = {"outcome": reply.outcome, "sent_at": reply.sent_at, "status": reply.status, "to": reply.to}
    return Status(202 if created else 200, body)
