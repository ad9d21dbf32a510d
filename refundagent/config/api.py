"""The API root at /api/: authentication, rate limits, error mapping, the OpenAPI document's
error responses and the routers of every app.

Each app owns its router (`<app>/api.py`); this module mounts them, authenticates every call
(Bearer token or the session cookie), throttles it per token and maps errors to HTTP once, as
RFC 9457 problem details (refundagent/config/problems.py).
"""

import hashlib
import re
import threading

from django.conf import settings
from django.http import Http404
from ninja import NinjaAPI, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import APIKeyCookie, HttpBearer
from ninja.throttling import AuthRateThrottle
from pydantic import ConfigDict, Field

from approvals.api import router as approvals_router
from ledger.api import refunds_router
from ledger.api import router as ledger_router
from ledger.exceptions import DomainError
from ledger.idempotency import KEY_PATTERN as IDEMPOTENCY_KEY_PATTERN
from ledger.tenancy import api_token_authenticate
from ledger.text import NO_CONTROL_CHARS_PATTERN
from refundagent.api import router as tickets_router

from .health import health_live_report, health_report
from .problems import PROBLEM_CONTENT_TYPE, field_errors, problem_response, validation_detail


class BearerToken(HttpBearer):
    def authenticate(self, request, token):
        user = api_token_authenticate(token)
        if user is not None:
            request.user = user
            request.api_token = token
        return user


class SessionCookie(APIKeyCookie):
    """The web UI's session. Unsafe methods still need the CSRF token (ninja checks it)."""

    param_name = settings.SESSION_COOKIE_NAME

    def authenticate(self, request, key):
        user = getattr(request, "user", None)
        return user if user is not None and user.is_authenticated else None


def _per_thread(name: str) -> property:
    return property(
        lambda self: getattr(self._state, name, None), lambda self, value: setattr(self._state, name, value)
    )


class TokenRateThrottle(AuthRateThrottle):
    """API_THROTTLE_RATE per Bearer token (a session counts per user), in the default cache:
    Redis in production, so every worker process counts the same requests.

    ninja keeps one throttle object per API and stores the request's key and history on it;
    under a threaded server two requests would mix them up, so that state is per thread here.
    The rate is read from the settings on every request (a test or an operator may change it)."""

    scope = "token"

    def __init__(self):
        self._state = threading.local()
        super().__init__(settings.API_THROTTLE_RATE)

    key = _per_thread("key")
    history = _per_thread("history")
    now = _per_thread("now")

    def allow_request(self, request):
        self.rate = settings.API_THROTTLE_RATE
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request)

    def get_cache_key(self, request):
        token = getattr(request, "api_token", None)
        if token:
            ident = "t:" + hashlib.sha256(token.encode()).hexdigest()
        elif getattr(request, "auth", None) is not None:
            ident = f"u:{request.auth.pk}"
        else:
            ident = "ip:" + (self.get_ident(request) or "")
        return self.cache_format % {"scope": self.scope, "ident": ident}


PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details.",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "code": {"type": "string", "description": "Stable, machine-readable: what went wrong."},
        "errors": {
            "type": "array",
            "description": "Validation errors, one per field.",
            "items": {
                "type": "object",
                "properties": {
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                    "loc": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "details": {"type": "object"},
    },
}
# Documented on the POSTs that honour it; the middleware does the work.
IDEMPOTENT_PATHS = (re.compile(r"^/api/tickets/?$"), re.compile(r"^/api/approvals/\{[^}]+\}/decision/?$"))
IDEMPOTENCY_KEY_PARAMETER = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "description": "Retry safely: the same key and body replay the first response; another body answers 409. "
    "Keys are per user and expire after 24 hours.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": IDEMPOTENCY_KEY_PATTERN},
}
ERROR_DESCRIPTIONS = {
    400: "Bad request: a control character in the input, or a body that is not JSON.",
    401: "No valid Bearer token or session.",
    403: "Not allowed: role, tenant or CSRF.",
    404: "Not found (or another tenant's).",
    409: "Conflict: the state changed, or an Idempotency-Key reused with another body.",
    422: "Invalid input; `errors` names each field.",
    429: "Too many requests for this token; see Retry-After.",
}


def operation_error_codes(path: str, method: str, operation: dict) -> set[int]:
    """The 4xx an operation can answer, from what it takes: every operation may see a control
    character (400); an authenticated one 401, 403 and 429; one with a path parameter, or that
    looks an order or customer up, 404; one with parameters or a body 422; a POST 409."""
    codes = {400}
    if operation.get("security"):
        codes |= {401, 403, 429}
    if "{" in path:
        codes.add(404)
    if operation.get("parameters") or operation.get("requestBody"):
        codes.add(422)
    if method == "post":
        codes |= {404, 409, 422}
    return codes


# Unknown fields are ignored, but the middleware still reads their strings: any JSON value
# without a control character in its strings or keys.
ANY_JSON_NAME = "JsonWithoutControlCharacters"
ANY_JSON_SCHEMA = {
    "description": "Any JSON value whose strings and keys hold no control character.",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number"},
        {"type": "string", "pattern": NO_CONTROL_CHARS_PATTERN},
        {"type": "array", "items": {"$ref": "#/components/schemas/" + ANY_JSON_NAME}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_CONTROL_CHARS_PATTERN},
            "additionalProperties": {"$ref": "#/components/schemas/" + ANY_JSON_NAME},
        },
    ],
}


def strings_refuse_control_characters(node, components: dict, seen: set | None = None) -> None:
    """Give every string a request may send (in a parameter or a body, nested, in a list or a
    union) the pattern of the one control-character rule (ledger.text), unless it carries a
    pattern of its own (which excludes them too: money, non-blank text). BadInputMiddleware is
    the check; this is the document saying so, from the same constant."""
    seen = set() if seen is None else seen
    if isinstance(node, list):
        for item in node:
            strings_refuse_control_characters(item, components, seen)
        return
    if not isinstance(node, dict):
        return
    ref = node.get("$ref", "")
    if ref.startswith("#/components/schemas/") and ref not in seen:
        seen.add(ref)
        strings_refuse_control_characters(components.get(ref.rsplit("/", 1)[1]), components, seen)
    if node.get("type") == "string" and "pattern" not in node and "format" not in node and "enum" not in node:
        node["pattern"] = NO_CONTROL_CHARS_PATTERN
    if node.get("type") == "object":  # the middleware reads keys and unknown fields' values too
        node.setdefault("propertyNames", {"pattern": NO_CONTROL_CHARS_PATTERN})
        node.setdefault("additionalProperties", {"$ref": "#/components/schemas/" + ANY_JSON_NAME})
    for key in ("properties", "$defs"):
        for child in (node.get(key) or {}).values():
            strings_refuse_control_characters(child, components, seen)
    for key in ("items", "anyOf", "oneOf", "allOf", "schema", "additionalProperties"):
        strings_refuse_control_characters(node.get(key), components, seen)


class RefundagentAPI(NinjaAPI):
    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
        problem_ref = {PROBLEM_CONTENT_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        components = schema["components"]["schemas"]
        components[ANY_JSON_NAME] = ANY_JSON_SCHEMA
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                strings_refuse_control_characters(operation.get("parameters"), components)
                for media in (operation.get("requestBody") or {}).get("content", {}).values():
                    strings_refuse_control_characters(media, components)
                if method == "post" and any(p.match(path) for p in IDEMPOTENT_PATHS):
                    operation.setdefault("parameters", []).append(IDEMPOTENCY_KEY_PARAMETER)
                responses = operation.setdefault("responses", {})
                for code in sorted(operation_error_codes(path, method, operation)):
                    responses.setdefault(code, {"description": ERROR_DESCRIPTIONS[code], "content": problem_ref})
        return schema


api = RefundagentAPI(
    title="refundagent",
    version="1",
    description="Refund tickets investigated by an agent; money moves only after finance approves one exact action.",
    auth=[BearerToken(), SessionCookie()],
    throttle=[TokenRateThrottle()],
    urls_namespace="api",
)


@api.exception_handler(DomainError)
def domain_error(request, exc: DomainError):
    extra = {"details": exc.details} if exc.details else {}
    return problem_response(exc.status_code, detail=exc.message, code=exc.code, **extra)


@api.exception_handler(AuthenticationError)
def unauthenticated(request, exc):
    return problem_response(401, detail="Authentication required: a Bearer token or a session.", code="unauthenticated")


@api.exception_handler(ValidationError)
def invalid_input(request, exc: ValidationError):
    errors = field_errors(exc.errors)
    return problem_response(422, detail=validation_detail(errors), code="invalid_input", errors=errors)


@api.exception_handler(HttpError)
def http_error(request, exc: HttpError):
    # ninja's own: 429 (throttled), 400 (a body that is not JSON), 403 (CSRF), ...
    return problem_response(exc.status_code, detail=str(exc))


@api.exception_handler(Http404)
def not_found(request, exc):
    return problem_response(404, detail=str(exc) or "Not found.")


class HealthOut(Schema):
    """The checks' verdicts: "ok" (or "eager" for the broker without one) or "error: <kind>".
    More checks may be added as more fields (the schema allows them)."""

    model_config = ConfigDict(extra="allow")

    status: str = Field(description="ok, or error when any check failed (then 503).")
    database: str
    broker: str
    worker: str | None = Field(None, description="A worker answered a ping in time (eager: none needed).")
    beat: str | None = Field(None, description="Beat ran the sweep within its interval (eager: none needed).")
    migrations: str | None = Field(None, description="Every migration is applied.")
    queued_tickets: str | None = Field(None, description="The oldest queued ticket is younger than the threshold.")
    approved_unexecuted: str | None = Field(
        None, description="The oldest approved, unexecuted refund is younger than the threshold."
    )
    ticket_followups: str | None = Field(
        None,
        description="No approval event has waited longer than the threshold to reach its ticket (a receiver "
        "failed and the sweep retries it).",
    )
    details: dict = Field(
        default_factory=dict, description="Counts, ages and timestamps behind the verdicts: staff only, else empty."
    )


@api.get("/health", auth=None, throttle=[], tags=["ops"], response={200: HealthOut, 503: HealthOut})
def health(request):
    """Database, broker, a worker's ping, beat's last run, the oldest queued ticket and approved
    refund, approval events waiting to reach their ticket, migrations (config/health.py). 503 when
    one fails. The numbers behind the verdicts are for staff (a signed-in session) only."""
    status, body = health_report()
    if not request.user.is_staff:
        body["details"] = {}
    return Status(status, body)


class LivenessOut(Schema):
    status: str = Field(description="ok, or error when the database does not answer (then 503).")
    database: str


@api.get("/health/live", auth=None, throttle=[], tags=["ops"], response={200: LivenessOut, 503: LivenessOut})
def health_live(request):
    """The web process and its database, nothing else: for a load balancer and the web
    container's health check. A worker, beat or the broker being down does not fail it (the
    outbox keeps their work until they are back; /api/health reports them)."""
    status, body = health_live_report()
    return Status(status, body)


api.add_router("/orders", ledger_router)
api.add_router("/refunds", refunds_router)
api.add_router("/approvals", approvals_router)
api.add_router("/tickets", tickets_router)
