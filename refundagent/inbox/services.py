"""Tickets from where customers write: one inbound message (an email, a Zendesk ticket) becomes a
ticket or joins one (docs/inbox.md).

The sender is a claim, not an identity. Only a sender the provider verified (SPF/DKIM for an
email, Zendesk's own verified identity) whose address is one customer's of the tenant gets a
customer-level ticket queued for the agent; anything else is a ticket with no customer, escalated
for a person to match, never a refund path. The text is the sender's untrusted words (the agent's
prompt fences it as such); attachments are listed by name, size and type, never stored, never
shown to the agent.

Each message is stored once: its Message-ID is unique per tenant, a ticket from elsewhere
(`external_ref`) unique per (tenant, source). Two deliveries at once race on those constraints,
and the loser answers with the winner's ticket (`duplicate=True`)."""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from ledger.exceptions import Conflict, InvalidInput
from ledger.models import Customer, Tenant

from ..models import InboxAddress, Ticket, TicketMessage, TicketReply
from ..redaction import sensitive_values_for_ticket
from ..services import ticket_file
from ..tracing import trace_record
from .threads import MESSAGE_ID_PATTERN, message_id_normalize

# "[#123]" in a subject: the product's own replies carry it (emails._subject).
_SUBJECT_TOKEN = re.compile(r"\[#(\d{1,12})\]")
MAX_ATTACHMENTS_LISTED = 50

UNVERIFIED = "the sender's address could not be verified"
UNKNOWN = "no customer has this email address"
AMBIGUOUS = "more than one customer has this email address"
NO_TEXT = "the message has no text"


@dataclass(frozen=True)
class InboundResult:
    ticket: Ticket
    message: TicketMessage | None
    created: bool  # a new ticket was filed
    duplicate: bool  # already stored: nothing was written


def _message_ids(values) -> list[str]:
    """The ids of In-Reply-To / References: a header string ("<a> <b>") or a list of them."""
    if isinstance(values, str):
        values = [values]
    found: list[str] = []
    for value in values or ():
        value = str(value or "")
        ids = MESSAGE_ID_PATTERN.findall(value) or ([value.strip()] if value.strip() else [])
        found.extend(i[:998] for i in ids)
    return list(dict.fromkeys(found))[:100]


def _attachments_listed(attachments: Iterable[dict]) -> list[dict]:
    """What is kept of the attachments: name, size, type; over the size limit, marked skipped."""
    listed = []
    for attachment in list(attachments or ())[:MAX_ATTACHMENTS_LISTED]:
        size = attachment.get("size")
        size = size if isinstance(size, int) and size >= 0 else 0
        entry = {
            "name": str(attachment.get("name") or "attachment")[:255],
            "size": size,
            "content_type": str(attachment.get("content_type") or "application/octet-stream")[:100],
        }
        if size > settings.INBOX_MAX_ATTACHMENT_BYTES:
            entry["skipped"] = True
        listed.append(entry)
    return listed


def inbox_tenant_for(addresses: Iterable[str]) -> Tenant | None:
    """The tenant whose support address is the first of `addresses` that is one (the envelope
    recipient first, then the To header), or None."""
    wanted = [str(a).strip().lower() for a in addresses if a and str(a).strip()]
    if not wanted:
        return None
    found = {
        row.address: row.tenant for row in InboxAddress.objects.select_related("tenant").filter(address__in=wanted)
    }
    return next((found[a] for a in wanted if a in found), None)


def inbox_address_set(*, tenant: Tenant, address: str) -> InboxAddress:
    """Set the tenant's support address. Invalid → InvalidInput; another tenant's → Conflict;
    nothing written in either case."""
    address = (address or "").strip().lower()
    try:
        validate_email(address)
    except ValidationError:
        raise InvalidInput(f"{address!r} is not an email address.", code="invalid_address") from None
    with transaction.atomic():
        taken = InboxAddress.objects.filter(address=address).exclude(tenant=tenant).exists()
        if taken:
            raise Conflict(f"{address} is another tenant's support address.", code="address_taken")
        try:
            with transaction.atomic():
                row, _ = InboxAddress.objects.update_or_create(tenant=tenant, defaults={"address": address})
        except IntegrityError:  # another tenant took it at the same moment
            raise Conflict(f"{address} is another tenant's support address.", code="address_taken") from None
    return row


def inbound_message_receive(
    *,
    tenant: Tenant,
    source: str,
    sender: str,
    sender_verified: bool,
    subject: str,
    text: str,
    message_id: str = "",
    in_reply_to=(),
    references=(),
    attachments=(),
    external_ref: str = "",
) -> InboundResult:
    """File one inbound message of `tenant`: a duplicate changes nothing, a reply joins its
    ticket, anything else is a new ticket (queued for the agent, or escalated without a
    customer). Runs in its own savepoint, so it may be called inside a caller's transaction."""
    message_id = message_id_normalize(message_id)
    external_ref = str(external_ref or "").strip()[:100]
    sender = str(sender or "").strip()[:320]
    subject = str(subject or "").strip()[:998]
    text = str(text or "").strip()
    too_long = len(text) > settings.INBOX_MAX_TEXT_CHARS
    text = text[: settings.INBOX_MAX_TEXT_CHARS]
    fields = dict(
        tenant=tenant,
        direction=TicketMessage.Direction.IN,
        sender=sender,
        subject=subject,
        text=text,
        message_id=message_id,
        in_reply_to=(_message_ids(in_reply_to) or [""])[0],
        attachments=_attachments_listed(attachments),
    )
    # No look for a stored copy first: the unique constraints (Message-ID per tenant,
    # external_ref per source) find a repeat at the insert, so a new message (nearly every one)
    # costs one query less, and a repeat rolls its savepoint back and answers below.
    try:
        with transaction.atomic():
            parent = None if external_ref else _thread_of(tenant, _message_ids(in_reply_to) + _message_ids(references))
            if parent is None and not external_ref:
                parent = _subject_token_ticket(tenant, subject=subject, sender=sender, verified=sender_verified)
            if parent is not None:
                message = TicketMessage.objects.create(ticket=parent, **fields)
                trace_record(
                    ticket=parent,
                    sensitive=sensitive_values_for_ticket(parent),
                    span="run",
                    status="ok",
                    decision="message_in",
                    reason=f"A reply came in ({source}) and joined the ticket; nothing new was filed.",
                    data={"message": message.pk},
                )
                return InboundResult(parent, message, created=False, duplicate=False)
            customer, why = _customer_of(tenant, sender=sender, verified=sender_verified)
            if customer is not None and not text:
                why = NO_TEXT
            elif customer is not None and too_long:
                why = f"the message is longer than {settings.INBOX_MAX_TEXT_CHARS} characters"
            ticket = Ticket(
                tenant=tenant,
                customer=customer,
                message=f"{subject}\n\n{text}".strip() if subject else text,
                currency="",  # customer-level: the agent finds the order among the customer's
                source=source,
                external_ref=external_ref,
                created_by=None,
            )
            came = "from Zendesk" if source == Ticket.Source.ZENDESK else f"by {source}"
            escalate = ""
            if why:
                escalate = f"Came in {came}: {why}; a person must match it to a customer before any refund."
                if customer is not None:
                    escalate = f"Came in {came}: {why}; a person must read it."
            ticket = ticket_file(ticket=ticket, reason=f"Filed from a message that came in {came}.", escalate=escalate)
            message = TicketMessage.objects.create(ticket=ticket, **fields)
            return InboundResult(ticket, message, created=True, duplicate=False)
    except IntegrityError:
        # A repeat, or another delivery of the same message that won the race (its commit
        # released the unique index this insert waited on): answer with the stored ticket.
        stored = _stored(tenant=tenant, source=source, message_id=message_id, external_ref=external_ref)
        if stored is None:
            raise
        return stored


def _stored(*, tenant, source, message_id, external_ref) -> InboundResult | None:
    if message_id:
        # The exclude spells the unique index's condition, so PostgreSQL uses that index.
        message = (
            TicketMessage.objects.select_related("ticket")
            .filter(tenant=tenant, message_id=message_id)
            .exclude(message_id="")
            .order_by()[:1]
        )
        message = next(iter(message), None)
        if message is not None:
            return InboundResult(message.ticket, message, created=False, duplicate=True)
    if external_ref:
        ticket = Ticket.objects.filter(tenant=tenant, source=source, external_ref=external_ref).exclude(external_ref="")
        ticket = next(iter(ticket.order_by()[:1]), None)
        if ticket is not None:
            return InboundResult(ticket, ticket.messages.first(), created=False, duplicate=True)
    return None


def _thread_of(tenant, ids: list[str]) -> Ticket | None:
    """The ticket of this tenant one of `ids` names: a message of its conversation (the
    product's own replies are in it), or a reply the product sent before conversations were kept."""
    if not ids:
        return None
    message = (
        TicketMessage.objects.select_related("ticket")
        .filter(tenant=tenant, message_id__in=ids)
        .exclude(message_id="")
        .order_by("-at", "-id")
        .first()
    )
    if message is not None:
        return message.ticket
    reply = (
        TicketReply.objects.select_related("ticket")
        .filter(tenant=tenant, message_id__in=[f"<{i}>" for i in ids])
        .order_by("-id")
        .first()
    )
    return reply.ticket if reply is not None else None


def _subject_token_ticket(tenant, *, subject: str, sender: str, verified: bool) -> Ticket | None:
    """The ticket a subject's "[#123]" names, only for a verified sender who is its own customer:
    a token anyone can type is a fallback, never a way into someone else's ticket."""
    found = _SUBJECT_TOKEN.search(subject or "")
    if found is None or not verified or not sender:
        return None
    return (
        Ticket.objects.select_related("customer")
        .filter(tenant=tenant, pk=int(found.group(1)), customer__email__iexact=sender)
        .first()
    )


def _customer_of(tenant, *, sender: str, verified: bool) -> tuple[Customer | None, str]:
    """The customer the sender is, or None with why not (in words, for the stop detail)."""
    if not verified:
        return None, UNVERIFIED
    if not sender:
        return None, UNKNOWN
    customers = list(Customer.objects.filter(tenant=tenant, email__iexact=sender)[:2])
    if not customers:
        return None, UNKNOWN
    if len(customers) > 1:
        return None, AMBIGUOUS
    return customers[0], ""
