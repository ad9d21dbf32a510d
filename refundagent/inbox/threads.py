"""The conversation's thread ids, kept apart from the inbox service so the outbound email
(refundagent.emails) can record its reply without importing the ticket services."""

import re

from django.conf import settings

from ..models import InboxAddress, TicketMessage, TicketReply

MESSAGE_ID_PATTERN = re.compile(r"<([^<>\s]{1,900})>")


def message_id_normalize(value: str) -> str:
    """A Message-ID as stored: without its angle brackets and surrounding space."""
    value = (value or "").strip()
    found = MESSAGE_ID_PATTERN.search(value)
    return (found.group(1) if found else value.strip("<>").strip())[:998]


def inbox_reply_to(*, tenant) -> list[str] | None:
    """The Reply-To of the product's emails to a tenant's customers: its support address."""
    address = InboxAddress.objects.filter(tenant=tenant).values_list("address", flat=True).first()
    return [address] if address else None


def ticket_message_record_out(*, reply: TicketReply) -> TicketMessage:
    """The product's reply in the ticket's conversation, with its Message-ID: an answer to it
    (In-Reply-To / References) joins the ticket."""
    message, _ = TicketMessage.objects.get_or_create(
        tenant_id=reply.tenant_id,
        message_id=message_id_normalize(reply.message_id),
        defaults=dict(
            ticket_id=reply.ticket_id,
            direction=TicketMessage.Direction.OUT,
            sender=settings.DEFAULT_FROM_EMAIL,
            subject=reply.subject,
            text=reply.text,
        ),
    )
    return message
