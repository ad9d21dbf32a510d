"""The Zendesk Ticketing API, the few calls the product makes (requests, basic auth
`EMAIL/token:TOKEN`). `ZENDESK_API_BASE` (tests only) replaces `https://SUB.zendesk.com`.

Hand-written over `requests` rather than a Zendesk SDK: five calls, and the product must see
every status (429 and its Retry-After, a 5xx, a lost answer) to decide between waiting,
retrying and giving up; the SDKs retry or sleep inside. The token never leaves this module in
an error message: errors name the status and Zendesk's own error text only.
"""

from dataclasses import dataclass

import requests
from django.conf import settings

from .exceptions import ZendeskRateLimited, ZendeskRefused, ZendeskUnavailable

RETRY_AFTER_DEFAULT = 60


@dataclass(frozen=True)
class Credentials:
    subdomain: str
    email: str
    token: str

    def __repr__(self):  # never the token
        return f"Credentials({self.subdomain!r}, {self.email!r})"


def credentials_of(connection) -> Credentials:
    return Credentials(subdomain=connection.subdomain, email=connection.agent_email, token=connection.api_token)


def api_base(subdomain: str) -> str:
    return settings.ZENDESK_API_BASE.rstrip("/") or f"https://{subdomain}.zendesk.com"


def _retry_after(response) -> int:
    try:
        return max(1, int(float(response.headers.get("Retry-After", RETRY_AFTER_DEFAULT))))
    except ValueError:
        return RETRY_AFTER_DEFAULT


def _call(credentials: Credentials, method: str, path: str, *, json=None, params=None) -> dict:
    url = f"{api_base(credentials.subdomain)}{path}"
    try:
        response = requests.request(
            method,
            url,
            json=json,
            params=params,
            auth=(f"{credentials.email}/token", credentials.token),
            timeout=settings.ZENDESK_TIMEOUT_SECONDS,
            headers={"Accept": "application/json"},
        )
    except requests.RequestException as exc:
        # The request may have been performed: the caller treats the result as unknown.
        raise ZendeskUnavailable(f"Zendesk did not answer {method} {path}: {type(exc).__name__}") from None
    if response.status_code == 429:
        wait = _retry_after(response)
        raise ZendeskRateLimited(f"Zendesk rate limit on {method} {path}; retry after {wait} s", retry_after=wait)
    if response.status_code >= 500:
        raise ZendeskUnavailable(f"Zendesk answered {response.status_code} to {method} {path}")
    if response.status_code >= 400:
        raise ZendeskRefused(f"Zendesk refused {method} {path}: {response.status_code} {_error_text(response)}")
    try:
        return response.json()
    except ValueError:
        raise ZendeskUnavailable(f"Zendesk's answer to {method} {path} was not JSON") from None


def _error_text(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.reason or ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            error = error.get("title") or error.get("message")
        return str(body.get("description") or error or "")[:300]
    return ""


def zendesk_me(credentials: Credentials) -> dict:
    """GET /api/v2/users/me.json: the agent the token belongs to (an anonymous user when refused)."""
    return _call(credentials, "GET", "/api/v2/users/me.json").get("user") or {}


def zendesk_user(credentials: Credentials, user_id: int) -> dict:
    return _call(credentials, "GET", f"/api/v2/users/{int(user_id)}.json").get("user") or {}


def zendesk_ticket(credentials: Credentials, ticket_id: int) -> dict:
    return _call(credentials, "GET", f"/api/v2/tickets/{int(ticket_id)}.json").get("ticket") or {}


def zendesk_comments(credentials: Credentials, ticket_id: int) -> list[dict]:
    """Every comment of a ticket, following `next_page` (newest pages last)."""
    comments, page = [], 1
    while True:
        body = _call(credentials, "GET", f"/api/v2/tickets/{int(ticket_id)}/comments.json", params={"page": page})
        comments.extend(body.get("comments") or [])
        if not body.get("next_page") or page >= 50:
            return comments
        page += 1


def zendesk_comment_add(credentials: Credentials, ticket_id: int, *, body: str, public: bool, marker: str) -> dict:
    """PUT /api/v2/tickets/{id}.json with one comment. The marker goes into the audit's custom
    metadata (Zendesk keeps it on the comment, invisible to the requester): how a retry after a
    lost answer finds the comment it already made."""
    payload = {
        "ticket": {"comment": {"body": body, "public": public}},
        "metadata": {"custom": {"refundagent_key": marker}},
    }
    return _call(credentials, "PUT", f"/api/v2/tickets/{int(ticket_id)}.json", json=payload)
