"""Tenant-scoped reads of tickets, their drafts and approvals."""

from django.db.models import F, Func, IntegerField, QuerySet, Subquery, Value

from approvals.models import ApprovalRequest
from approvals.schemas import approval_serialize
from approvals.selectors import approval_latest_for_ticket
from ledger.exceptions import NotFound

from .models import QUEUE_STATUSES, RefundDraft, Ticket


def ticket_list(*, tenant, status: str | None = None) -> QuerySet:
    """The tenant's tickets, newest first."""
    queryset = (
        Ticket.objects.for_tenant(tenant).select_related("order", "customer", "owner").order_by("-created_at", "-id")
    )
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def ticket_get(*, tenant, ticket_id: int) -> Ticket:
    """One ticket of the tenant; another tenant's answers NotFound, as if it did not exist."""
    tickets = Ticket.objects.for_tenant(tenant).select_related("order", "customer", "created_by", "refund_to", "owner")
    try:
        return tickets.get(pk=ticket_id)
    except Ticket.DoesNotExist:
        raise NotFound(f"Ticket {ticket_id} not found.") from None


def ticket_queue(*, tenant, reason: str | None = None, owner=None, unowned: bool = False) -> QuerySet:
    """The escalation queue: escalated, failed and payment-failed tickets, the longest waiting for
    a person first (`awaiting_person_since`, not the filing time: a ticket filed long ago and
    escalated just now has only just started to wait). `reason` narrows to one of those
    statuses; `owner` to one person's, `unowned` to nobody's. Served by ticket_queue_idx."""
    queryset = (
        Ticket.objects.for_tenant(tenant)
        .filter(status__in=QUEUE_STATUSES)
        .select_related("order", "customer", "owner")
        .order_by("awaiting_person_since", "id")
    )
    if reason:
        queryset = queryset.filter(status=reason)
    if owner is not None:
        queryset = queryset.filter(owner=owner)
    elif unowned:
        queryset = queryset.filter(owner__isnull=True)
    return queryset


def ticket_draft_latest(ticket: Ticket) -> RefundDraft | None:
    return RefundDraft.objects.filter(ticket=ticket).order_by("-created_at", "-id").first()


def ticket_approval_latest(ticket: Ticket) -> ApprovalRequest | None:
    """The newest approval request made for this ticket (ticket_ref is an opaque id to the
    approvals layer, so the tenant is checked here too)."""
    return approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk)


def ticket_summary_serialize(ticket: Ticket) -> dict:
    return {
        "id": ticket.pk,
        "status": ticket.status,
        "stop_reason": ticket.stop_reason,
        "order": ticket.order.external_id if ticket.order_id else None,
        "customer": ticket.customer.external_id,
        "requested_amount": ticket.requested_amount,
        "currency": ticket.currency,
        "owner": ticket.owner.get_username() if ticket.owner_id else None,
        "created_at": ticket.created_at,
        "updated_at": ticket.updated_at,
    }


def ticket_detail_serialize(ticket: Ticket) -> dict:
    """docs/api.md: GET /api/tickets/{id}."""
    draft = ticket_draft_latest(ticket)
    approval = ticket_approval_latest(ticket)
    return {
        **ticket_summary_serialize(ticket),
        "stop_detail": ticket.stop_detail,
        "customer_reply": ticket.customer_reply,
        "items": list(ticket.items or []),
        "refund_to": ticket.refund_to.external_id if ticket.refund_to_id else None,
        "refund_to_kind": ticket.refund_to.kind if ticket.refund_to_id else None,
        "draft": None
        if draft is None
        else {
            "recommendation": draft.recommendation,
            "amount": draft.amount,
            "currency": draft.currency,
            "policy_version": draft.policy_version,
            "rationale": draft.rationale,
            "customer_reply": draft.customer_reply,
            "gate": draft.gate_verdict,
            "created_at": draft.created_at,
        },
        "approval": None if approval is None else approval_serialize(approval),
        "trace_id": ticket.trace_id,
        "created_by": ticket.created_by.get_username(),
    }


# A ticket in one of these is finished: it no longer competes for the order's money.
FINISHED_STATUSES = (Ticket.Status.REFUNDED, Ticket.Status.DENIED, Ticket.Status.CLOSED)


def order_open_tickets(*, order, ticket):
    """The number of tickets on `order` not yet finished, `ticket` (the one being decided)
    included even while it names no order yet: what the risk rule on open tickets per order
    reads. An expression, so the gate counts them in its own query of the risk figures."""
    others = (
        Ticket.objects.filter(order=order)
        .exclude(pk=ticket.pk)
        .exclude(status__in=FINISHED_STATUSES)
        .order_by()
        .annotate(value=Func(F("id"), function="COUNT"))
        .values("value")[:1]
    )
    return Subquery(others, output_field=IntegerField()) + Value(1)
