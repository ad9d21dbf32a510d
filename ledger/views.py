"""POST /webhooks/stripe and /webhooks/shopify: provider events, verified, each event id once."""

from django.conf import settings
from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .exceptions import DomainError, InvalidInput
from .outbox import outbox_publish, publish_on_commit
from .shopify.webhooks import shopify_webhook_receive
from .tasks import webhook_event_process_task
from .webhooks import stripe_event_parse, stripe_signature_valid, webhook_event_store


def _publish(*, webhook_event_id: int) -> bool:
    # After commit, best effort: a lost publish leaves the event unprocessed, and the provider's
    # own redelivery (or the sweep, ledger.sweep.webhook_events_republish) enqueues it again.
    return outbox_publish(
        lambda: webhook_event_process_task.delay(webhook_event_id),
        what=f"webhook event {webhook_event_id}: its processing",
    )


@csrf_exempt
@require_POST
def stripe_webhook(request):
    # Several secrets may be configured, comma separated: the platform's endpoint and a Connect
    # endpoint each have their own.
    secrets = [s.strip() for s in settings.STRIPE_WEBHOOK_SECRET.split(",") if s.strip()]
    signature = request.headers.get("Stripe-Signature", "")
    if not secrets or not signature:
        return JsonResponse({"error": "missing Stripe-Signature (or no STRIPE_WEBHOOK_SECRET configured)"}, status=400)
    if not stripe_signature_valid(
        body=request.body, header=signature, secrets=secrets, tolerance=settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS
    ):
        return JsonResponse({"error": "bad signature"}, status=400)
    try:
        payload = stripe_event_parse(request.body)
    except InvalidInput as exc:
        return JsonResponse({"error": exc.message, "code": exc.code}, status=400)
    event, created = webhook_event_store(provider="stripe", payload=payload)
    if created or event.processed_at is None:
        # A redelivery of an event never processed (its publish was lost) is enqueued again:
        # processing is idempotent, so this is still at most one effect.
        publish_on_commit(_publish, webhook_event_id=event.pk)
    return JsonResponse({"received": True, "duplicate": not created})


@csrf_exempt
@require_POST
def shopify_webhook(request):
    """Verified and stored in one short transaction, answered at once; the work is queued
    (ledger/shopify/webhooks.py)."""
    try:
        event, created = shopify_webhook_receive(body=request.body, headers=request.headers)
    except DomainError as exc:
        status = 401 if exc.status_code == 401 else 400
        return JsonResponse({"error": exc.message, "code": exc.code}, status=status)
    if event is None:
        return JsonResponse({"received": True, "ignored": True})
    if created or event.processed_at is None:
        publish_on_commit(_publish, webhook_event_id=event.pk)
    return JsonResponse({"received": True, "duplicate": not created})
