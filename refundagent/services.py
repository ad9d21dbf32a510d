"""Writes on tickets made by people (support staff, finance). The agent's own writes live in
`refundagent.agent`."""

import uuid
from decimal import Decimal

from django.db import transaction

from approvals.exceptions import ApprovalConflict
from approvals.locks import order_lock
from approvals.models import ApprovalRequest
from approvals.services.proposals import approval_proposal_create
from approvals.services.withdrawal import approval_requests_withdraw
from ledger.exceptions import InvalidInput
from ledger.models import Order, PaymentMethod
from ledger.money import money_check_currency, money_parse
from ledger.selectors import customer_get, order_get
from ledger.telemetry import current_trace_uuid, ticket_span_mark
from ledger.tenancy import tenant_for_user, user_require_role

from .exceptions import TicketStateConflict
from .models import QUEUE_STATUSES, Ticket
from .outbox import ticket_run_publish
from .redaction import sensitive_values_for_ticket
from .ticket_state import ticket_transition, ticket_transition_allowed
from .tracing import trace_event_build, trace_events_write, trace_record

MAX_MESSAGE_LENGTH = 20_000
MAX_ITEMS = 100
MAX_REPLY_LENGTH = 4000


def ticket_create(
    *,
    user,
    customer: str,
    message: str,
    order: str | None = None,
    requested_amount: Decimal | str | None = None,
    items: list[str] | None = None,
    refund_to: str | None = None,
    source: str = Ticket.Source.WEB,
) -> Ticket:
    """File a refund ticket of the caller's tenant and queue the agent run.

    With `order` the ticket is about that order (as always). Without it the ticket is
    customer-level: the agent must find the order among the customer's own orders, and the
    runtime sets the ticket's order when it accepts the draft that names it. `items` need an
    order (they are checked against it).

    `refund_to` is where the customer wants the money: the external id of one of their payment
    methods (e.g. "gift_card_7"); blank means the order's original payment method.

    Another tenant's order or customer answers NotFound (404), a customer who is not the
    order's, items without an order, or a payment method that is not that customer's,
    InvalidInput (422); nothing is written in either case."""
    user_require_role(user, "support")
    tenant = tenant_for_user(user)
    order = (order or "").strip()
    found_order = order_get(tenant=tenant, external_id=order) if order else None
    if found_order is not None and _is_customer(found_order.customer, tenant=tenant, external_id=customer):
        found_customer = found_order.customer  # read with the order: one query fewer
    else:
        found_customer = customer_get(tenant=tenant, external_id=customer)
    if found_order is not None and found_order.customer_id != found_customer.pk:
        raise InvalidInput(f"Order {order} does not belong to customer {customer}.", code="customer_mismatch")
    message = (message or "").strip()
    if not message:
        raise InvalidInput("The message must not be empty.", code="message_required")
    if len(message) > MAX_MESSAGE_LENGTH:
        raise InvalidInput(f"The message is longer than {MAX_MESSAGE_LENGTH} characters.", code="message_too_long")
    amount = None
    if requested_amount not in (None, ""):
        amount = money_parse(requested_amount, field="requested_amount")
        if amount <= 0:
            raise InvalidInput("The requested amount must be positive.", code="amount_not_positive")
        if found_order is not None:
            money_check_currency(amount=amount, currency=found_order.currency, field="requested_amount")
    items = [str(i).strip() for i in (items or []) if str(i).strip()]
    if len(items) > MAX_ITEMS:
        raise InvalidInput(f"At most {MAX_ITEMS} items per ticket.", code="too_many_items")
    if items and found_order is None:
        raise InvalidInput("Items can only be named together with their order.", code="items_need_order")
    if found_order is not None and items:  # nothing to check (and no query) without items
        units_on_order: dict[str, int] = {}
        for item_id, quantity in found_order.items.values_list("item_id", "quantity"):
            units_on_order[item_id] = units_on_order.get(item_id, 0) + quantity
        unknown = [i for i in items if i not in units_on_order]
        if unknown:
            raise InvalidInput(f"Items {', '.join(unknown)} are not on order {order}.", code="item_not_on_order")
        # An item id names one unit: more units than the order has is a mistake to say now, not
        # a refund the gate would later call "already refunded".
        over = {i: items.count(i) for i in dict.fromkeys(items) if items.count(i) > units_on_order[i]}
        if over:
            raise InvalidInput(
                "; ".join(
                    f"{item_id} is named {named} times, but order {order} has {units_on_order[item_id]} unit(s) of it"
                    for item_id, named in over.items()
                )
                + ". Name an item once per unit.",
                code="items_exceed_quantity",
                details={"units_on_order": {i: units_on_order[i] for i in over}},
            )
    method = None
    refund_to = (refund_to or "").strip()
    if refund_to:
        try:
            # get(), not first(): unique per customer, so no ORDER BY to build and run.
            method = PaymentMethod.objects.get(customer=found_customer, external_id=refund_to)
        except PaymentMethod.DoesNotExist:
            raise InvalidInput(
                f"{refund_to} is not a payment method of customer {customer}.", code="unknown_payment_method"
            ) from None

    ticket = Ticket(
        tenant=tenant,
        order=found_order,
        customer=found_customer,
        message=message,
        requested_amount=amount,
        # A customer-level ticket has no currency until its order is known.
        currency=found_order.currency if found_order is not None else "",
        items=items,
        refund_to=method,
        created_by=user,
        source=source,
    )
    return ticket_file(ticket=ticket, reason=f"Filed by {user.get_username()}.")


def ticket_file(*, ticket: Ticket, reason: str, escalate: str = "") -> Ticket:
    """Store a new ticket with its `filed` trace event and queue its agent run: the one way a
    ticket is filed (by a person in `ticket_create`, by the support inbox). With `escalate` (a
    stop detail in words) the ticket goes to the human queue in the same transaction instead,
    and no agent run is queued."""
    ticket.trace_id = _trace_id_new()
    with transaction.atomic():
        ticket.save(force_insert=True)
        # The filed event names only the filer (no customer data to redact by value; the
        # patterns still apply): no read of the customer's payment values at filing. Nobody
        # else can see the ticket before this commits: no lock to take for its first number.
        events = [
            trace_event_build(ticket=ticket, sensitive=[], span="run", status="queued", decision="filed", reason=reason)
        ]
        if escalate:
            ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED, detail=escalate)
            events.append(
                trace_event_build(
                    ticket=ticket,
                    sensitive=[],
                    span="stop",
                    status="escalated",
                    decision="escalate",
                    reason=escalate[:200],
                )
            )
        trace_events_write(events, locked=True)
    ticket_span_mark(ticket)
    if not escalate:
        # The queued row is the agent-run instruction (refundagent.outbox): a broker that is down
        # when this commits never fails the filing; the sweep enqueues it later. Outside a
        # caller's transaction the row is committed already and this runs at once.
        ticket_pk = ticket.pk
        transaction.on_commit(lambda: ticket_run_enqueue(ticket_pk))
    return ticket


def _is_customer(candidate, *, tenant, external_id: str) -> bool:
    return candidate.tenant_id == tenant.pk and candidate.external_id == external_id


def _trace_id_new() -> uuid.UUID:
    """With tracing on, the ticket's trace id IS the OpenTelemetry trace of the request that
    filed it (the same 128 bits): one id in the admin and in the tracing backend. A second ticket
    filed in the same trace (a batch, the demo) gets a fresh id and finds it by the attribute
    refund.ticket.trace_id. Tickets of one trace are filed one after another, so the check
    does not race."""
    current = current_trace_uuid()
    if current is None or Ticket.objects.filter(trace_id=current).exists():
        return uuid.uuid4()
    return current


def _trace(ticket: Ticket, **kwargs):
    """trace_record with the values to redact derived from the ticket (its order, or on a
    customer-level ticket its customer)."""
    return trace_record(ticket=ticket, sensitive=sensitive_values_for_ticket(ticket), **kwargs)


def ticket_rerun(*, ticket: Ticket, why: str) -> bool:
    """Put a `failed` ticket back in the agent's queue (a run that failed for a provider outage,
    by the sweep or a person); the new run starts from the ticket. True if this call moved it."""
    with transaction.atomic():
        if not ticket_transition(ticket=ticket, to=Ticket.Status.QUEUED, only_from={Ticket.Status.FAILED}, detail=why):
            return False
        _trace(ticket=ticket, span="run", status="queued", decision="rerun", reason=why[:200])
        ticket_pk = ticket.pk
        transaction.on_commit(lambda: ticket_run_enqueue(ticket_pk))
    return True


def ticket_run_enqueue(ticket_id: int) -> None:
    """Hand a queued ticket to a worker (after commit). Never raises: see refundagent.outbox."""
    ticket_run_publish(ticket_id=ticket_id, mark_dispatched=False)


def ticket_escalate(*, ticket: Ticket, user, note: str = "") -> Ticket:
    """Send a ticket to the human queue by hand (any ticket that is not settled). A request of the
    ticket still pending with finance is withdrawn in the same transaction: a person now owns
    the ticket, and finance can no longer approve what it asked for (409)."""
    user_require_role(user, "support", "finance")
    detail = f"Escalated by {user.get_username()}" + (f": {note}" if note else ".")
    with transaction.atomic():
        if not ticket_transition_allowed(ticket=ticket, to=Ticket.Status.ESCALATED):
            raise TicketStateConflict(f"Ticket {ticket.pk} is {ticket.status}; it cannot be escalated.")
        withdrawn = _withdraw_pending(ticket, user=user, reason=detail)
        if not ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED, detail=detail):
            raise TicketStateConflict(f"Ticket {ticket.pk} is {ticket.status}; it cannot be escalated.")
        _trace(
            ticket,
            span="stop",
            status="escalated",
            decision="escalate",
            reason=ticket.stop_detail,
            data={"withdrawn": withdrawn},
        )
    return ticket


def ticket_close(*, ticket: Ticket, user, note: str = "", reply: str = "") -> Ticket:
    """Close a ticket (done, or nothing more to do). A ticket waiting for finance cannot be
    closed from under the approval: decide the approval first (or escalate, which withdraws
    it). Any request of the ticket still pending is withdrawn in the same transaction. The
    ticket keeps the reason and detail it stopped with; the note goes to the trace. `reply`, if
    given, becomes the ticket's customer reply (what support sends the customer)."""
    user_require_role(user, "support", "finance")
    reply = (reply or "").strip()
    if len(reply) > MAX_REPLY_LENGTH:
        raise InvalidInput(f"The reply is longer than {MAX_REPLY_LENGTH} characters.", code="reply_too_long")
    fields = {"customer_reply": reply} if reply else {}
    reason = f"Closed by {user.get_username()}" + (f": {note}" if note else ".")
    with transaction.atomic():
        if not ticket_transition_allowed(ticket=ticket, to=Ticket.Status.CLOSED):
            raise TicketStateConflict(f"Ticket {ticket.pk} is {ticket.status}; it cannot be closed now.")
        withdrawn = _withdraw_pending(ticket, user=user, reason=reason)
        if not ticket_transition(ticket=ticket, to=Ticket.Status.CLOSED, **fields):
            # e.g. finance approved in the same instant: the withdrawal rolls back with this.
            raise TicketStateConflict(f"Ticket {ticket.pk} is {ticket.status}; it cannot be closed now.")
        _trace(
            ticket,
            span="stop",
            status="closed",
            decision="close",
            reason=reason,
            data={"withdrawn": withdrawn, "by": user.get_username(), "note": note, "reply_written": bool(reply)},
        )
    return ticket


def _withdraw_pending(ticket: Ticket, *, user, reason: str) -> list[int]:
    """Withdraw the ticket's pending approval requests first: they take the order lock before
    the ticket row is written, the same order a racing approval takes them in. The ticket's own
    order is locked first even when nothing is pending: finance filing a refused payment again
    (approvals.ledger_events) holds that lock while it asks the ticket, so either it sees the ticket as
    this move leaves it, or this move finds its new request pending."""
    if ticket.order_id is not None:
        order_lock(order_id=ticket.order_id)
    try:
        withdrawn = approval_requests_withdraw(tenant=ticket.tenant, ticket_ref=ticket.pk, reason=reason, actor=user)
    except ApprovalConflict as exc:
        raise TicketStateConflict(exc.message, code=exc.code) from None
    return [request.pk for request in withdrawn]


def ticket_assign(*, ticket: Ticket, user, to_me: bool) -> Ticket:
    """Take a ticket of the escalation queue (it becomes the caller's, visible to everyone) or
    hand it back (`to_me=False`: nobody owns it). Compare-and-set: a ticket someone else took
    in the meantime is a conflict, and only a ticket in the queue can be taken."""
    user_require_role(user, "support", "finance")
    who = user.get_username()
    with transaction.atomic():
        if to_me:
            moved = (
                Ticket.objects.filter(pk=ticket.pk, status__in=QUEUE_STATUSES, owner__isnull=True).update(owner=user)
                == 1
            )
            if not moved:
                current = Ticket.objects.select_related("owner").get(pk=ticket.pk)
                if current.owner_id == user.pk:
                    return current
                raise TicketStateConflict(
                    f"Ticket {ticket.pk} is {current.status}"
                    + (f" and owned by {current.owner.get_username()}" if current.owner_id else "")
                    + "; only an unowned ticket in the escalation queue can be taken."
                )
            ticket.owner = user
            _trace(
                ticket,
                span="stop",
                status=ticket.status,
                decision="take",
                reason=f"Taken by {who}.",
                data={"owner": who},
            )
        else:
            previous = Ticket.objects.select_related("owner").get(pk=ticket.pk).owner
            if previous is None:
                ticket.owner = None
                return ticket
            Ticket.objects.filter(pk=ticket.pk, owner=previous).update(owner=None)
            ticket.owner = None
            _trace(
                ticket,
                span="stop",
                status=ticket.status,
                decision="hand_back",
                reason=f"Handed back to the queue by {who}"
                + (f" (was {previous.get_username()})." if previous.pk != user.pk else "."),
                data={"by": who, "previous_owner": previous.get_username()},
            )
    return ticket


def _payment_method_find(ticket: Ticket, external_id: str) -> PaymentMethod:
    """The payment method `external_id` of the order's customer. Ids are unique per customer
    only, so the customer's own comes first; another customer's of the tenant is returned for the
    proposal to refuse (foreign_destination), and an id unknown to the tenant is refused here."""
    methods = PaymentMethod.objects.filter(customer__tenant_id=ticket.tenant_id, external_id=external_id)
    methods = methods.select_related("customer")
    method = methods.filter(customer_id=ticket.customer_id).first() or methods.first()
    if method is None:
        raise InvalidInput(f"{external_id} is not a payment method of this shop.", code="unknown_payment_method")
    return method


def _proposal_order(ticket: Ticket, external_id: str) -> Order:
    """The order a person's proposal is for: the ticket's, or, on a ticket without one, the
    customer's order they picked (another customer's or tenant's is refused as unknown)."""
    if ticket.order_id is not None:
        if external_id and external_id != ticket.order.external_id:
            raise InvalidInput(
                f"Ticket {ticket.pk} is about order {ticket.order.external_id}, not {external_id}.",
                code="order_mismatch",
            )
        return ticket.order
    if not external_id:
        raise InvalidInput(
            "The ticket names no order: pick which of the customer's orders the refund is for.",
            code="order_required",
        )
    picked = Order.objects.filter(
        tenant_id=ticket.tenant_id, customer_id=ticket.customer_id, external_id=external_id
    ).first()
    if picked is None:
        raise InvalidInput(
            f"{external_id} is not an order of customer {ticket.customer.external_id}.", code="order_not_customers"
        )
    return picked


def ticket_refund_propose(
    *,
    ticket: Ticket,
    user,
    amount,
    reason: str = "",
    exception: bool = False,
    items: list[str] | None = None,
    refund_to: str | None = None,
    currency: str | None = None,
    order: str | None = None,
) -> ApprovalRequest:
    """A person proposes an exact refund on an escalated, failed or payment-failed ticket: an
    approval request with origin `human` (approvals.services.proposals: the gate's hard limits, the
    proposer never approves, an exception needs a reason and two approvers). The ticket moves to
    approval_required in the same transaction; any refusal writes nothing.

    `order` (an order id): on a ticket that names no order, which of the customer's orders the
    refund is for (required there; the ticket then names it); on a ticket with an order, it may
    only repeat that order."""
    user_require_role(user, "support", "finance")
    if ticket.status not in QUEUE_STATUSES:
        raise TicketStateConflict(
            f"Ticket {ticket.pk} is {ticket.status}; a person proposes a refund only on an escalated, failed or "
            "payment-failed ticket."
        )
    if ticket.customer_id is None:
        # The sender is a claim, not an identity: no refund before a person knows whose ticket it is.
        raise TicketStateConflict(
            f"Ticket {ticket.pk} has no customer (an unknown or unverified sender); no refund can be proposed on it.",
            code="no_customer",
        )
    picked = _proposal_order(ticket, (order or "").strip())
    method = None
    refund_to = (refund_to or "").strip()
    if refund_to:
        method = _payment_method_find(ticket, refund_to)
    elif ticket.refund_to_id:
        method = ticket.refund_to
    with transaction.atomic():
        request = approval_proposal_create(
            user=user,
            order=picked,
            amount=amount,
            reason=reason,
            exception=exception,
            items=items if items is not None else list(ticket.items or []),
            refund_to=method,
            currency=currency,
            ticket_ref=ticket.pk,
            filed_by=ticket.created_by,
            trace_id=str(ticket.trace_id),
        )
        who = user.get_username()
        kind = "a policy exception" if request.policy_exception else "a refund"
        detail = (
            f"{who} proposed {kind} of {request.amount} {request.currency} (request #{request.pk}): "
            f"finance must approve" + (" (two distinct approvers)." if request.required_approvals > 1 else ".")
        )
        # A ticket filed without an order names the one the person picked, in the same UPDATE.
        named = {"order": picked} if ticket.order_id is None else {}
        if not ticket_transition(
            ticket=ticket, to=Ticket.Status.APPROVAL_REQUIRED, detail=detail, only_from=QUEUE_STATUSES, **named
        ):
            raise TicketStateConflict(f"Ticket {ticket.pk} moved on while the refund was proposed; reload it.")
        _trace(
            ticket,
            span="approval",
            status="pending",
            decision="human_proposal",
            reason=f"{who} proposed {kind}: {request.amount} {request.currency} on {request.order.external_id}, "
            f"request #{request.pk}.",
            data={
                "approval": request.pk,
                "amount": str(request.amount),
                "currency": request.currency,
                "args_hash": request.args_hash,
                "idempotency_key": request.idempotency_key,
                "policy_exception": request.policy_exception,
                "waived_rules": request.waived_rules,
                "reason": request.proposal_reason,
                "required_approvals": request.required_approvals,
                "by": who,
            },
        )
    return request
