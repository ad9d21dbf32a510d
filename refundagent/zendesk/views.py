"""POST /webhooks/zendesk: verified, stored once, filed by a task (refundagent.zendesk.inbound)."""

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ledger.exceptions import DomainError

from .inbound import zendesk_webhook_receive


@csrf_exempt
@require_POST
def zendesk_webhook(request):
    try:
        inbound, created = zendesk_webhook_receive(
            body=request.body,
            signature=request.headers.get("X-Zendesk-Webhook-Signature", ""),
            timestamp=request.headers.get("X-Zendesk-Webhook-Signature-Timestamp", ""),
        )
    except DomainError as exc:
        status = exc.status_code if exc.status_code in (401, 413) else 400
        return JsonResponse({"error": exc.message, "code": exc.code}, status=status)
    if inbound is None:
        return JsonResponse({"received": True, "ignored": True})
    return JsonResponse({"received": True, "duplicate": not created})
