"""Provider webhooks: stored once by event id, then processed by a task.

`webhook_event_store` is called by the view after the SDK verified the signature; a replayed
event id finds the stored row and writes nothing. `webhook_event_process` applies the event's
refunds to the ledger through `ledger.reconciliation.provider_refund_reconcile` (compare-and-set
on the entry's status, so events in any order end in the same state) and marks the event
processed in the same transaction: a crash leaves it unprocessed, and a retry redoes it whole.
"""

import logging
import time
from datetime import timedelta

import stripe
from django.db import IntegrityError, transaction
from django.utils import timezone

from .gateways import gateway_for
from .gateways.stripe import provider_refund_from_stripe
from .models import RefundEntryEvent, WebhookEvent
from .reconciliation import provider_refund_reconcile

logger = logging.getLogger(__name__)

REFUND_EVENTS = {"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"}
CHARGE_EVENTS = {"charge.refunded"}


def _signed_at(header: str) -> int | None:
    """The signature's timestamp, the first `t=` as the SDK reads it; None if it is not digits."""
    for item in header.split(","):
        key, _, value = item.partition("=")
        if key == "t":
            return int(value) if value.isascii() and value.isdigit() else None
    return None


def stripe_signature_valid(*, body: bytes, header: str, secrets: list[str], tolerance: int) -> bool:
    """Whether one of `secrets` signed this body (Stripe-Signature, checked by the SDK) within
    `tolerance` seconds of now. The SDK checks only the past: a timestamp in the future would make
    a signature that stays valid for years, so that side is checked here."""
    signed_at = _signed_at(header)
    if signed_at is None or signed_at > time.time() + tolerance:
        return False
    try:
        payload = body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    for secret in secrets:
        try:
            if stripe.WebhookSignature.verify_header(payload, header, secret, tolerance=tolerance):
                return True
        except stripe.SignatureVerificationError:
            continue
    return False


def webhook_event_store(*, provider: str, payload: dict) -> tuple[WebhookEvent, bool]:
    """Store a verified event once. Returns (the stored event, whether it is new)."""
    event_id = str(payload.get("id") or "")
    try:
        with transaction.atomic():
            return WebhookEvent.objects.create(
                provider=provider,
                event_id=event_id,
                type=str(payload.get("type") or ""),
                account=str(payload.get("account") or ""),
                payload=payload,
            ), True
    except IntegrityError:
        return WebhookEvent.objects.get(provider=provider, event_id=event_id), False


def _event_refunds(event: WebhookEvent):
    obj = (event.payload.get("data") or {}).get("object") or {}
    if event.type in REFUND_EVENTS:
        return [provider_refund_from_stripe(obj, account=event.account)]
    if event.type in CHARGE_EVENTS:
        listed = (obj.get("refunds") or {}).get("data")
        if listed is not None and not (obj.get("refunds") or {}).get("has_more"):
            return [provider_refund_from_stripe(r, account=event.account) for r in listed]
        # Newer API versions do not embed the charge's refunds: ask the provider (no lock held).
        return gateway_for(event.provider).refunds_for_payment(payment_ref=obj.get("id", ""), account=event.account)
    return []


def webhook_event_process(*, webhook_event_id: int) -> WebhookEvent:
    """Apply a stored event to the ledger, once. Raises PaymentProviderUnavailable (retry) when a
    charge's refunds cannot be listed."""
    event = WebhookEvent.objects.get(pk=webhook_event_id)
    if event.processed_at is not None:
        return event
    refunds = _event_refunds(event)
    with transaction.atomic():
        event = WebhookEvent.objects.select_for_update().get(pk=webhook_event_id)
        if event.processed_at is not None:
            return event
        applied = [
            provider_refund_reconcile(
                refund=refund, gateway=event.provider, source=RefundEntryEvent.Source.WEBHOOK, event_ref=event.event_id
            )
            for refund in refunds
        ]
        result = ", ".join(f"{r.provider_ref}: {o}" for r, (_, o) in zip(refunds, applied, strict=True)) or "ignored"
        tenant_id = next((entry.tenant_id for entry, _ in applied if entry is not None), None)
        WebhookEvent.objects.filter(pk=event.pk, processed_at=None).update(
            processed_at=timezone.now(), result=result[:200], tenant_id=tenant_id
        )
        event.refresh_from_db()
    return event


def webhook_events_unprocessed(*, older_than: timedelta = timedelta(minutes=1)):
    """Stored events not processed after `older_than` (the publish was lost): for a sweeper."""
    return WebhookEvent.objects.filter(processed_at=None, received_at__lte=timezone.now() - older_than).order_by("id")
