"""The delivery of a customer reply: the email a worker sends for one `TicketReply` row
(docs/api.md, "Replies"; docs/architecture.md). Support's Send writes the row
(refundagent.replies_send); this module only delivers it.

- `ticket_reply_deliver` (the worker) claims the row by compare-and-set, sends it through Django's
  email framework (SMTP, the file backend, or any anymail ESP: settings.EMAIL_BACKEND) with a
  stable Message-ID derived from the row's key, and records the result. A failed attempt is
  retried with backoff; after EMAIL_MAX_ATTEMPTS the reply is `failed`, shown on the ticket and
  the dashboard.
- `ticket_reply_hand_over` records that a row was given to a worker; the sweep
  (refundagent.sweep) hands to a worker again what a lost message or a dead worker left behind.

A worker that dies after the SMTP server accepted the message and before the row says `sent`
makes the sweep send it again: the Message-ID is the same, so the receiving side sees one
message. Nothing else sends twice.
"""

import logging
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMessage, get_connection
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger.outbox import outbox_publish
from ledger.retry import retry_delay

from .inbox.threads import inbox_reply_to
from .models import TicketReply
from .replies import ticket_reply_key
from .tracing import trace_record
from .zendesk.writeback import is_zendesk_ticket, zendesk_reply_post

logger = logging.getLogger(__name__)
UNDELIVERED = (TicketReply.Status.QUEUED, TicketReply.Status.SENDING, TicketReply.Status.RETRYING)


def ticket_reply_hand_over(*, reply_id: int, enqueue: Callable[[], object]) -> bool:
    """Hand one reply to a worker through `enqueue`; True if the broker took it. Never raises:
    the row is committed and the sweep hands over what this could not."""
    return outbox_publish(
        enqueue,
        what=f"reply {reply_id}: its delivery",
        handed_over=lambda: TicketReply.objects.filter(pk=reply_id).update(dispatched_at=timezone.now()),
    )


def reply_lease() -> timedelta:
    """How long a `sending` row is its worker's: past it, the row is claimed again."""
    return timedelta(seconds=max(settings.SWEEP_GRACE_SECONDS, settings.EMAIL_TIMEOUT * 2))


def ticket_reply_deliver(*, reply_id: int, deliver_later: Callable[[int, int], bool] | None = None) -> TicketReply:
    """Deliver one reply, if it is due and nobody else has it; returns the row as it now is.

    Claimed by compare-and-set (a queued or retrying row that is due, or a `sending` row whose
    worker's lease ran out), so a redelivered task or a sweep's duplicate sends nothing. A reply
    whose outcome is no longer the ticket's (a refund failed after the Send) is `withdrawn`, not
    sent: the customer hears only what is true now, and support is prompted for the new outcome.

    A failed attempt is retried through `deliver_later(reply_id, seconds)` (the worker's task
    passes its own hand-off: this module does not know the task); without it, the sweep retries."""
    now = timezone.now()
    claim = dict(status=TicketReply.Status.SENDING, claimed_at=now, attempts=F("attempts") + 1)
    claimed = TicketReply.objects.filter(
        Q(status__in=(TicketReply.Status.QUEUED, TicketReply.Status.RETRYING), next_attempt_at__lte=now)
        | Q(status=TicketReply.Status.SENDING, claimed_at__lte=now - reply_lease()),
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
        backoff = retry_delay(
            attempts=reply.attempts, first=settings.EMAIL_RETRY_SECONDS, cap=settings.EMAIL_RETRY_MAX_SECONDS
        )
        wait = max(backoff, getattr(exc, "retry_after", 0))
        recorded = _reply_record(
            reply,
            status=TicketReply.Status.RETRYING,
            error=error,
            decision="reply_retrying",
            next_attempt_at=timezone.now() + timedelta(seconds=wait),
        )
        if deliver_later is not None:
            deliver_later(reply.pk, wait)
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
