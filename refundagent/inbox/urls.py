"""anymail's inbound webhooks (/anymail/{esp}/inbound/), each behind one guard (docs/inbox.md).

anymail answers a wrong basic auth with a 400 (a SuspiciousOperation), serves anyone when no
WEBHOOK_SECRET is set (with a warning) and lets a payload it cannot parse become a 500. The guard
makes the inbox fail closed and answer clearly: no secret configured or a wrong or missing one →
401, a body over INBOX_MAX_BODY_BYTES → 413, a payload anymail cannot read → 400; nothing is
stored in any of these. Only the inbound views are mounted: the product has no use for tracking
events."""

import json
import logging
from functools import wraps

from anymail import urls as anymail_urls
from anymail.exceptions import AnymailConfigurationError, AnymailWebhookValidationFailure
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from django.urls import URLPattern
from django.views.decorators.csrf import csrf_exempt

logger = logging.getLogger(__name__)

# What anymail's parsers raise on a payload they cannot read (bad JSON, missing fields, bad base64).
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError, LookupError, json.JSONDecodeError)


def _refuse(status: int, code: str, error: str) -> JsonResponse:
    response = JsonResponse({"error": error, "code": code}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Basic realm="inbox"'
    return response


def inbox_webhook_guard(view):
    @csrf_exempt
    @wraps(view)
    def guarded(request, *args, **kwargs):
        if request.method != "POST":
            return view(request, *args, **kwargs)
        if not settings.ANYMAIL.get("WEBHOOK_SECRET"):
            logger.error("inbound email refused: ANYMAIL_WEBHOOK_SECRET is not set (docs/inbox.md)")
            return _refuse(401, "inbox_not_configured", "The inbox's webhook secret is not configured.")
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return _refuse(400, "bad_length", "The Content-Length is not a number.")
        if length > settings.INBOX_MAX_BODY_BYTES:
            return _refuse(413, "too_large", f"The body is larger than {settings.INBOX_MAX_BODY_BYTES} bytes.")
        try:
            return view(request, *args, **kwargs)
        except AnymailWebhookValidationFailure:
            return _refuse(401, "bad_auth", "Missing or wrong webhook credentials or signature.")
        except RequestDataTooBig:
            return _refuse(413, "too_large", "The body is larger than this server accepts.")
        except AnymailConfigurationError as exc:
            # A tracking event posted to the inbound URL, or the provider's key not configured.
            logger.error("inbound email refused: %s", exc)
            return _refuse(400, "not_inbound", str(exc).split("\n")[0][:300])
        except MALFORMED as exc:
            logger.warning("inbound email refused: malformed payload (%s: %s)", type(exc).__name__, exc)
            return _refuse(400, "malformed", "The payload could not be read as an inbound email.")

    return guarded


app_name = "anymail"
urlpatterns = [
    URLPattern(pattern.pattern, inbox_webhook_guard(pattern.callback), pattern.default_args, pattern.name)
    for pattern in anymail_urls.urlpatterns
    if pattern.name and pattern.name.endswith("_inbound_webhook")
]
