"""Shopify's webhooks (`POST /webhooks/shopify`): verified, stored once, worked on later.

At the door (`shopify_webhook_receive`): the shop from `X-Shopify-Shop-Domain` must be a
connected store; `X-Shopify-Hmac-Sha256` must be base64(HMAC-SHA256(its client secret, raw
body)), compared in constant time; `X-Shopify-Triggered-At` must be newer than
SHOPIFY_WEBHOOK_MAX_AGE_SECONDS (an old event replayed is refused); the body must be a JSON
object. Anything else answers 401 (400 for a malformed body) and stores nothing. A verified event
is stored once by its `X-Shopify-Event-Id` (the WebhookEvent unique constraint: a repeat, even
concurrent, finds the first) and its work is published after commit; the sweep republishes an
event whose publish was lost (ledger/sweep.py), as for Stripe's.

The work (`shopify_webhook_event_process`) trusts no payload: it reads the order again from the
API and applies it (ledger/shopify/mapping.py), so any order of delivery, duplicates included,
ends in the same ledger state.
"""

import base64
import hashlib
import hmac
import json
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..exceptions import DomainError, InvalidInput
from ..models import ShopifyConnection, WebhookEvent
from .sync import shopify_order_refresh

PROVIDER = "shopify"
ORDER_TOPICS = {"orders/create", "orders/updated", "orders/cancelled"}
TOPICS = ORDER_TOPICS | {"refunds/create"}


class WebhookUnauthorized(DomainError):
    status_code = 401
    code = "webhook_unauthorized"


def hmac_valid(*, body: bytes, header: str, secret: str) -> bool:
    expected = base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest())
    return bool(header) and hmac.compare_digest(expected, header.strip().encode())


def shopify_webhook_receive(*, body: bytes, headers) -> tuple[WebhookEvent | None, bool]:
    """Verify and store one delivery. Returns (the stored event or None for an ignored topic,
    whether it is new). Raises WebhookUnauthorized (401) or InvalidInput (400); writes nothing then."""
    domain = (headers.get("X-Shopify-Shop-Domain") or "").strip().lower()
    signature = headers.get("X-Shopify-Hmac-Sha256") or ""
    connection = ShopifyConnection.objects.filter(shop_domain=domain).first() if domain else None
    # The same answer for an unknown shop and a wrong signature: nothing to learn by probing.
    if connection is None or not hmac_valid(body=body, header=signature, secret=connection.client_secret):
        raise WebhookUnauthorized("Missing or wrong X-Shopify-Hmac-Sha256, or not a connected shop.")
    triggered = parse_datetime(headers.get("X-Shopify-Triggered-At") or "")
    max_age = timedelta(seconds=settings.SHOPIFY_WEBHOOK_MAX_AGE_SECONDS)
    if triggered is None or triggered.tzinfo is None or timezone.now() - triggered > max_age:
        raise WebhookUnauthorized("Stale or undated delivery (X-Shopify-Triggered-At).")
    event_id = (headers.get("X-Shopify-Event-Id") or "").strip()
    if not event_id or len(event_id) > 80:
        raise InvalidInput("X-Shopify-Event-Id is required.", code="bad_event_id")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidInput("The body is not JSON.", code="bad_body") from None
    if not isinstance(payload, dict):
        raise InvalidInput("The body is not a JSON object.", code="bad_body")
    topic = (headers.get("X-Shopify-Topic") or "").strip()
    if topic not in TOPICS:
        return None, False
    if _order_gid(topic, payload) is None:
        raise InvalidInput(f"A {topic} body names no order id.", code="bad_body")
    try:
        with transaction.atomic():
            return WebhookEvent.objects.create(
                provider=PROVIDER,
                tenant_id=connection.tenant_id,
                event_id=f"{domain}:{event_id}",
                type=topic,
                account=domain,
                payload=payload,
            ), True
    except IntegrityError:
        return WebhookEvent.objects.get(provider=PROVIDER, event_id=f"{domain}:{event_id}"), False


def _order_gid(topic: str, payload: dict) -> str | None:
    """The order the event is about, as a gid (REST payloads carry the number)."""
    if topic in ORDER_TOPICS:
        gid, number = payload.get("admin_graphql_api_id"), payload.get("id")
    else:
        gid, number = None, payload.get("order_id")
    if isinstance(gid, str) and gid.startswith("gid://shopify/Order/") and gid.rsplit("/", 1)[-1].isdigit():
        return gid
    if isinstance(number, int) and not isinstance(number, bool) and number > 0:
        return f"gid://shopify/Order/{number}"
    if isinstance(number, str) and number.isdigit():
        return f"gid://shopify/Order/{number}"
    return None


def shopify_webhook_event_process(*, webhook_event_id: int) -> WebhookEvent:
    """Read the event's order again from the API and apply it; once. Raises
    PaymentProviderUnavailable (the task retries) when Shopify cannot be asked."""
    event = WebhookEvent.objects.get(pk=webhook_event_id)
    if event.processed_at is not None:
        return event
    connection = ShopifyConnection.objects.filter(shop_domain=event.account).first()
    gid = _order_gid(event.type, event.payload) if isinstance(event.payload, dict) else None
    result = "ignored"
    if connection is not None and gid is not None and connection.tenant_id == event.tenant_id:
        counts = shopify_order_refresh(connection_id=connection.pk, order_gid=gid)
        result = f"{gid}: created={counts.created} updated={counts.updated} external={counts.external_refunds}"
        if counts.skipped:
            result += " skipped (see the connection's refused orders)"
    WebhookEvent.objects.filter(pk=event.pk, processed_at=None).update(processed_at=timezone.now(), result=result[:200])
    event.refresh_from_db()
    return event
