"""The API root at /api/: authentication, error mapping and the routers of every app.

Each app owns its router (`<app>/api.py`); this module mounts them, authenticates every call
(Bearer token or the session cookie) and maps domain errors to HTTP once.
"""

from django.conf import settings
from django.db import connection
from ninja import NinjaAPI, Status
from ninja.errors import AuthenticationError
from ninja.security import APIKeyCookie, HttpBearer

from approvals.api import router as approvals_router
from ledger.api import router as ledger_router
from ledger.exceptions import DomainError
from ledger.tenancy import api_token_authenticate
from refundagent.api import router as tickets_router

from .celery import app as celery_app


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
    """Is the database reachable, and the broker (or are tasks eager)?"""
    result = {"status": "ok", "database": "ok", "broker": "eager"}
    status = 200
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        result["database"] = f"error: {type(exc).__name__}"
        result["status"] = "error"
        status = 503
    if not settings.CELERY_TASK_ALWAYS_EAGER:
        try:
            with celery_app.connection_for_write(settings.CELERY_BROKER_URL) as conn:
                conn.ensure_connection(max_retries=1, timeout=2)
            result["broker"] = "ok"
        except Exception as exc:  # noqa: BLE001
            result["broker"] = f"error: {type(exc).__name__}"
            result["status"] = "error"
            status = 503
    return Status(status, result)


api.add_router("/orders", ledger_router)
api.add_router("/approvals", approvals_router)
api.add_router("/tickets", tickets_router)
