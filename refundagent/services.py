"""Writes on tickets made by people (support staff, finance). The agent's own writes live in
`refundagent.agent`."""

from decimal import Decimal

from django.db import transaction

from ledger.exceptions import InvalidInput
from ledger.models import PaymentMethod
from ledger.selectors import customer_get, order_get
from ledger.services import money
from ledger.tenancy import tenant_for_user, user_require_role

from .exceptions import TicketStateConflict
from .models import Ticket
from .outbox import ticket_run_publish
from .redaction import sensitive_values_for_ticket
from .ticket_state import ticket_transition
from .tracing import trace_record

MAX_MESSAGE_LENGTH = 20_000
MAX_ITEMS = 100


def ticket_create(
    *,
    user,
    customer: str,
    message: str,
    order: str | None = None,
    requested_amount: Decimal | str | None = None,
    items: list[str] | None = None,
    refund_to: str | None = None,
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
        amount = money(requested_amount)
        if amount <= 0:
            raise InvalidInput("The requested amount must be positive.", code="amount_not_positive")
    items = [str(i).strip() for i in (items or []) if str(i).strip()]
    if len(items) > MAX_ITEMS:
        raise InvalidInput(f"At most {MAX_ITEMS} items per ticket.", code="too_many_items")
    if items and found_order is None:
        raise InvalidInput("Items can only be named together with their order.", code="items_need_order")
    if found_order is not None:
        on_order = set(found_order.items.values_list("item_id", flat=True))
        unknown = [i for i in items if i not in on_order]
        if unknown:
            raise InvalidInput(f"Items {', '.join(unknown)} are not on order {order}.", code="item_not_on_order")
    method = None
    refund_to = (refund_to or "").strip()
    if refund_to:
        method = PaymentMethod.objects.filter(customer=found_customer, external_id=refund_to).first()
        if method is None:
            raise InvalidInput(
                f"{refund_to} is not a payment method of customer {customer}.", code="unknown_payment_method"
            )

    with transaction.atomic():
        ticket = Ticket.objects.create(
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
        )
        _trace(ticket, span="run", status="queued", decision="filed", reason=f"Filed by {user.get_username()}.")
        # The queued row is the agent-run instruction (refundagent.outbox): a broker that is down
        # when this commits never fails the filing; the sweep enqueues it later.
        transaction.on_commit(lambda: ticket_run_enqueue(ticket.pk))
    return ticket


def _trace(ticket: Ticket, **kwargs):
    """trace_record with the values to redact derived from the ticket (its order, or on a
    customer-level ticket its customer)."""
    return trace_record(ticket=ticket, sensitive=sensitive_values_for_ticket(ticket), **kwargs)


def ticket_run_enqueue(ticket_id: int) -> None:
    """Hand a queued ticket to a worker (after commit). Never raises: see refundagent.outbox."""
    ticket_run_publish(ticket_id=ticket_id)


def ticket_escalate(*, ticket: Ticket, user, note: str = "") -> Ticket:
    """Send a ticket to the human queue by hand (any ticket that is not settled)."""
    user_require_role(user, "support", "finance")
    detail = f"Escalated by {user.get_username()}" + (f": {note}" if note else ".")
    with transaction.atomic():
        if not ticket_transition(ticket=ticket, to=Ticket.Status.ESCALATED, detail=detail):
            raise TicketStateConflict(f"Ticket {ticket.pk} is {ticket.status}; it cannot be escalated.")
        _trace(ticket, span="stop", status="escalated", decision="escalate", reason=ticket.stop_detail)
    return ticket


def ticket_close(*, ticket: Ticket, user, note: str = "") -> Ticket:
    """Close a ticket (done, or nothing more to do). A ticket waiting for finance cannot be
    closed from under the approval: decide the approval first. The ticket keeps the reason and
    detail it stopped with; the note goes to the trace."""
    user_require_role(user, "support", "finance")
    with transaction.atomic():
        if not ticket_transition(ticket=ticket, to=Ticket.Status.CLOSED):
            raise TicketStateConflict(f"Ticket {ticket.pk} is {ticket.status}; it cannot be closed now.")
        _trace(ticket, span="stop", status="closed", decision="close",
               reason=f"Closed by {user.get_username()}" + (f": {note}" if note else "."))
    return ticket
