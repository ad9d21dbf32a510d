"""The reply a person sends to the customer: written once, delivered by a worker, only when the
outcome it speaks of is true (docs/api.md, "Replies"; docs/architecture.md).

- `ticket_reply_send` (support's Send, from the ticket page or the API) checks that the ticket's
  outcome is final and true, then writes one `TicketReply` row (the outbox) in the transaction
  that records the Send, keyed by (ticket, outcome): a double click, a retry or a second person
  finds the row already there and sends nothing more. The worker is handed the row after commit.
- `ticket_reply_deliver` (the worker) claims the row by compare-and-set, sends it through Django's
  email framework (SMTP, the file backend, or any anymail ESP: settings.EMAIL_BACKEND) with a
  stable Message-ID derived from the same key, and records the result. A failed attempt is
  retried with backoff; after EMAIL_MAX_ATTEMPTS the reply is `failed`, shown on the ticket and
  the dashboard.
- `ticket_replies_sweep` (the periodic sweep) hands to a worker again what a lost message or a
  dead worker left behind.

A worker that dies after the SMTP server accepted the message and before the row says `sent`
makes the sweep send it again: the Message-ID is the same, so the receiving side sees one
message. Nothing else sends twice.

The agent never reaches this module: it has no tool for it, and only support's Send writes a row.
"""

import logging
import re
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.core.validators import validate_email
from django.db import DatabaseError, transaction
from django.db.models import F, Q
from django.utils import timezone

from approvals.reply_claims import reply_money_claims
from approvals.selectors import approval_latest_for_ticket
from ledger.exceptions import Conflict, InvalidInput, NotFound
from ledger.tenancy import tenant_for_user, user_require_role
from ledger.text import CARD_NUMBER

# The module, not its names: tasks.py calls back into this one (a cycle resolved at call time).
from . import tasks
from .inbox.threads import inbox_reply_to, ticket_message_record_out
from .models import Ticket, TicketReply
from .redaction import sensitive_values_for_ticket
from .tracing import trace_record
from .zendesk.writeback import is_zendesk_ticket, zendesk_reply_post, zendesk_requester_email

logger = logging.getLogger(__name__)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# The outcomes a reply may speak of: true and final. `refunded` only once the ledger entry
# succeeded (the ticket becomes refunded no earlier); `denied`, `closed`; a holding reply while a
# person has the ticket (`escalated`, `failed`); and `payment_failed`, the truth after a refund
# the provider refused (the correction of an earlier "we have refunded").
SENDABLE = (
    Ticket.Status.REFUNDED,
    Ticket.Status.DENIED,
    Ticket.Status.CLOSED,
    Ticket.Status.ESCALATED,
    Ticket.Status.FAILED,
    Ticket.Status.PAYMENT_FAILED,
)
# The only outcome whose reply may say that money moved.
MONEY_MOVED = (Ticket.Status.REFUNDED,)
# Outcomes tied to one refund: the key names its approval request, so a refund paid again after a
# correction is a new outcome with its own email.
PER_REQUEST = (Ticket.Status.REFUNDED, Ticket.Status.PAYMENT_FAILED)
TEXT_MAX_LENGTH = 5000
SUBJECT_MAX_LENGTH = 200
_PROVIDER_REF = re.compile(r"\b(?:pi|ch|py|re|pm|card|cus)_[A-Za-z0-9]{6,}")
UNDELIVERED = (TicketReply.Status.QUEUED, TicketReply.Status.SENDING, TicketReply.Status.RETRYING)


class ReplyNotAllowed(Conflict):
    code = "outcome_not_final"


def ticket_reply_key(*, ticket: Ticket) -> str:
    """The key of the ticket's current outcome: its status, and for a refund's outcomes the
    approval request it is about (`refunded:r17`)."""
    if ticket.status in PER_REQUEST:
        request = approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk)
        if request is not None:
            return f"{ticket.status}:r{request.pk}"
    return str(ticket.status)


def ticket_reply_message_id(*, ticket: Ticket, key: str) -> str:
    """A Message-ID that is the same for every attempt of one (ticket, outcome)."""
    slug = re.sub(r"[^A-Za-z0-9.-]", "-", ticket.tenant.slug)
    return f"<ticket-{ticket.pk}-{key.replace(':', '-')}.{slug}@{settings.EMAIL_MESSAGE_ID_DOMAIN}>"


def ticket_denied_by_a_person(ticket: Ticket) -> bool:
    """Finance denied the ticket's newest request (the gate's own denials make none)."""
    request = approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk)
    return request is not None and request.status == "denied" and request.decided_by_id is not None


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
        reply_id = reply.pk
        transaction.on_commit(lambda: ticket_reply_publish(reply_id=reply_id))
    return reply, True


def ticket_reply_publish(*, reply_id: int, countdown: int | None = None) -> bool:
    """Hand one reply to a worker; True if the broker took it. Never raises: the row is committed
    and the sweep hands over what this could not."""
    try:
        if countdown:
            tasks.ticket_reply_deliver_task.apply_async((reply_id,), countdown=countdown)
        else:
            tasks.ticket_reply_deliver_task.delay(reply_id)
    except Exception as exc:  # noqa: BLE001 - any broker failure; the sweep re-sends it
        logger.error("reply %s: enqueueing its delivery failed (%s); the sweep will re-send it", reply_id, exc)
        return False
    try:
        TicketReply.objects.filter(pk=reply_id).update(dispatched_at=timezone.now())
    except DatabaseError as exc:  # the mark only spares a duplicate hand-off
        logger.warning("reply %s: recording its hand-off failed (%s)", reply_id, exc)
    return True


def _backoff(attempts: int) -> int:
    return min(settings.EMAIL_RETRY_SECONDS * 2 ** max(attempts - 1, 0), settings.EMAIL_RETRY_MAX_SECONDS)


def _lease() -> timedelta:
    return timedelta(seconds=max(settings.SWEEP_GRACE_SECONDS, settings.EMAIL_TIMEOUT * 2))


def ticket_reply_deliver(*, reply_id: int) -> TicketReply:
    """Deliver one reply, if it is due and nobody else has it; returns the row as it now is.

    Claimed by compare-and-set (a queued or retrying row that is due, or a `sending` row whose
    worker's lease ran out), so a redelivered task or a sweep's duplicate sends nothing. A reply
    whose outcome is no longer the ticket's (a refund failed after the Send) is `withdrawn`, not
    sent: the customer hears only what is true now, and support is prompted for the new outcome."""
    now = timezone.now()
    claim = dict(status=TicketReply.Status.SENDING, claimed_at=now, attempts=F("attempts") + 1)
    claimed = TicketReply.objects.filter(
        Q(status__in=(TicketReply.Status.QUEUED, TicketReply.Status.RETRYING), next_attempt_at__lte=now)
        | Q(status=TicketReply.Status.SENDING, claimed_at__lte=now - _lease()),
        pk=reply_id,
    ).update(**claim)
    reply = TicketReply.objects.select_related("ticket", "ticket__tenant", "sent_by").get(pk=reply_id)
    if claimed != 1:
        return reply
    ticket = reply.ticket
    if ticket_reply_key(ticket=ticket) != reply.key:
        return _reply_record(
            reply,
            status=TicketReply.Status.WITHDRAWN,
            error=f"Not sent: the ticket is {ticket.get_status_display()} now, no longer {reply.outcome}.",
            decision="reply_withdrawn",
        )
    message = EmailMessage(
        subject=reply.subject,
        body=reply.text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[reply.to],
        headers={"Message-ID": reply.message_id},
        # Answers go to the support inbox, where they join this ticket (docs/inbox.md).
        reply_to=inbox_reply_to(tenant=ticket.tenant),
    )
    try:
        # Outside any transaction: the SMTP conversation may take seconds.
        if is_zendesk_ticket(ticket):
            zendesk_reply_post(reply=reply)
        elif not get_connection(fail_silently=False).send_messages([message]):
            raise RuntimeError("the email backend accepted no message")
    except Exception as exc:  # noqa: BLE001 - any failure of the backend is retried, then shown
        error = f"{type(exc).__name__}: {exc}"[:2000]
        if reply.attempts >= settings.EMAIL_MAX_ATTEMPTS:
            return _reply_record(reply, status=TicketReply.Status.FAILED, error=error, decision="reply_failed")
        # Zendesk's 429 says how long to wait (Retry-After).
        wait = max(_backoff(reply.attempts), getattr(exc, "retry_after", 0))
        recorded = _reply_record(
            reply,
            status=TicketReply.Status.RETRYING,
            error=error,
            decision="reply_retrying",
            next_attempt_at=timezone.now() + timedelta(seconds=wait),
        )
        ticket_reply_publish(reply_id=reply.pk, countdown=wait)
        return recorded
    return _reply_record(reply, status=TicketReply.Status.SENT, decision="reply_sent", sent_at=timezone.now())


def _reply_record(reply: TicketReply, *, status: str, decision: str, error: str = "", **fields) -> TicketReply:
    """The attempt's result on the row (compare-and-set on our claim) and in the ticket's trace."""
    with transaction.atomic():
        TicketReply.objects.filter(pk=reply.pk, status=TicketReply.Status.SENDING).update(
            status=status, last_error=error, **fields
        )
        reply.refresh_from_db()
        attempt = f"attempt {reply.attempts} of {settings.EMAIL_MAX_ATTEMPTS}"
        reasons = {
            "reply_sent": f"The {reply.outcome} reply was delivered to the customer ({attempt}).",
            "reply_retrying": f"Delivering the {reply.outcome} reply failed ({attempt}); retried at "
            f"{reply.next_attempt_at:%Y-%m-%d %H:%M:%S} UTC.",
            "reply_failed": f"Delivering the {reply.outcome} reply failed after {reply.attempts} attempts; "
            "it needs a person.",
            "reply_withdrawn": error,
        }
        trace_record(
            ticket=reply.ticket,
            span="reply",
            status="ok" if status == TicketReply.Status.SENT else "error",
            decision=decision,
            reason=reasons[decision][:200],
            data={"reply": reply.pk, "outcome": reply.outcome, "attempts": reply.attempts, "error": error[:500]},
        )
    level = logging.INFO if status == TicketReply.Status.SENT else logging.ERROR
    logger.log(level, "reply %s of ticket %s: %s %s", reply.pk, reply.ticket_id, status, error)
    return reply


def ticket_replies_sweep(*, older_than: timedelta, limit: int = 200) -> int:
    """Hand to a worker again the replies a lost message or a dead worker left behind: queued or
    retrying and due, last handed over more than `older_than` ago; or `sending` past the lease."""
    now = timezone.now()
    cutoff = now - older_than
    due = (
        TicketReply.objects.filter(
            Q(
                status__in=(TicketReply.Status.QUEUED, TicketReply.Status.RETRYING),
                next_attempt_at__lte=now,
                created_at__lte=cutoff,
            )
            & (Q(dispatched_at=None) | Q(dispatched_at__lte=cutoff))
            | Q(status=TicketReply.Status.SENDING, claimed_at__lte=now - _lease())
        )
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    sent = 0
    for reply_id in due:
        logger.warning("reply %s: not delivered within the grace period; handed to a worker again", reply_id)
        sent += ticket_reply_publish(reply_id=reply_id)
    return sent
