"""Provider webhooks: stored once by event id, then processed by a task.

`webhook_event_store` is called by the view once the signature is verified
(`stripe_signature_valid`) and the body is an event it can store and act on
(`stripe_event_parse`); a replayed event id finds the stored row and writes nothing.
`webhook_event_process` applies the event's refunds to the ledger through
`ledger.reconciliation.provider_refund_reconcile` (compare-and-set on the entry's status, so
events in any order end in the same state) and marks the event processed in the same
transaction: a crash leaves it unprocessed, and a retry redoes it whole. `charge.dispute.*`
events are applied by `ledger.disputes.dispute_record` the same way (the order becomes disputed).
"""

import json
import logging
import math
import time
from datetime import timedelta
from typing import Annotated

import stripe
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from .disputes import dispute_record
from .exceptions import InvalidInput
from .gateways import gateway_for
from .gateways.stripe import provider_dispute_from_stripe, provider_refund_from_stripe
from .models import RefundEntryEvent, WebhookEvent
from .money import currency_exponent
from .reconciliation import provider_refund_reconcile
from .shopify.webhooks import shopify_webhook_event_process

logger = logging.getLogger(__name__)

REFUND_EVENTS = {"refund.created", "refund.updated", "refund.failed", "charge.refund.updated"}
CHARGE_EVENTS = {"charge.refunded"}
DISPUTE_EVENTS = {
    "charge.dispute.created",
    "charge.dispute.updated",
    "charge.dispute.closed",
    "charge.dispute.funds_withdrawn",
    "charge.dispute.funds_reinstated",
}

# --- the shape of what the webhook stores and acts on ----------------------------------------------
# Checked at the door, before anything is stored: a malformed event that was stored made its
# processing task crash on every retry of the sweep. Only what the ledger reads is checked,
# strictly (12, not "12"); Stripe's other fields pass. The lengths are the columns' (100).

StripeId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]{1,100}$")]
ChargeId = Annotated[str, StringConstraints(pattern=r"^(ch|py)_[A-Za-z0-9_]{1,97}$")]
MAX_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z, the last second datetime can hold


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class _Expanded(_Shape):
    id: StripeId


class StripeRefundShape(_Shape):
    id: StripeId
    amount: Annotated[int, Field(gt=0)]
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$")]
    status: Annotated[str, StringConstraints(max_length=50)] | None = None
    payment_intent: StripeId | _Expanded | None = None
    charge: StripeId | _Expanded | None = None
    failure_reason: Annotated[str, StringConstraints(max_length=1000)] | None = None
    metadata: dict[str, str] | None = None
    created: Annotated[int, Field(ge=0, le=MAX_TIMESTAMP)] | None = None

    @model_validator(mode="after")
    def _fits_the_ledger(self):
        # The ledger's amount columns hold less than 10^10 in the currency's major unit.
        if self.amount >= 10 ** (10 + currency_exponent(self.currency)):
            raise ValueError("amount is beyond what the ledger can hold")
        return self


class _RefundList(_Shape):
    data: list[StripeRefundShape] | None = None
    has_more: bool = False


class StripeChargeShape(_Shape):
    id: ChargeId
    refunds: _RefundList | None = None


class StripeDisputeShape(_Shape):
    id: StripeId
    amount: Annotated[int, Field(ge=0)]
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Za-z]{3}$")]
    status: Annotated[str, StringConstraints(min_length=1, max_length=40)]
    charge: StripeId | _Expanded
    payment_intent: StripeId | _Expanded | None = None
    reason: Annotated[str, StringConstraints(max_length=100)] | None = None
    is_charge_refundable: bool = False

    @model_validator(mode="after")
    def _fits_the_ledger(self):
        if self.amount >= 10 ** (10 + currency_exponent(self.currency)):
            raise ValueError("amount is beyond what the ledger can hold")
        return self


class StripeEventShape(_Shape):
    id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    type: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    account: Annotated[str, StringConstraints(max_length=100)] | None = None


class _RefundData(_Shape):
    object: StripeRefundShape


class _ChargeData(_Shape):
    object: StripeChargeShape


class _DisputeData(_Shape):
    object: StripeDisputeShape


class StripeDisputeEvent(StripeEventShape):
    data: _DisputeData


class StripeRefundEvent(StripeEventShape):
    data: _RefundData


class StripeChargeEvent(StripeEventShape):
    data: _ChargeData


def _shape_for(event_type: str) -> type[StripeEventShape]:
    if event_type in REFUND_EVENTS:
        return StripeRefundEvent
    if event_type in CHARGE_EVENTS:
        return StripeChargeEvent
    if event_type in DISPUTE_EVENTS:
        return StripeDisputeEvent
    return StripeEventShape  # a type the product ignores: its envelope only


def stripe_event_check(payload) -> None:
    """Refuse an event the webhook cannot store or act on (InvalidInput, code malformed_event)."""
    try:
        envelope = StripeEventShape.model_validate(payload)
        _shape_for(envelope.type).model_validate(payload)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "event"
        raise InvalidInput(f"malformed event: {where}: {error['msg']}", code="malformed_event") from None


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is beyond a JSON number")
    return value


def stripe_event_parse(body: bytes) -> dict:
    """The event a verified body carries, refused (InvalidInput) unless the database can store it
    and the product can act on it. json.loads takes what JSON does not (NaN, Infinity, 1e400 as
    infinity, a lone surrogate escape) and both databases refuse it: a 500 otherwise."""
    try:
        payload = json.loads(body, parse_constant=_not_json, parse_float=_finite)
        # UnicodeEncodeError for a lone surrogate (a "\ud800" escape), which no database stores.
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeError, RecursionError) as exc:
        raise InvalidInput(f"bad payload: {type(exc).__name__}", code="bad_payload") from None
    stripe_event_check(payload)
    return payload


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
    if event.type not in REFUND_EVENTS | CHARGE_EVENTS:
        return []
    obj = event.payload["data"]["object"]  # its shape was checked (stripe_event_check)
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
    if event.provider == "shopify":
        return shopify_webhook_event_process(webhook_event_id=webhook_event_id)
    try:
        stripe_event_check(event.payload)
        refunds, malformed = _event_refunds(event), ""
    except InvalidInput as exc:
        # Stored before its shape was checked at the door: processed as what it is, no effect,
        # rather than crash on every retry of the sweep.
        refunds, malformed = [], exc.message
    with transaction.atomic():
        event = WebhookEvent.objects.select_for_update().get(pk=webhook_event_id)
        if event.processed_at is not None:
            return event
        if event.type in DISPUTE_EVENTS and not malformed:
            dispute, outcome = dispute_record(
                dispute=provider_dispute_from_stripe(event.payload["data"]["object"], account=event.account),
                provider=event.provider,
            )
            WebhookEvent.objects.filter(pk=event.pk, processed_at=None).update(
                processed_at=timezone.now(),
                result=f"{dispute.provider_ref if dispute else 'dispute'}: {outcome}"[:200],
                tenant_id=dispute.tenant_id if dispute else None,
            )
            event.refresh_from_db()
            return event
        applied = [
            provider_refund_reconcile(
                refund=refund, gateway=event.provider, source=RefundEntryEvent.Source.WEBHOOK, event_ref=event.event_id
            )
            for refund in refunds
        ]
        result = malformed or (
            ", ".join(f"{r.provider_ref}: {o}" for r, (_, o) in zip(refunds, applied, strict=True)) or "ignored"
        )
        tenant_id = next((entry.tenant_id for entry, _ in applied if entry is not None), None)
        WebhookEvent.objects.filter(pk=event.pk, processed_at=None).update(
            processed_at=timezone.now(), result=result[:200], tenant_id=tenant_id
        )
        event.refresh_from_db()
    return event


def webhook_events_unprocessed(*, older_than: timedelta = timedelta(minutes=1)):
    """Stored events not processed after `older_than` (the publish was lost): for a sweeper."""
    return WebhookEvent.objects.filter(processed_at=None, received_at__lte=timezone.now() - older_than).order_by("id")
