"""Tickets from Zendesk: the webhook stores each Zendesk ticket once and answers at once; a task
reads the requester through the Users API and files the product ticket (docs/inbox.md, "Zendesk").

The tenant is the Zendesk account's: an event webhook names it by `account_id` (matched to the
connection's account id, given at connect); a trigger's JSON by the ticket's `url`
(`{{ticket.url}}`: SUB.zendesk.com/agent/tickets/ID) or a `subdomain` field. The signature is then
checked with that account's own secret, so a payload naming another tenant's account fails it.
"""

import base64
import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from ledger.exceptions import DomainError, InvalidInput
from ledger.outbox import outbox_publish, publish_on_commit
from ledger.retry import retry_delay
from refundagent.inbox.services import inbound_message_receive

from .client import credentials_of, zendesk_user
from .exceptions import ZendeskRateLimited, ZendeskRefused, ZendeskUnavailable
from .models import ZendeskConnection, ZendeskInbound

logger = logging.getLogger(__name__)
# Named, not imported: tasks.py calls this module's services, so importing it here would be a
# cycle. Resolved at call time to the registered task (eager runs included).
_PROCESS_TASK = "refundagent.zendesk.tasks.zendesk_inbound_process_task"

TICKET_CREATED = "zen:event-type:ticket.created"
# A signature timestamp this far ahead of our clock is refused too (clocks drift a little).
FUTURE_SKEW_SECONDS = 60
SUBJECT_MAX = 500
DESCRIPTION_MAX = 65536
_TICKET_URL_HOST = re.compile(r"^(?:https?://)?([a-z0-9-]+)\.zendesk\.com(?:/|$)", re.IGNORECASE)


class WebhookUnauthorized(DomainError):
    status_code = 401
    code = "bad_signature"


class WebhookTooLarge(DomainError):
    status_code = 413
    code = "too_large"


@dataclass(frozen=True)
class ZendeskTicketIn:
    """What the product takes from a webhook: the ticket, its requester, its words."""

    account_id: int | None
    subdomain: str
    zendesk_ticket_id: int
    requester_id: int | None
    requester_email: str
    subject: str
    description: str
    event_id: str


def _positive_int(value, field: str) -> int:
    if isinstance(value, bool):
        raise InvalidInput(f"{field} is not an id.", code="bad_payload")
    if isinstance(value, int) and value > 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and 0 < len(value) <= 18:
        return int(value)
    raise InvalidInput(f"{field} is not an id.", code="bad_payload")


def _text(value, field: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} is not text.", code="bad_payload")
    return value[:limit]


def zendesk_payload_parse(body: bytes) -> ZendeskTicketIn | None:
    """The ticket a webhook speaks of, or None for an event the product does not act on. Raises
    InvalidInput (400) when the body is not one of the two shapes."""
    if len(body) > settings.ZENDESK_WEBHOOK_MAX_BYTES:
        raise WebhookTooLarge(f"The body is larger than {settings.ZENDESK_WEBHOOK_MAX_BYTES} bytes.")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidInput("The body is not JSON.", code="bad_json") from None
    if not isinstance(payload, dict):
        raise InvalidInput("The body is not a JSON object.", code="bad_payload")
    if "type" in payload and "detail" in payload:
        # An event webhook (event subscription).
        account_id = _positive_int(payload.get("account_id"), "account_id")
        if payload.get("type") != TICKET_CREATED:
            return ZendeskTicketIn(account_id, "", 0, None, "", "", "", str(payload.get("id") or "")[:100])
        detail = payload.get("detail")
        if not isinstance(detail, dict):
            raise InvalidInput("detail is not an object.", code="bad_payload")
        requester = detail.get("requester_id")
        return ZendeskTicketIn(
            account_id=account_id,
            subdomain="",
            zendesk_ticket_id=_positive_int(detail.get("id"), "detail.id"),
            requester_id=None if requester in (None, "") else _positive_int(requester, "detail.requester_id"),
            requester_email="",
            subject=_text(detail.get("subject"), "detail.subject", SUBJECT_MAX),
            description=_text(detail.get("description"), "detail.description", DESCRIPTION_MAX),
            event_id=_text(payload.get("id"), "id", 100),
        )
    ticket = payload.get("ticket")
    if not isinstance(ticket, dict):
        raise InvalidInput("Neither an event (type, detail) nor a trigger's ticket object.", code="bad_payload")
    # A trigger's JSON (docs/inbox.md): placeholders render as strings.
    subdomain = _text(payload.get("subdomain"), "subdomain", 63).strip().lower()
    if not subdomain:
        match = _TICKET_URL_HOST.match(_text(ticket.get("url"), "ticket.url", 500).strip())
        subdomain = match.group(1).lower() if match else ""
    if not subdomain:
        raise InvalidInput("The trigger's JSON names no account (subdomain, or ticket.url).", code="bad_payload")
    requester = ticket.get("requester_id")
    return ZendeskTicketIn(
        account_id=None,
        subdomain=subdomain,
        zendesk_ticket_id=_positive_int(ticket.get("id"), "ticket.id"),
        requester_id=None if requester in (None, "") else _positive_int(requester, "ticket.requester_id"),
        requester_email=_text(ticket.get("requester_email"), "ticket.requester_email", 254).strip(),
        subject=_text(ticket.get("subject"), "ticket.subject", SUBJECT_MAX),
        description=_text(ticket.get("description"), "ticket.description", DESCRIPTION_MAX),
        event_id="",
    )


def _timestamp_seconds(value: str) -> float | None:
    """Zendesk sends ISO 8601 (2024-04-17T17:18:10Z); unix seconds are accepted too."""
    value = (value or "").strip()
    if value.isascii() and value.isdigit() and len(value) <= 12:
        return float(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.timestamp() if moment.tzinfo is not None else None


def zendesk_signature_valid(*, body: bytes, signature: str, timestamp: str, secret: str) -> bool:
    """base64(HMAC-SHA256(secret, timestamp + raw body)), compared in constant time, from a
    timestamp no older than ZENDESK_WEBHOOK_TOLERANCE_SECONDS and not ahead of our clock."""
    if not signature or not timestamp or not secret:
        return False
    seconds = _timestamp_seconds(timestamp)
    now = time.time()
    if seconds is None or now - seconds > settings.ZENDESK_WEBHOOK_TOLERANCE_SECONDS:
        return False
    if seconds - now > FUTURE_SKEW_SECONDS:
        return False
    expected = base64.b64encode(hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest())
    return hmac.compare_digest(expected, signature.strip().encode())


def zendesk_webhook_receive(*, body: bytes, signature: str, timestamp: str) -> tuple[ZendeskInbound | None, bool]:
    """Verify and store one webhook; (row, created). (None, False) for an event the product
    ignores. Raises WebhookUnauthorized (401: unknown account, bad or stale signature),
    InvalidInput (400), WebhookTooLarge (413); nothing is stored then."""
    parsed = zendesk_payload_parse(body)
    if parsed.account_id is not None:
        connection = ZendeskConnection.objects.filter(account_id=parsed.account_id).select_related("tenant").first()
    else:
        connection = ZendeskConnection.objects.filter(subdomain=parsed.subdomain).select_related("tenant").first()
    # One answer for an unknown account and a bad signature: the caller learns nothing about accounts.
    if connection is None or not zendesk_signature_valid(
        body=body, signature=signature, timestamp=timestamp, secret=connection.webhook_secret
    ):
        raise WebhookUnauthorized("The webhook signature is missing, wrong or stale.")
    if not parsed.zendesk_ticket_id:
        return None, False
    with transaction.atomic():
        inbound, created = ZendeskInbound.objects.get_or_create(
            connection=connection,
            zendesk_ticket_id=parsed.zendesk_ticket_id,
            defaults=dict(
                tenant=connection.tenant,
                event_id=parsed.event_id,
                requester_id=parsed.requester_id,
                payload_requester_email=parsed.requester_email,
                subject=parsed.subject,
                description=parsed.description,
            ),
        )
        if inbound.processed_at is None:
            # A repeat of one never filed (its hand-off was lost) is handed over again: filing is
            # idempotent, so this is still one ticket.
            publish_on_commit(zendesk_inbound_publish, inbound_id=inbound.pk)
    return inbound, created


def zendesk_inbound_publish(*, inbound_id: int, countdown: int | None = None) -> bool:
    """Hand one stored ticket to a worker; never raises (the sweep re-sends what this could not)."""
    return outbox_publish(
        lambda: current_app.signature(_PROCESS_TASK, args=(inbound_id,)).apply_async(countdown=countdown or None),
        what=f"zendesk inbound {inbound_id}: its filing",
        handed_over=lambda: ZendeskInbound.objects.filter(pk=inbound_id).update(dispatched_at=timezone.now()),
    )


def zendesk_inbound_process(*, inbound_id: int) -> ZendeskInbound:
    """File the product ticket of one stored Zendesk ticket (once: the inbox files one ticket per
    (tenant, source, external_ref), and the row is marked under its lock).

    The requester's email is read through the Users API when the payload names a requester id,
    never taken from the payload then; it is a verified sender only when Zendesk returned it for
    a user whose identity Zendesk verified. A trigger that sends only an email is an unverified
    claim: the ticket has no customer and is escalated for a person to match."""
    inbound = ZendeskInbound.objects.select_related("connection", "tenant").get(pk=inbound_id)
    if inbound.processed_at is not None or inbound.next_attempt_at > timezone.now():
        # Done, or waiting out a 429 or a backoff: an early redelivery calls Zendesk no sooner.
        return inbound
    ZendeskInbound.objects.filter(pk=inbound_id).update(attempts=F("attempts") + 1)
    email, verified = inbound.payload_requester_email, False
    if inbound.requester_id is not None:
        try:
            # Outside any transaction: Zendesk may be slow.
            user = zendesk_user(credentials_of(inbound.connection), inbound.requester_id)
        except ZendeskRateLimited as exc:
            return _inbound_retry(inbound, error=str(exc), wait=exc.retry_after)
        except ZendeskRefused as exc:
            # The requester is gone or hidden from this agent: filed as an unknown sender.
            logger.warning("zendesk inbound %s: requester not readable (%s)", inbound_id, exc)
            user = {}
        except ZendeskUnavailable as exc:
            wait = retry_delay(
                attempts=inbound.attempts + 1,
                first=settings.ZENDESK_RETRY_SECONDS,
                cap=settings.ZENDESK_RETRY_MAX_SECONDS,
            )
            return _inbound_retry(inbound, error=str(exc), wait=wait)
        email = str(user.get("email") or "")
        verified = bool(email) and user.get("verified") is True
    with transaction.atomic():
        inbound = ZendeskInbound.objects.select_for_update().select_related("tenant").get(pk=inbound_id)
        if inbound.processed_at is not None:
            return inbound
        result = inbound_message_receive(
            tenant=inbound.tenant,
            source="zendesk",
            sender=email,
            sender_verified=verified,
            subject=inbound.subject,
            text=inbound.description,
            external_ref=str(inbound.zendesk_ticket_id),
        )
        inbound.requester_email = email[:254]
        inbound.requester_verified = verified
        inbound.ticket = result.ticket
        inbound.processed_at = timezone.now()
        inbound.last_error = ""
        inbound.save(update_fields=["requester_email", "requester_verified", "ticket", "processed_at", "last_error"])
    return inbound


def _inbound_retry(inbound: ZendeskInbound, *, error: str, wait: int) -> ZendeskInbound:
    ZendeskInbound.objects.filter(pk=inbound.pk).update(
        last_error=error[:2000], next_attempt_at=timezone.now() + timedelta(seconds=wait)
    )
    logger.warning("zendesk inbound %s: %s; again in %s s", inbound.pk, error, wait)
    zendesk_inbound_publish(inbound_id=inbound.pk, countdown=wait)
    inbound.refresh_from_db()
    return inbound


def zendesk_inbound_sweep(*, older_than: timedelta, limit: int = 200) -> int:
    """Hand to a worker again the stored Zendesk tickets not filed: due, and last handed over more
    than `older_than` ago."""
    now = timezone.now()
    cutoff = now - older_than
    due = (
        ZendeskInbound.objects.filter(processed_at=None, next_attempt_at__lte=now, received_at__lte=cutoff)
        .filter(Q(dispatched_at=None) | Q(dispatched_at__lte=cutoff))
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:limit]
    )
    sent = 0
    for inbound_id in due:
        logger.warning("zendesk inbound %s: not filed within the grace period; handed to a worker again", inbound_id)
        sent += zendesk_inbound_publish(inbound_id=inbound_id)
    return sent
