"""Request middleware of the wiring: bad characters refused in one place, problem details for
every error under /api/, and Idempotency-Key on the API's two creating POSTs."""

import json
import math
import re

from django.http import HttpResponse, HttpResponseBadRequest

from approvals.second_factor import second_factor_check
from approvals.services.decisions import approval_decider_check
from ledger.committed import when_database_answers
from ledger.exceptions import DomainError
from ledger.idempotency import (
    idempotency_key_claim,
    idempotency_key_complete,
    idempotency_key_release,
    idempotency_request_hash,
)
from ledger.tenancy import api_token_authenticate, tenant_for_user, user_require_access
from ledger.text import CONTROL_CHARS, json_strings

from .api import TokenRateThrottle
from .problems import PROBLEM_CONTENT_TYPE, problem_from_response, problem_response

API_PREFIX = "/api/"

_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _is_api(request) -> bool:
    return request.path_info.startswith(API_PREFIX) or request.path_info == API_PREFIX.rstrip("/")


TOO_DEEP = "too_deep"


def _bad_input_where(request) -> str | None:
    """Where the request carries a control character (path, query, form, body), TOO_DEEP for a
    JSON body nested beyond what Python parses (a RecursionError, a 500, otherwise), or None."""
    if CONTROL_CHARS.search(request.path_info):
        return "path"
    for key, values in request.GET.lists():
        if CONTROL_CHARS.search(key) or any(CONTROL_CHARS.search(v) for v in values):
            return f"query parameter {key!r}"
    content_type = request.content_type or ""
    if request.method in ("GET", "HEAD", "OPTIONS", "DELETE") and not request.META.get("CONTENT_LENGTH"):
        return None
    if content_type.startswith(_FORM_TYPES):
        # Read the raw body first, so the form is parsed from the cached bytes instead of
        # consuming the stream: a view that reads request.body later (the API, the Stripe
        # webhook) would otherwise raise RawPostDataException, a 500. The product takes no file
        # uploads, so holding the body in memory (DATA_UPLOAD_MAX_MEMORY_SIZE) costs nothing.
        request.body  # noqa: B018
        for key, values in request.POST.lists():
            if CONTROL_CHARS.search(key) or any(CONTROL_CHARS.search(v) for v in values):
                return f"form field {key!r}"
    elif b"\x00" in request.body:
        return "body"
    # Any body that parses as JSON is checked, whatever its declared type: django-ninja parses
    # the body as JSON whatever the Content-Type (text/plain, a form type, none), and so may a view.
    try:
        document = json.loads(request.body)
        if any(CONTROL_CHARS.search(text) for text in json_strings(document)):
            return "body"
    except (ValueError, UnicodeDecodeError):
        return None  # not JSON: the view answers that
    except RecursionError:
        return TOO_DEEP
    return None


class BadInputMiddleware:
    """NUL and other C0 control characters (tab, newline, CR allowed) in the path, the query
    string, a form post or a body that parses as JSON whatever its Content-Type (keys and values,
    raw or as a \\u escape) answer 400 before any view runs: the API, the web UI, the admin (its
    list filters are query parameters) and the Stripe webhook alike."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        where = _bad_input_where(request)
        if where is None:
            return self.get_response(request)
        if where == TOO_DEEP:
            detail, code = "The request's JSON body is nested too deeply.", TOO_DEEP
        else:
            detail = f"The request's {where} contains a control character (NUL or another C0 character)."
            code = "control_character"
        if _is_api(request):
            return problem_response(400, detail=detail, code=code)
        return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")


# Their 503 keeps the checks' own body (the verdicts), not a problem document.
HEALTH_PATHS = {"/api/health", "/api/health/live"}


class ApiProblemMiddleware:
    """Every 4xx/5xx under /api/ leaves as problem details: the API's own error handlers already
    answer in that shape; this converts the rest (unknown paths, wrong methods, Django's 500)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code >= 400
            and _is_api(request)
            and not getattr(response, "streaming", False)
            and not response.get("Content-Type", "").startswith(PROBLEM_CONTENT_TYPE)
            and not (request.path_info.rstrip("/") in HEALTH_PATHS and response.status_code == 503)
        ):
            return problem_from_response(response)
        return response


# Answers given before the operation ran (no credentials, CSRF, throttled) are not kept: the
# client fixes the cause and retries with the same key (Stripe does the same).
NOT_KEPT = {401, 403, 429}


def _may_file_ticket(request, user) -> None:
    tenant_for_user(user)
    user_require_access(user, "tickets.file")


def _may_decide(request, user) -> None:
    tenant_for_user(user)
    approval_decider_check(user=user)
    if not _bearer(request):
        second_factor_check(user=user)


def _bearer(request) -> str:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else ""


# The two POSTs that honour Idempotency-Key (docs/api.md), each with the check a fresh request
# makes of its caller before it runs: a replay is answered only to a caller who passes it now.
IDEMPOTENT_PATHS = {
    re.compile(r"^/api/tickets/?$"): _may_file_ticket,
    re.compile(r"^/api/approvals/\d+/decision/?$"): _may_decide,
}


def _caller(request):
    """The user the API would authenticate (Bearer token, else the session), or None."""
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return api_token_authenticate(header[7:].strip())
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


class _ReplayThrottle(TokenRateThrottle):
    """The API's own rate limit (same scope, same cache keys), charged for a replay: a replay is
    a request like any other, so it counts and is refused over the limit."""

    def charge(self, request, user) -> int | None:
        """None when the request fits the limit (and is counted), else the seconds to wait."""
        token = _bearer(request)
        counted = _Counted(api_token=token or None, auth=None if token else user, META=request.META)
        if self.allow_request(counted):
            return None
        return math.ceil(self.wait() or 1)


class _Counted:
    """What the throttle reads of a request: its token, else its user, else its address."""

    def __init__(self, *, api_token, auth, META):
        self.api_token, self.auth, self.META = api_token, auth, META


class IdempotencyMiddleware:
    """Stripe's Idempotency-Key on POST /api/tickets and POST /api/approvals/{id}/decision (see
    ledger/idempotency.py). A replay carries `Idempotent-Replayed: true`. 5xx, 401, 403 and 429
    answers are not kept: the key is released and a retry runs anew. A request without a caller is
    left to the API (401) and keeps nothing."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.throttle = _ReplayThrottle()

    def __call__(self, request):
        key = request.headers.get("Idempotency-Key")
        caller_check = next((check for p, check in IDEMPOTENT_PATHS.items() if p.match(request.path_info)), None)
        if key is None or request.method != "POST" or caller_check is None:
            return self.get_response(request)
        user = _caller(request)
        if user is None:
            return self.get_response(request)
        request_hash = idempotency_request_hash(method=request.method, path=request.path_info, body=request.body)
        try:
            stored = idempotency_key_claim(user=user, key=key, request_hash=request_hash)
        except DomainError as exc:
            return problem_response(exc.status_code, detail=exc.message, code=exc.code)
        if stored is not None:
            refused = self._replay_refused(request, user, caller_check)
            if refused is not None:
                return refused
            response = HttpResponse(
                bytes(stored.response_body), status=stored.status_code, content_type=stored.content_type or None
            )
            response["Idempotent-Replayed"] = "true"
            return response
        try:
            response = self.get_response(request)
        except BaseException:
            idempotency_key_release(user=user, key=key)
            raise
        if response.status_code in NOT_KEPT or response.status_code >= 500 or getattr(response, "streaming", False):
            idempotency_key_release(user=user, key=key)
        else:
            # The operation committed: keeping its answer waits out a database restart.
            when_database_answers(
                lambda: idempotency_key_complete(
                    user=user,
                    key=key,
                    status_code=response.status_code,
                    body=response.content,
                    content_type=response.get("Content-Type", ""),
                )
            )
        return response

    def _replay_refused(self, request, user, caller_check):
        """The answer a fresh request would get before its operation ran (429 over the rate
        limit, then 403 for a caller who may not make it now), or None: the replay may be
        answered. The stored answer is kept either way, for when the caller may again."""
        wait = self.throttle.charge(request, user)
        if wait is not None:
            response = problem_response(429, detail=f"Request was throttled. Expected available in {wait} seconds.")
            response["Retry-After"] = str(wait)
            return response
        try:
            caller_check(request, user)
        except DomainError as exc:
            return problem_response(exc.status_code, detail=exc.message, code=exc.code)
        return None
