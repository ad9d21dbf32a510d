"""What goes back to Zendesk, durably and never twice (docs/inbox.md, "Zendesk").

- **Internal notes.** `zendesk_outcome_record` is called by `ticket_transition` (the one writer
  of a ticket's status) in the transaction that moved a Zendesk ticket to an outcome (approval
  required, escalated, denied, refunded, payment failed). It writes one `ZendeskWrite` row (the
  outbox), unique per (ticket, outcome, kind): the outcome's key names the approval request for
  outcomes tied to one, so a refund filed again is a new outcome with its own note. The body is
  composed there, from what the runtime decided (the gate's reasons in words, the draft it
  decided on, the amount), with a link to the review page.
- **Delivery.** `zendesk_write_deliver` claims the row by compare-and-set, only when no older
  write of the same ticket is still owed (notes arrive in order), and PUTs the comment. After an
  attempt whose result is unknown (no answer, a dropped connection, a 5xx) it first reads the
  ticket's comments for the row's marker (the audit's custom metadata, and a last line of the
  note) and posts only when it is not there: a lost answer never makes a second note. A 429 is
  re-queued with its Retry-After as the countdown (no worker sleeps); a 5xx or no answer retries
  with backoff (ZENDESK_RETRY_SECONDS, doubled, capped), with no last attempt; a refusal (4xx)
  fails the row for a person. The sweep re-hands what a lost message or a dead worker left.
- **The public reply.** The customer reply goes out through `refundagent.emails` (support's Send,
  the same rule and the same once-per-outcome row as an email); for a Zendesk ticket that row is
  delivered by `zendesk_reply_post` as a public comment instead of an email (Zendesk emails the
  requester itself), with the same look-before-posting after an unknown result.
"""

import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.urls import reverse
from django.utils import timezone

from approvals.reason_words import recommendation_sentence
from approvals.selectors import approval_latest_for_ticket
from ledger.outbox import outbox_publish, publish_on_commit
from ledger.retry import retry_delay
from refundagent.models import RefundDraft, Ticket

from .client import credentials_of, zendesk_comment_add, zendesk_comments
from .exceptions import ZendeskRateLimited, ZendeskRefused, ZendeskUnavailable
from .models import ZendeskConnection, ZendeskInbound, ZendeskWrite

logger = logging.getLogger(__name__)
# Named, not imported: tasks.py calls this module's services, so importing it here would be a
# cycle. Resolved at call time to the registered task (eager runs included).
_DELIVER_TASK = "refundagent.zendesk.tasks.zendesk_write_deliver_task"

ZENDESK_SOURCE = "zendesk"
# The outcomes that leave a note, and their words.
NOTE_OUTCOMES: dict[str, str] = {
    Ticket.Status.APPROVAL_REQUIRED: "Approval required: the refund waits for finance.",
    Ticket.Status.ESCALATED: "Escalated: a person must decide this ticket.",
    Ticket.Status.DENIED: "Denied: the refund policy does not allow a refund.",
    Ticket.Status.REFUNDED: "Refunded: the refund was paid and verified.",
    Ticket.Status.PAYMENT_FAILED: "Payment failed: the payment provider refused the refund; finance has it.",
}
# Outcomes tied to one approval request: the key names it.
PER_REQUEST = (
    Ticket.Status.APPROVAL_REQUIRED,
    Ticket.Status.DENIED,
    Ticket.Status.REFUNDED,
    Ticket.Status.PAYMENT_FAILED,
    Ticket.Status.ESCALATED,
)
UNSENT = (ZendeskWrite.Status.PENDING, ZendeskWrite.Status.SENDING, ZendeskWrite.Status.RETRYING)
NOTE_MAX_LENGTH = 6000


def is_zendesk_ticket(ticket: Ticket) -> bool:
    """Filed from Zendesk, with the Zendesk ticket's id (digits) to write back to."""
    ref = getattr(ticket, "external_ref", "") or ""
    return getattr(ticket, "source", None) == ZENDESK_SOURCE and ref.isascii() and ref.isdigit()


def marker_line(key: str) -> str:
    return f"[refundagent {key}]"


# --- recording, in the transaction of the outcome -------------------------------------------------


def zendesk_outcome_record(*, ticket: Ticket, to: str) -> ZendeskWrite | None:
    """The note owed to a Zendesk ticket that just moved to `to` (in the mover's transaction).
    Nothing for other tickets and other statuses; the same outcome twice writes one row."""
    if to not in NOTE_OUTCOMES or not is_zendesk_ticket(ticket):
        return None
    connection = ZendeskConnection.objects.filter(tenant_id=ticket.tenant_id).first()
    if connection is None:
        logger.warning("ticket %s: from Zendesk, but its tenant has no Zendesk connection now", ticket.pk)
        return None
    request = approval_latest_for_ticket(tenant=ticket.tenant_id, ticket_ref=ticket.pk) if to in PER_REQUEST else None
    outcome_key = f"{to}:r{request.pk}" if request is not None else str(to)
    key = f"t{ticket.pk}:{outcome_key}:note"
    write, created = ZendeskWrite.objects.get_or_create(
        key=key,
        defaults=dict(
            tenant_id=ticket.tenant_id,
            ticket=ticket,
            zendesk_ticket_id=int(ticket.external_ref),
            kind=ZendeskWrite.Kind.NOTE,
            outcome=to,
            body=_note_body(ticket=ticket, to=to, request=request, key=key),
            public=False,
        ),
    )
    if created:
        publish_on_commit(zendesk_write_publish, write_id=write.pk)
    return write


def _absolute(path: str) -> str:
    return f"{settings.SITE_URL}{path}"


def _note_body(*, ticket: Ticket, to: str, request, key: str) -> str:
    """The note: the outcome, what the agent found and the gate decided (its reasons in words, from
    the runtime, never the customer's text), what the product did, and where to review it."""
    lines = [f"Refund agent, ticket #{ticket.pk}: {NOTE_OUTCOMES[to]}"]
    if ticket.order_id:
        lines.append(f"Order: {ticket.order.external_id} ({ticket.order.total} {ticket.order.currency}).")
    else:
        lines.append("Order: not identified yet.")
    draft = RefundDraft.objects.filter(ticket=ticket).order_by("-created_at", "-id").first()
    if draft is not None:
        verdict = draft.gate_verdict or {}
        if draft.recommendation == RefundDraft.Recommendation.REFUND:
            found = f"The agent proposed a refund of {draft.amount} {draft.currency}."
        else:
            found = recommendation_sentence(draft.recommendation)
        lines.append(f"What the agent found: {found}")
        if verdict.get("refundable") is not None:
            lines.append(f"Still refundable on the order: {verdict['refundable']} {verdict.get('currency', '')}.")
        reasons = [str(reason) for reason in verdict.get("reasons") or []]
        if reasons:
            lines.append("The policy gate's reasons:")
            lines.extend(f"- {reason}" for reason in reasons)
    if request is not None:
        lines.append(f"Approval request #{request.pk}: {request.amount} {request.currency}, {request.status}.")
    if ticket.stop_detail:
        lines.append(f"Why it stopped: {ticket.stop_detail}")
    if request is not None and to == Ticket.Status.APPROVAL_REQUIRED:
        review = reverse("admin:approvals_approvalrequest_change", args=[request.pk])
    else:
        review = reverse("ticket", args=[ticket.pk])
    lines.append(f"Review: {_absolute(review)}")
    lines.append(marker_line(key))
    body = "\n".join(lines)
    if len(body) > NOTE_MAX_LENGTH:
        body = body[: NOTE_MAX_LENGTH - len(marker_line(key)) - 2] + "…\n" + marker_line(key)
    return body


# --- hand-off ---------------------------------------------------------------------------------------


def zendesk_write_publish(*, write_id: int, countdown: int | None = None) -> bool:
    """Hand one write to a worker; True if the broker took it. Never raises: the row is committed
    and the sweep hands over what this could not."""
    return outbox_publish(
        lambda: current_app.signature(_DELIVER_TASK, args=(write_id,)).apply_async(countdown=countdown or None),
        what=f"zendesk write {write_id}: its delivery",
        handed_over=lambda: ZendeskWrite.objects.filter(pk=write_id).update(dispatched_at=timezone.now()),
    )


def _lease() -> timedelta:
    return timedelta(seconds=max(settings.SWEEP_GRACE_SECONDS, settings.ZENDESK_TIMEOUT_SECONDS * 4))


def _older_unsent():
    return ZendeskWrite.objects.filter(
        ticket_id=OuterRef("ticket_id"), status__in=UNSENT, created_at__lte=OuterRef("created_at")
    ).filter(Q(created_at__lt=OuterRef("created_at")) | Q(pk__lt=OuterRef("pk")))


# --- delivery ---------------------------------------------------------------------------------------


def zendesk_write_deliver(*, write_id: int) -> ZendeskWrite:
    """Deliver one write if it is due, nobody else has it and no older write of its ticket is
    still owed; returns the row as it now is."""
    now = timezone.now()
    claimed = (
        ZendeskWrite.objects.filter(pk=write_id)
        .filter(
            Q(status__in=(ZendeskWrite.Status.PENDING, ZendeskWrite.Status.RETRYING), next_attempt_at__lte=now)
            | Q(status=ZendeskWrite.Status.SENDING, claimed_at__lte=now - _lease())
        )
        .filter(~Exists(_older_unsent()))
        .update(status=ZendeskWrite.Status.SENDING, claimed_at=now, attempts=F("attempts") + 1)
    )
    write = ZendeskWrite.objects.select_related("ticket").get(pk=write_id)
    if claimed != 1:
        return write
    connection = ZendeskConnection.objects.filter(tenant_id=write.tenant_id).first()
    if connection is None:
        return _write_record(write, status=ZendeskWrite.Status.FAILED, error="The tenant's Zendesk is not connected.")
    credentials = credentials_of(connection)
    try:
        # Outside any transaction: the calls may take seconds.
        comment_id = None
        if write.attempts > 1:
            comment_id = _comment_already_made(credentials, write.zendesk_ticket_id, key=write.key)
        if comment_id is None:
            answer = zendesk_comment_add(
                credentials, write.zendesk_ticket_id, body=write.body, public=write.public, marker=write.key
            )
            comment_id = _comment_id_of(answer)
    except ZendeskRateLimited as exc:
        return _write_retry(write, error=str(exc), wait=exc.retry_after)
    except ZendeskRefused as exc:
        return _write_record(write, status=ZendeskWrite.Status.FAILED, error=str(exc))
    except ZendeskUnavailable as exc:
        wait = retry_delay(
            attempts=write.attempts, first=settings.ZENDESK_RETRY_SECONDS, cap=settings.ZENDESK_RETRY_MAX_SECONDS
        )
        return _write_retry(write, error=str(exc), wait=wait)
    write = _write_record(write, status=ZendeskWrite.Status.SENT, sent_at=timezone.now(), zendesk_comment_id=comment_id)
    _publish_next(write)
    return write


def _comment_id_of(answer: dict) -> int | None:
    for event in (answer.get("audit") or {}).get("events") or []:
        if event.get("type") == "Comment" and isinstance(event.get("id"), int):
            return event["id"]
    return None


def _comment_already_made(
    credentials, zendesk_ticket_id: int, *, key: str, body: str | None = None, author_id: int | None = None
) -> int | None:
    """The id of a comment an earlier attempt made (its marker in the custom metadata or as the
    note's last line; for a public reply also the same text by the product's agent), or None."""
    for comment in zendesk_comments(credentials, zendesk_ticket_id):
        custom = ((comment.get("metadata") or {}).get("custom")) or {}
        text = str(comment.get("body") or "")
        if custom.get("refundagent_key") == key or marker_line(key) in text:
            return comment.get("id") or 0
        if body is not None and comment.get("author_id") == author_id and text.strip() == body.strip():
            return comment.get("id") or 0
    return None


def _write_retry(write: ZendeskWrite, *, error: str, wait: int) -> ZendeskWrite:
    write = _write_record(
        write,
        status=ZendeskWrite.Status.RETRYING,
        error=error,
        next_attempt_at=timezone.now() + timedelta(seconds=wait),
    )
    zendesk_write_publish(write_id=write.pk, countdown=wait)
    return write


def _write_record(write: ZendeskWrite, *, status: str, error: str = "", **fields) -> ZendeskWrite:
    """The attempt's result (compare-and-set on our claim)."""
    ZendeskWrite.objects.filter(pk=write.pk, status=ZendeskWrite.Status.SENDING).update(
        status=status, last_error=error[:2000], **fields
    )
    write.refresh_from_db()
    level = logging.INFO if status == ZendeskWrite.Status.SENT else logging.WARNING
    if status == ZendeskWrite.Status.FAILED:
        level = logging.ERROR
    logger.log(level, "zendesk write %s of ticket %s: %s %s", write.pk, write.ticket_id, status, error)
    return write


def _publish_next(write: ZendeskWrite) -> None:
    """The next write of the same ticket waited behind this one: hand it over now."""
    following = (
        ZendeskWrite.objects.filter(ticket_id=write.ticket_id, status__in=UNSENT)
        .order_by("created_at", "id")
        .values_list("pk", flat=True)
        .first()
    )
    if following is not None:
        zendesk_write_publish(write_id=following)


def zendesk_writes_sweep(*, older_than: timedelta, limit: int = 200) -> int:
    """Hand to a worker again the writes a lost message or a dead worker left: due and last
    handed over more than `older_than` ago, or `sending` past the lease. Only each ticket's
    oldest owed write (the others wait behind it)."""
    now = timezone.now()
    cutoff = now - older_than
    due = (
        ZendeskWrite.objects.filter(
            Q(
                status__in=(ZendeskWrite.Status.PENDING, ZendeskWrite.Status.RETRYING),
                next_attempt_at__lte=now,
                created_at__lte=cutoff,
            )
            & (Q(dispatched_at=None) | Q(dispatched_at__lte=cutoff))
            | Q(status=ZendeskWrite.Status.SENDING, claimed_at__lte=now - _lease())
        )
        .filter(~Exists(_older_unsent()))
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    sent = 0
    for write_id in due:
        logger.warning("zendesk write %s: not delivered within the grace period; handed to a worker again", write_id)
        sent += zendesk_write_publish(write_id=write_id)
    return sent


# --- the public reply ---------------------------------------------------------------------------------


def zendesk_reply_post(*, reply) -> None:
    """Deliver a reviewed customer reply (a `TicketReply` of a Zendesk ticket) as a public comment:
    Zendesk emails the requester. Raises the client's errors (ZendeskRateLimited carries the
    wait); the caller (refundagent.emails) records and retries as for an email. After an earlier
    attempt of unknown result, the ticket's comments are read first and nothing is posted twice."""
    ticket = reply.ticket
    connection = ZendeskConnection.objects.get(tenant_id=ticket.tenant_id)
    credentials = credentials_of(connection)
    key = f"t{ticket.pk}:{reply.key}:reply"
    if reply.attempts > 1:
        found = _comment_already_made(
            credentials, int(ticket.external_ref), key=key, body=reply.text, author_id=connection.agent_user_id
        )
        if found is not None:
            return
    zendesk_comment_add(credentials, int(ticket.external_ref), body=reply.text, public=True, marker=key)


def zendesk_requester_email(*, ticket: Ticket) -> str:
    """Who Zendesk will email the public reply to, as the product knows it (for the reply's row)."""
    email = (
        ZendeskInbound.objects.filter(ticket=ticket)
        .exclude(requester_email="")
        .values_list("requester_email", flat=True)
        .first()
    )
    customer = ticket.customer if ticket.customer_id else None
    return email or (customer.email if customer is not None else "") or "zendesk requester"
