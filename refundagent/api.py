"""The ticket endpoints (API.md), mounted at /api/tickets by the wiring. Thin: parse, call one service or
selector, serialise."""

from ninja import Query, Router, Status
from ninja.pagination import paginate

from ledger.pagination import LimitOffsetPage, SerializedQuerySet
from ledger.tenancy import tenant_for_user, user_require_role

from .schemas import TicketFilter, TicketIn, TicketOut, TicketSummaryOut, TraceOut
from .selectors import ticket_detail_serialize, ticket_get, ticket_list, ticket_summary_serialize
from .services import ticket_create
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
    )
    return Status(201, ticket_detail_serialize(ticket_get(tenant=ticket.tenant, ticket_id=ticket.pk)))


@router.get("", response=list[TicketSummaryOut])
@paginate(LimitOffsetPage)
def ticket_index(request, filters: Query[TicketFilter]):
    """The caller's tenant's tickets, newest first (`?status=escalated` to filter)."""
    user_require_role(request.user, "support", "finance")
    return SerializedQuerySet(ticket_list(tenant=tenant_for_user(request.user), status=filters.status), ticket_summary_serialize)


@router.get("/{int:ticket_id}", response=TicketOut)
def ticket_detail(request, ticket_id: int):
    user_require_role(request.user, "support", "finance")
    return ticket_detail_serialize(ticket_get(tenant=tenant_for_user(request.user), ticket_id=ticket_id))


@router.get("/{int:ticket_id}/trace", response=TraceOut)
def ticket_trace(request, ticket_id: int):
    """The ticket's trace, in order, redacted (it was redacted before it was stored)."""
    user_require_role(request.user, "support", "finance")
    return trace_export(ticket_get(tenant=tenant_for_user(request.user), ticket_id=ticket_id))
