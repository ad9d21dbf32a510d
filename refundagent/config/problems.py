"""RFC 9457 problem details: the one shape of every 4xx/5xx under /api/.

`type`, `title`, `status`, `detail` (a sentence), `code` (stable, machine-readable: the same
codes as before problem details) and, for validation errors, `errors` (one per field).
"""

import json
from http import HTTPStatus

from django.http import HttpResponse

PROBLEM_CONTENT_TYPE = "application/problem+json"

# The code of a response that carries none of its own (a 404 of an unknown path, a 405, ...).
DEFAULT_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_input",
    429: "throttled",
    500: "server_error",
    503: "unavailable",
}


def problem_body(status: int, *, detail: str, code: str | None = None, errors: list | None = None, **extra) -> dict:
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    code = code or DEFAULT_CODES.get(status, "error")
    # "about:blank": the status says it all (RFC 9457 4.2.1); `code` tells the cases apart.
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "code": code}
    if errors is not None:
        body["errors"] = errors
    body.update(extra)
    return body


def problem_response(
    status: int, *, detail: str, code: str | None = None, errors: list | None = None, **extra
) -> HttpResponse:
    body = problem_body(status, detail=detail, code=code, errors=errors, **extra)
    return HttpResponse(json.dumps(body, default=str), status=status, content_type=PROBLEM_CONTENT_TYPE)


def field_errors(errors: list[dict]) -> list[dict]:
    """pydantic/ninja validation errors, one per field: `field` (dotted, without ninja's
    `body`/`query`/`payload` prefix), `message`, `type` and the original `loc`."""
    out = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        # loc is (source, param name, field...) for bodies and (source, field) for queries.
        field_parts = loc[2:] if len(loc) > 2 and loc[0] == "body" else loc[1:]
        out.append(
            {
                "field": ".".join(field_parts) or (loc[-1] if loc else ""),
                "message": str(error.get("msg", "invalid")),
                "type": str(error.get("type", "")),
                "loc": loc,
            }
        )
    return out


def validation_detail(errors: list[dict]) -> str:
    return "Invalid input: " + "; ".join(f"{e['field'] or 'body'}: {e['message']}" for e in errors)


def problem_from_response(response: HttpResponse) -> HttpResponse:
    """An error response in another shape (ninja's JSON, Django's HTML 404/405/500) as a
    problem: the detail and code it carried are kept."""
    detail, code, errors = None, None, None
    if response.get("Content-Type", "").startswith("application/json"):
        try:
            data = json.loads(response.content)
        except ValueError:
            data = None
        if isinstance(data, dict):
            code = data.get("code")
            if isinstance(data.get("detail"), list):
                errors = field_errors(data["detail"])
                detail = validation_detail(errors)
            elif data.get("detail"):
                detail = str(data["detail"])
    status = response.status_code
    if detail is None:
        try:
            detail = HTTPStatus(status).description or HTTPStatus(status).phrase
        except ValueError:
            detail = "Error."
        if status == 404:
            detail = "No such resource under /api/."
        elif status == 405:
            detail = f"Method not allowed; allowed: {response.get('Allow', '')}."
    new = problem_response(status, detail=detail, code=code, errors=errors)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if response.has_header(header):
            new[header] = response[header]
    return new
