"""Support's Send: the reply for the ticket's current outcome, written once (docs/api.md, "Replies").

`ticket_reply_send` (from the ticket page or the API) checks that the ticket's outcome is final
and true, then writes one `TicketReply` row (the outbox) in the transaction that records the
Send, keyed by (ticket, outcome): a double click, a retry or a second person finds the row
already there and sends nothing more. The row is handed to a worker after commit
(refundagent.outbox), which delivers it (refundagent.emails).

The agent never reaches this module: it has no tool for it, and only support's Send writes a row.
"""

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from approvals.reply_claims import reply_money_claims
from ledger.exceptions import Conflict, InvalidInput, NotFound
from ledger.outbox import publish_on_commit
from ledger.tenancy import tenant_for_user, user_require_role
from ledger.text import CARD_NUMBER

from .inbox.threads import ticket_message_record_out
from .models import Ticket, TicketReply
from .outbox import ticket_reply_publish
from .redaction import sensitive_values_for_ticket
from .replies import MONEY_MOVED, SENDABLE, ticket_denied_by_a_person, ticket_reply_key
from .tracing import trace_record
from .zendesk.writeback import is_zendesk_ticket, zendesk_requester_email

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
TEXT_MAX_LENGTH = 5000
SUBJECT_MAX_LENGTH = 200
_PROVIDER_REF = re.compile(r"\b(?:pi|ch|py|re|pm|card|cus)_[A-Za-z0-9]{6,}")


class ReplyNotAllowed(Conflict):
    code = "outcome_not_final"


def ticket_reply_message_id(*, ticket: Ticket, key: str) -> str:
    """A Message-ID that is the same for every attempt of one (ticket, outcome)."""
    slug = re.sub(r"[^A-Za-z0-9.-]", "-", ticket.tenant.slug)
    return f"<ticket-{ticket.pk}-{key.replace(':', '-')}.{slug}@{settings.EMAIL_MESSAGE_ID_DOMAIN}>"


def _payment_values(ticket: Ticket) -> list[str]:
    """The payment data of the ticket's customer (references, method ids, last4): never in an email."""
    customer = ticket.order.customer if ticket.order_id else ticket.customer
    contact = {customer.email, customer.name, *customer.name.split()}
    return [value for value in sensitive_values_for_ticket(ticket) if value not in contact and len(value) >= 4]


def _reply_text_check(*, ticket: Ticket, text: str, outcome: str) -> str:
    """The text as sent: refused (InvalidInput, nothing written) when empty, too long, carrying
    payment data, or, edited by a person, speaking of money moving before it did."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("The reply has no text.", code="reply_empty")
    text = text.strip()
    if len(text) > TEXT_MAX_LENGTH:
        raise InvalidInput(f"The reply is longer than {TEXT_MAX_LENGTH} characters.", code="reply_too_long")
    if CARD_NUMBER.search(text) or _PROVIDER_REF.search(text) or any(v in text for v in _payment_values(ticket)):
        raise InvalidInput(
            "The reply contains card digits or a payment reference; an email never carries payment data.",
            code="reply_payment_data",
        )
    # The runtime's own text follows the outcome (refundagent.replies); an edited one is held to the
    # rule the model's draft is held to: no amount, no money moving, until the refund succeeded.
    # Only what the person wrote is checked: the template's own sentences follow the outcome.
    template = ticket.customer_reply or ""
    written = " ".join(sentence for sentence in _SENTENCE_END.split(text) if sentence.strip() not in template)
    if outcome not in MONEY_MOVED and reply_money_claims(written):
        raise InvalidInput(
            f"The ticket is {ticket.get_status_display()}: the reply may not state an amount or say that money "
            "moves until the refund has succeeded.",
            code="reply_promises_payment",
        )
    return text


def _deliverable(address: str) -> bool:
    try:
        validate_email(address)
    except ValidationError:
        return False
    return "\n" not in address and "\r" not in address


def _subject(ticket: Ticket) -> str:
    about = f" for order {ticket.order.external_id}" if ticket.order_id else ""
    return f"Your refund request{about}"[:SUBJECT_MAX_LENGTH]


def ticket_reply_send(*, ticket_id: int, user, text: str | None = None) -> tuple[TicketReply, bool]:
    """Support's Send: the reply for the ticket's current outcome, once. Returns (reply, created):
    a Send for an outcome already sent returns the first one and writes nothing.

    Raises NotFound (another tenant's ticket, or none), Forbidden (not support), ReplyNotAllowed
    (409 `outcome_not_final`: the refund is not paid yet, or the agent or finance still has the
    ticket), Conflict `no_customer_email`, InvalidInput (the text)."""
    user_require_role(user, "support")
    tenant = tenant_for_user(user)
    with transaction.atomic():
        # The ticket row first: two Sends of one ticket queue behind each other, so the second
        # sees the first's row (the unique constraint is the backstop).
        try:
            ticket = (
                Ticket.objects.for_tenant(tenant)
                .select_for_update(of=("self",))
                .select_related("tenant", "order", "customer", "order__customer")
                .get(pk=ticket_id)
            )
        except (Ticket.DoesNotExist, ValueError, TypeError):
            raise NotFound(f"Ticket {ticket_id} not found.") from None
        if ticket.status not in SENDABLE:
            raise ReplyNotAllowed(
                f"Ticket #{ticket.pk} is {ticket.get_status_display()}: a reply is sent only once the outcome is "
                "final (the refund succeeded, denied or closed by a person, or a holding reply while a person "
                "has the ticket).",
                details={"status": ticket.status},
            )
        if ticket.status == Ticket.Status.DENIED and not ticket_denied_by_a_person(ticket):
            # The gate's denial of the agent's draft is not a person's decision: a person reviews it
            # (close with a reply, or escalate) before the customer hears it.
            raise ReplyNotAllowed(
                f"Ticket #{ticket.pk} was denied by the policy gate, not by a person: close it with a reply or "
                "escalate it before the customer is told.",
                details={"status": ticket.status},
            )
        key = ticket_reply_key(ticket=ticket)
        existing = TicketReply.objects.filter(ticket=ticket, key=key).first()
        if existing is not None:
            return existing, False
        if not ticket.order_id and ticket.customer_id is None:
            # An unknown or unverified sender: the address is a claim, nobody is told an outcome.
            raise Conflict(f"Ticket {ticket.pk} has no customer to reply to.", code="no_customer")
        body = _reply_text_check(ticket=ticket, text=ticket.customer_reply if text is None else text, outcome=key)
        customer = ticket.order.customer if ticket.order_id else ticket.customer
        if is_zendesk_ticket(ticket):
            # Zendesk emails its requester: the reply goes out as a public comment only (zendesk.writeback).
            to = zendesk_requester_email(ticket=ticket)
        elif not customer.email or not _deliverable(customer.email):
            # The shop's data is not trusted: an address with a line break would add mail headers.
            raise Conflict(
                f"The shop's records have no usable email for customer {customer.external_id}.",
                code="no_customer_email",
            )
        else:
            to = customer.email
        reply = TicketReply.objects.create(
            tenant=tenant,
            ticket=ticket,
            outcome=ticket.status,
            key=key,
            to=to,
            subject=_subject(ticket),
            text=body,
            message_id=ticket_reply_message_id(ticket=ticket, key=key),
            sent_by=user,
        )
        trace_record(
            ticket=ticket,
            span="reply",
            status="ok",
            decision="reply_queued",
            reason=f"{user.get_username()} sent the {ticket.status} reply to the customer; queued for delivery.",
            data={"reply": reply.pk, "outcome": ticket.status, "key": key, "sent_by": user.get_username()},
        )
        # In the conversation with its Message-ID: the customer's answer threads back to this ticket.
        ticket_message_record_out(reply=reply)
        publish_on_commit(ticket_reply_publish, reply_id=reply.pk)
    return reply, True
