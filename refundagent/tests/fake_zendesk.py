"""A local Zendesk-compatible HTTP server for tests (standard library only), driven by the real
client (refundagent.zendesk.client) through ZENDESK_API_BASE, and a webhook sender that signs as
Zendesk does.

It implements the Ticketing API calls the product makes, in Zendesk's wire format:
GET /api/v2/users/me.json, GET /api/v2/users/{id}.json, GET /api/v2/tickets/{id}.json,
GET /api/v2/tickets/{id}/comments.json, PUT /api/v2/tickets/{id}.json with
{"ticket": {"comment": {"body" | "html_body", "public"}}, "metadata": {"custom": {...}}} (the
comment is added; the answer is {"ticket", "audit": {"events": [{"type": "Comment", ...}]}}).
Basic auth `EMAIL/token:TOKEN` against the agents added with `add_agent`; anything else is 401
({"error": "Couldn't authenticate you"}). Faults are queued per call (`fail_next(...)`): "429"
(with Retry-After: `retry_after`), "500", "503", "drop" (a PUT is performed, then the connection
is closed without an answer; a GET is closed unanswered); `delay` seconds are slept on every call;
`down = True` answers 503 to everything until set back. Every call is recorded in `calls`.
"""

import base64
import hashlib
import hmac
import itertools
import json
import threading
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit

import requests

from ledger.tests.fake_server import FakeServer, JSONHandler


def sign(body: bytes, secret: str, timestamp: str) -> str:
    """X-Zendesk-Webhook-Signature: base64(HMAC-SHA256(secret, timestamp + raw body))."""
    digest = hmac.new(secret.encode(), timestamp.encode() + body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def zendesk_timestamp(at: float | None = None) -> str:
    """Zendesk's X-Zendesk-Webhook-Signature-Timestamp: ISO 8601 in UTC, to the second."""
    moment = datetime.fromtimestamp(time.time() if at is None else at, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def webhook_send(
    url: str,
    payload,
    secret: str,
    *,
    timestamp: str | None = None,
    signature: str | None = None,
    raw: bytes | None = None,
    timeout: float = 10.0,
) -> requests.Response:
    """POST a webhook to the product as Zendesk would: the raw body signed with the timestamp."""
    body = raw if raw is not None else json.dumps(payload).encode()
    timestamp = zendesk_timestamp() if timestamp is None else timestamp
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Zendesk Webhook",
        "X-Zendesk-Webhook-Id": "01GK8E6BKWMJZD2T8Y5AXJQMG5",
        "X-Zendesk-Webhook-Signature-Timestamp": timestamp,
        "X-Zendesk-Webhook-Signature": sign(body, secret, timestamp) if signature is None else signature,
    }
    return requests.post(url, data=body, headers=headers, timeout=timeout)


def ticket_created_event(*, account_id: int, ticket_id: int, requester_id: int, subject: str, description: str) -> dict:
    """An event webhook's `zen:event-type:ticket.created`, as Zendesk sends it."""
    now = zendesk_timestamp()
    return {
        "account_id": account_id,
        "detail": {
            "actor_id": str(requester_id),
            "assignee_id": None,
            "brand_id": "360001",
            "created_at": now,
            "description": description,
            "external_id": None,
            "form_id": "360002",
            "group_id": None,
            "id": str(ticket_id),
            "is_public": True,
            "organization_id": None,
            "priority": "LOW",
            "requester_id": str(requester_id),
            "status": "NEW",
            "subject": subject,
            "submitter_id": str(requester_id),
            "tags": [],
            "type": "QUESTION",
            "updated_at": now,
            "via": {"channel": "web_form"},
        },
        "event": {},
        "id": f"cbe4028c-7239-495d-b020-f22348516046-{ticket_id}",
        "subject": f"zen:ticket:{ticket_id}",
        "time": now,
        "type": "zen:event-type:ticket.created",
        "zendesk_event_version": "2022-11-06",
    }


class FakeZendesk(FakeServer):
    def __init__(self):
        self.agents: dict[tuple[str, str], dict] = {}  # (email, token) -> the agent user
        self.users: dict[int, dict] = {}
        self.tickets: dict[int, dict] = {}
        self.comments: dict[int, list[dict]] = {}
        self.calls: list[dict] = []
        self.faults: list[str] = []
        self.retry_after = 7
        self.delay = 0.0
        self.down = False
        self.lock = threading.Lock()
        self._ids = itertools.count(1000)
        super().__init__()

    def fail_next(self, *faults: str):
        with self.lock:
            self.faults.extend(faults)

    def add_agent(self, email: str, token: str, *, role="admin") -> dict:
        with self.lock:
            user = {"id": next(self._ids), "email": email, "name": "Support Agent", "role": role, "verified": True}
            self.users[user["id"]] = user
            self.agents[(email, token)] = user
            return user

    def add_user(self, email: str, *, name="Customer", verified=True) -> dict:
        with self.lock:
            user = {"id": next(self._ids), "email": email, "name": name, "role": "end-user", "verified": verified}
            self.users[user["id"]] = user
            return user

    def add_ticket(self, *, requester_id: int, subject="Refund please", description="I want a refund.") -> dict:
        with self.lock:
            ticket_id = next(self._ids)
            ticket = {
                "id": ticket_id,
                "requester_id": requester_id,
                "subject": subject,
                "description": description,
                "status": "new",
                "url": f"{self.url}/api/v2/tickets/{ticket_id}.json",
            }
            self.tickets[ticket_id] = ticket
            self.comments[ticket_id] = [
                {
                    "id": next(self._ids),
                    "type": "Comment",
                    "author_id": requester_id,
                    "body": description,
                    "public": True,
                    "metadata": {"system": {}, "custom": {}},
                }
            ]
            return ticket

    def added_comments(self, ticket_id: int) -> list[dict]:
        """The comments added through the API (not the ticket's first one)."""
        return [c for c in self.comments.get(ticket_id, [])[1:]]

    def puts(self) -> list[dict]:
        return [c for c in self.calls if c["method"] == "PUT"]

    def _handler(self):
        fake = self

        class Handler(JSONHandler):
            content_type = "application/json; charset=utf-8"

            def _agent(self):
                header = self.headers.get("Authorization", "")
                if not header.startswith("Basic "):
                    return None
                try:
                    user, _, token = base64.b64decode(header[6:]).decode().partition(":")
                except ValueError:
                    return None
                email, _, kind = user.rpartition("/")
                return fake.agents.get((email, token)) if kind == "token" else None

            def _enter(self, body=None) -> str | None:
                """Record the call and take its fault; answer it and return "answered", or the fault."""
                path = urlsplit(self.path).path
                with fake.lock:
                    fake.calls.append({"method": self.command, "path": path, "body": body})
                    fault = fake.faults.pop(0) if fake.faults else None
                    down = fake.down
                if fake.delay:
                    time.sleep(fake.delay)
                if down or fault in ("500", "503"):
                    self._send(int(fault or 503), {"error": "ServiceUnavailable"})
                    return "answered"
                if fault == "429":
                    self._send(429, {"error": "APIRateLimitExceeded"}, {"Retry-After": str(fake.retry_after)})
                    return "answered"
                if self._agent() is None:
                    self._send(401, {"error": "Couldn't authenticate you"})
                    return "answered"
                if fault == "drop" and self.command == "GET":
                    self.close_connection = True
                    return "answered"
                return fault

            def do_GET(self):
                if self._enter() == "answered":
                    return
                parts = urlsplit(self.path).path.strip("/").split("/")
                # api/v2/users/me.json, api/v2/users/{id}.json, api/v2/tickets/{id}.json, .../comments.json
                if parts[:3] == ["api", "v2", "users"] and len(parts) == 4:
                    name = parts[3].removesuffix(".json")
                    user = self._agent() if name == "me" else fake.users.get(int(name) if name.isdigit() else -1)
                    if user is None:
                        return self._send(404, {"error": "RecordNotFound", "description": "Not found"})
                    return self._send(200, {"user": user})
                if parts[:3] == ["api", "v2", "tickets"] and len(parts) in (4, 5):
                    ident = parts[3].removesuffix(".json")
                    ticket = fake.tickets.get(int(ident) if ident.isdigit() else -1)
                    if ticket is None:
                        return self._send(404, {"error": "RecordNotFound", "description": "Not found"})
                    if len(parts) == 4:
                        return self._send(200, {"ticket": ticket})
                    with fake.lock:
                        comments = list(fake.comments[ticket["id"]])
                    return self._send(
                        200, {"comments": comments, "next_page": None, "previous_page": None, "count": len(comments)}
                    )
                self._send(404, {"error": "InvalidEndpoint"})

            def do_PUT(self):
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = None
                fault = self._enter(body)
                if fault == "answered":
                    return
                parts = urlsplit(self.path).path.strip("/").split("/")
                ident = parts[3].removesuffix(".json") if len(parts) == 4 else ""
                ticket = fake.tickets.get(int(ident) if ident.isdigit() else -1)
                if ticket is None:
                    return self._send(404, {"error": "RecordNotFound", "description": "Not found"})
                comment_in = ((body or {}).get("ticket") or {}).get("comment")
                if not isinstance(comment_in, dict) or not (comment_in.get("body") or comment_in.get("html_body")):
                    return self._send(422, {"error": "RecordInvalid", "description": "Record validation errors"})
                with fake.lock:
                    comment = {
                        "id": next(fake._ids),
                        "type": "Comment",
                        "author_id": self._agent()["id"],
                        "body": comment_in.get("body") or comment_in.get("html_body"),
                        "html_body": comment_in.get("html_body") or "",
                        "public": comment_in.get("public", True),
                        "metadata": {
                            "system": {"client": "refundagent"},
                            "custom": ((body or {}).get("metadata") or {}).get("custom") or {},
                        },
                    }
                    fake.comments[ticket["id"]].append(comment)
                if fault == "drop":
                    # Performed, then the answer is lost.
                    self.close_connection = True
                    return
                audit = {"id": next(fake._ids), "ticket_id": ticket["id"], "events": [comment]}
                self._send(200, {"ticket": ticket, "audit": audit})

        return Handler
