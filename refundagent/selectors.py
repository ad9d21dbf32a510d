"""Tenant-scoped reads of tickets, their drafts and approvals."""

import functools
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Func, IntegerField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.schemas import approval_serialize
from approvals.selectors import approval_changes_asked, approval_latest_for_ticket
from ledger.exceptions import NotFound
from ledger.models import Customer, Order, PaymentMethod
from ledger.selectors import order_refund_position

from .models import QUEUE_STATUSES, AgentRun, RefundDraft, Ticket
from .replies import SENDABLE, ticket_denied_by_a_person, ticket_reply_key


def ticket_list(*, tenant, status: str | None = None) -> QuerySet:
    """The tenant's tickets, newest first."""
    # What the ticket's executed requests refunded, beside what it asked (ticket_ref is opaque to
    # approvals, so the tenant is matched too).
    refunded = (
        ApprovalRequest.objects.filter(
            tenant_id=OuterRef("tenant_id"), ticket_ref=OuterRef("pk"), status=ApprovalRequest.Status.EXECUTED
        )
        .order_by()
        .values("ticket_ref")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    queryset = (
        Ticket.objects.for_tenant(tenant)
        .select_related("order", "customer", "owner")
        .annotate(refunded_amount=Subquery(refunded))
        .order_by("-created_at", "-id")
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


def runs_waiting_on_provider(*, now: datetime | None = None) -> QuerySet:
    """The runs waiting out the model provider's 429/529 answers now. A worker renews its run's
    lease while it waits and a run gives up past AGENT_PROVIDER_OUTAGE_SECONDS, so a timestamp
    left by a worker that died mid-wait (lease lapsed) or older than the window is not a wait."""
    now = now or timezone.now()
    return AgentRun.objects.filter(
        status=AgentRun.Status.RUNNING,
        lease_expires_at__gt=now,
        provider_waiting_since__gt=now - timedelta(seconds=settings.AGENT_PROVIDER_OUTAGE_SECONDS),
    )


def ticket_provider_waiting_since(ticket: Ticket) -> datetime | None:
    """Since when the ticket's run waits on the model provider, or None (no query unless it runs)."""
    if ticket.status != Ticket.Status.RUNNING:
        return None
    return runs_waiting_on_provider().filter(ticket=ticket).values_list("provider_waiting_since", flat=True).first()


def ticket_draft_latest(ticket: Ticket) -> RefundDraft | None:
    return RefundDraft.objects.filter(ticket=ticket).order_by("-created_at", "-id").first()


def ticket_approval_latest(ticket: Ticket) -> ApprovalRequest | None:
    """The newest approval request made for this ticket (ticket_ref is an opaque id to the
    approvals layer, so the tenant is checked here too)."""
    return approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk)


def ticket_customer_orders(ticket: Ticket, *, limit: int = 20) -> list[dict]:
    """The ticket's customer's orders, newest first, each with what is still refundable: what a
    person picks from on a ticket filed without an order."""
    orders = Order.objects.filter(tenant_id=ticket.tenant_id, customer_id=ticket.customer_id).order_by(
        "-placed_at", "-id"
    )[:limit]
    return [{"order": order, "refundable": order_refund_position(order).refundable} for order in orders]


def ticket_others_open_on_order(ticket: Ticket) -> list[Ticket]:
    """Other tickets still open on the ticket's order: two tickets on one order would ask
    finance for the same money twice, so the page warns and links them."""
    if ticket.order_id is None:
        return []
    settled = (Ticket.Status.CLOSED, Ticket.Status.REFUNDED, Ticket.Status.DENIED)
    return list(
        Ticket.objects.filter(tenant_id=ticket.tenant_id, order_id=ticket.order_id)
        .exclude(pk=ticket.pk)
        .exclude(status__in=settled)
        .order_by("pk")[:10]
    )


def ticket_customer_methods(ticket: Ticket) -> list[PaymentMethod]:
    """The ticket's customer's own payment methods: what "refund to" picks from."""
    return _methods_of(ticket.customer_id)


def customer_methods(*, tenant, customer: str) -> list[PaymentMethod] | None:
    """The payment methods of the tenant's customer `customer` (the shop's id, as typed on the
    new-ticket form): what its "refund to" picks from. None when the tenant has no such customer;
    another tenant's customer is answered exactly so (it does not exist for this tenant)."""
    customer_id = Customer.objects.for_tenant(tenant).filter(external_id=customer).values_list("pk", flat=True).first()
    return None if customer_id is None else _methods_of(customer_id)


def _methods_of(customer_id: int) -> list[PaymentMethod]:
    return list(PaymentMethod.objects.filter(customer_id=customer_id).order_by("kind", "external_id"))


def ticket_changes_asked(ticket: Ticket, *, exclude_pk: int | None = None) -> ApprovalRequest | None:
    """The newest of the ticket's requests finance sent back, with what they asked for."""
    return approval_changes_asked(tenant=ticket.tenant_id, ticket_ref=ticket.pk, exclude_pk=exclude_pk)


def ticket_summary_serialize(ticket: Ticket) -> dict:
    return {
        "id": ticket.pk,
        "status": ticket.status,
        "stop_reason": ticket.stop_reason,
        "order": ticket.order.external_id if ticket.order_id else None,
        "customer": ticket.customer.external_id if ticket.customer_id else None,
        "requested_amount": ticket.requested_amount,
        "currency": ticket.currency,
        "owner": ticket.owner.get_username() if ticket.owner_id else None,
        "created_at": ticket.created_at,
        "updated_at": ticket.updated_at,
    }


def ticket_detail_serialize(ticket: Ticket, *, filed_now: bool = False) -> dict:
    """docs/api.md: GET /api/tickets/{id}. `filed_now`: the ticket as this very request filed it
    (ticket_create's). Nobody could draft, approve, write or reply on it before it was stored,
    so nothing of it is read: the filing's answer is what a GET answers right after."""
    draft = None if filed_now else ticket_draft_latest(ticket)
    approval = None if filed_now else ticket_approval_latest(ticket)
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
        "created_by": ticket.created_by.get_username() if ticket.created_by_id else None,
        "source": ticket.source,
        "messages": []
        if filed_now
        else [
            {"direction": m.direction, "from": m.sender, "at": m.at, "text": m.text}
            for m in ticket.messages.order_by("at", "id")
        ],
        "replies": []
        if filed_now
        else [
            {"outcome": r.outcome, "sent_at": r.sent_at, "status": r.status, "to": r.to, "error": r.last_error or None}
            for r in ticket.replies.order_by("created_at", "id")
        ],
        "reply_due": ticket_reply_due(ticket),
    }


def ticket_reply_due(ticket: Ticket) -> dict | None:
    """What support is prompted to send now, or None: the ticket's outcome is final and no reply
    for it was sent yet. `correction` when the customer was already told another outcome (a refund
    announced, then refused by the provider)."""
    if ticket.status not in SENDABLE:
        return None
    if ticket.status == Ticket.Status.DENIED and not ticket_denied_by_a_person(ticket):
        return None
    key = ticket_reply_key(ticket=ticket)
    replies = list(ticket.replies.values_list("key", "outcome", "status"))
    if any(reply_key == key for reply_key, _, _ in replies):
        return None
    told = [outcome for _, outcome, status in replies if status == "sent"]
    return {
        "outcome": ticket.status,
        "correction": bool(told) and told[-1] != ticket.status,
        "told": told[-1] if told else None,
    }


# A ticket in one of these is finished: it no longer competes for the order's money.
FINISHED_STATUSES = (Ticket.Status.REFUNDED, Ticket.Status.DENIED, Ticket.Status.CLOSED)


def order_open_tickets(*, order, ticket):
    """The number of tickets on `order` not yet finished, `ticket` (the one being decided)
    included even while it names no order yet: what the risk rule on open tickets per order
    reads. An expression, so the gate counts them in its own query of the risk figures."""
    others = _unfinished_tickets_count().filter(~Q(pk=ticket.pk), order=order)
    return Subquery(others, output_field=_COUNT) + Value(1)


_COUNT = IntegerField()


@functools.cache
def _unfinished_tickets_count():
    """COUNT of the unfinished tickets, one row whatever matches: built once per process and
    filtered per order, as the decision counts them every time."""
    return Ticket.objects.exclude(status__in=FINISHED_STATUSES).order_by().values(value=Func(F("id"), function="COUNT"))
