"""The API root at /api/: authentication, error mapping and the routers of every app.

Each app owns its router (`<app>/api.py`); this module mounts them, authenticates every call
(Bearer token or the session cookie) and maps domain errors to HTTP once.
"""

from django.conf import settings
from ninja import NinjaAPI, Status
from ninja.errors import AuthenticationError
from ninja.security import APIKeyCookie, HttpBearer

from approvals.api import router as approvals_router
from ledger.api import router as ledger_router
from ledger.exceptions import DomainError
from ledger.tenancy import api_token_authenticate
from refundagent.api import router as tickets_router

from .health import health_report


class BearerToken(HttpBearer):
    def authenticate(self, request, token):
        user = api_token_authenticate(token)
        if user is not None:
            request.user = user
        return user


class SessionCookie(APIKeyCookie):
    """The web UI's session. Unsafe methods still need the CSRF token (ninja checks it)."""

    param_name = settings.SESSION_COOKIE_NAME

    def authenticate(self, request, key):
        user = getattr(request, "user", None)
        return user if user is not None and user.is_authenticated else None


api = NinjaAPI(
    title="refundagent",
    version="1",
    description="Refund tickets investigated by an agent; money moves only after finance approves one exact action.",
    auth=[BearerToken(), SessionCookie()],
    urls_namespace="api",
)


@api.exception_handler(DomainError)
def domain_error(request, exc: DomainError):
    body = {"detail": exc.message, "code": exc.code}
    if exc.details:
        body["details"] = exc.details
    return api.create_response(request, body, status=exc.status_code)


@api.exception_handler(AuthenticationError)
def unauthenticated(request, exc):
    return api.create_response(
        request, {"detail": "Authentication required: a Bearer token or a session.", "code": "unauthenticated"}, status=401
    )


@api.get("/health", auth=None, tags=["ops"], response={200: dict, 503: dict})
def health(request):
    """Database, broker, a worker's ping, beat's last run, the oldest queued ticket and approved
    refund, migrations (config/health.py). 503 when one fails."""
    status, body = health_report()
    return Status(status, body)


api.add_router("/orders", ledger_router)
api.add_router("/approvals", approvals_router)
api.add_router("/tickets", tickets_router)
