"""A local fake of the Anthropic Messages API, for driving the real `anthropic` client in tests.

An `http.server` on 127.0.0.1 (a free port) in a background thread answers `POST /v1/messages`
from a queue of scripted responses and records every request (headers and JSON body):

    def test_something(fake_anthropic):
        fake_anthropic.add_tool_use("orders_lookup_order", {"order_id": "ORD-5001"})
        fake_anthropic.add_overloaded()                      # 529 overloaded_error
        fake_anthropic.add_text("Done.")
        provider = fake_anthropic.provider()                 # AnthropicProvider pointed here
        ...
        assert len(fake_anthropic.requests) == 3

Like the real API, it refuses (400 invalid_request_error) a request that the real API would
refuse for its shape: no model, max_tokens < 1, no messages, a role other than user/assistant,
a tool name outside ^[a-zA-Z0-9_-]{1,64}$, more than 4 cache_control breakpoints, or a
`tool_use` whose `tool_result` is missing from the next message. A request with no credentials gets 401.
When the queue is empty it answers 400 `fake_queue_empty`, so a test that scripted too few
responses fails loudly instead of hanging; with a `responder` (e.g. `PlannedReplies`: a model
that investigates and drafts, slow if asked, with prompt caching reported as Anthropic does, and
rate limits on demand) it asks that instead, for tests and benchmarks with many tickets at once.

Retries are the SDK's. An error the SDK retries (408, 409, 429, 5xx) carries
`retry-after-ms: 1` unless the test gives its own retry header, so the SDK waits a millisecond
instead of its backoff (it ignores a `retry-after-ms` of 0 and backs off as without one).
"""

import hashlib
import itertools
import json
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
RETRY_AFTER_MS = "1"
DEFAULT_USAGE = {
    "input_tokens": 100,
    "output_tokens": 20,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict  # lower-cased names
    body: dict | None

    @property
    def tool_names(self) -> list[str]:
        return [t["name"] for t in (self.body or {}).get("tools", [])]


@dataclass
class Scripted:
    status: int = 200
    body: dict | None = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (for client timeouts)
    disconnect: bool = False  # close the connection without an answer (a connection error)


def error_body(error_type: str, message: str) -> dict:
    return {"type": "error", "error": {"type": error_type, "message": message}}


class FakeAnthropic:
    def __init__(self, *, strict: bool = True, responder=None, host: str = "127.0.0.1"):
        self.strict = strict
        self.responder = responder  # body -> Scripted, when nothing is queued
        self.requests: list[RecordedRequest] = []
        self._queue: deque[Scripted] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._server = ThreadingHTTPServer((host, 0), _handler_for(self))
        self._server.request_queue_size = 256  # many workers' calls arrive at once
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-anthropic", daemon=True
        )

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeAnthropic":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def provider(self, **overrides):
        """An AnthropicProvider pointed at this server (its retryable errors say to retry at once)."""
        from refundagent.agent.providers.anthropic import AnthropicProvider

        options = {
            "api_key": "test-key",
            "base_url": self.url,
            "model": "claude-fake",
            "max_retries": 2,
            "timeout": 5.0,
        }
        options.update(overrides)
        return AnthropicProvider(**options)

    # -- scripting ----------------------------------------------------------------------------

    def add(self, scripted: Scripted) -> "FakeAnthropic":
        with self._lock:
            self._queue.append(scripted)
        return self

    def add_message(
        self, content: list[dict], *, stop_reason: str = "end_turn", usage: dict | None = None, model: str | None = None
    ) -> "FakeAnthropic":
        """A 200 answer with these content blocks. `usage=None` means DEFAULT_USAGE; pass
        `usage={}` to omit the usage object entirely."""
        body = {
            "id": f"msg_fake_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
        }
        if usage != {}:
            body["usage"] = {**DEFAULT_USAGE, **(usage or {})}
        return self.add(Scripted(body=body))

    def add_text(self, text: str, **kwargs) -> "FakeAnthropic":
        return self.add_message([{"type": "text", "text": text}], **kwargs)

    def add_tool_use(
        self, name: str, tool_input: dict, *, text: str | None = None, tool_use_id: str | None = None, **kwargs
    ) -> "FakeAnthropic":
        """A `tool_use` answer calling one tool (optionally preceded by a text block)."""
        return self.add_tool_uses([(name, tool_input)], text=text, ids=[tool_use_id] if tool_use_id else None, **kwargs)

    def add_tool_uses(
        self, calls: list[tuple[str, dict]], *, text: str | None = None, ids: list[str] | None = None, **kwargs
    ) -> "FakeAnthropic":
        content = [{"type": "text", "text": text}] if text else []
        for i, (name, tool_input) in enumerate(calls):
            block_id = ids[i] if ids else f"toolu_fake_{next(self._ids)}"
            content.append({"type": "tool_use", "id": block_id, "name": name, "input": tool_input})
        return self.add_message(content, stop_reason="tool_use", **kwargs)

    def add_error(self, status: int, error_type: str, message: str = "", *, headers: dict | None = None):
        """An error answer. `headers=None` on a retryable status means `retry-after-ms: 1`; pass
        `headers={}` to send no retry header (the SDK then backs off on its own)."""
        if headers is None:
            headers = {"retry-after-ms": RETRY_AFTER_MS} if retryable(status) else {}
        return self.add(Scripted(status=status, body=error_body(error_type, message or error_type), headers=headers))

    def add_overloaded(self, message: str = "Overloaded", *, headers: dict | None = None) -> "FakeAnthropic":
        return self.add_error(529, "overloaded_error", message, headers=headers)

    def add_rate_limited(self, message: str = "Rate limited", *, retry_after: str | None = None):
        return self.add_error(
            429, "rate_limit_error", message, headers={"retry-after": retry_after} if retry_after else None
        )

    def add_server_error(self, message: str = "Internal server error", *, headers: dict | None = None):
        return self.add_error(500, "api_error", message, headers=headers)

    def add_invalid_request(self, message: str = "Invalid request") -> "FakeAnthropic":
        return self.add_error(400, "invalid_request_error", message)

    def add_disconnect(self) -> "FakeAnthropic":
        return self.add(Scripted(disconnect=True))

    def add_delay(self, seconds: float, then: Scripted | None = None) -> "FakeAnthropic":
        """Answer only after `seconds` (a client with a shorter timeout sees a timeout)."""
        scripted = then or Scripted(body=None)
        scripted.delay = seconds
        return self.add(scripted)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def bodies(self) -> list[dict]:
        return [r.body for r in self.requests]

    # -- serving ------------------------------------------------------------------------------

    def _answer(self, request: RecordedRequest) -> Scripted:
        if request.method != "POST" or request.path.split("?")[0].rstrip("/") != "/v1/messages":
            return Scripted(status=404, body=error_body("not_found_error", f"No route {request.method} {request.path}"))
        auth = request.headers.get("authorization", "")
        if not (auth.startswith("Bearer ") and len(auth) > 7) and not request.headers.get("x-api-key"):
            return Scripted(status=401, body=error_body("authentication_error", "invalid x-api-key"))
        if request.body is None:
            return Scripted(status=400, body=error_body("invalid_request_error", "Request body is not valid JSON."))
        if self.strict:
            problem = validate_request(request.body)
            if problem:
                return Scripted(status=400, body=error_body("invalid_request_error", problem))
        with self._lock:
            scripted = self._queue.popleft() if self._queue else None
        if scripted is None and self.responder is not None:
            scripted = self.responder(request.body)
        if scripted is None:
            return Scripted(
                status=400, body=error_body("fake_queue_empty", "fake_anthropic: no scripted response left")
            )
        if scripted.status == 200 and scripted.body is not None and scripted.body.get("model") is None:
            scripted.body["model"] = request.body.get("model")
        return scripted


class PlannedReplies:
    """A responder that answers like a model working a refund: the offline planner's next turn
    (it reads the transcript: order, payments, policy, then a draft), after `turn_seconds`; a
    request without tools (the reply's second check) gets NO after `check_seconds`.

    Usage reports prompt caching as Anthropic does: the prompt is tools, then system, then the
    messages; a prefix ending at a `cache_control` breakpoint is written to the cache
    (`cache_creation_input_tokens`) when it is at least `min_cacheable_tokens` long, and a later
    request that starts with a cached prefix (at any block boundary, as the API's look-back
    finds it) reads it (`cache_read_input_tokens`); the rest is `input_tokens`. Tokens are
    estimated at four characters each (the product's own estimate, agent.providers.caching).

    `rate_limited(body) -> bool` answers a request 429 with `retry-after: <retry_after>` instead
    (a rate-limit storm); `in_flight` and `in_flight_max` count the requests being answered."""

    def __init__(
        self,
        *,
        turn_seconds: float = 0.0,
        min_cacheable_tokens: int = 1024,
        rate_limited=None,
        retry_after: str = "1",
        check_seconds: float | None = None,
    ):
        self.turn_seconds = turn_seconds
        # The reply check answers one word where a turn writes a tool call: about a third.
        self.check_seconds = turn_seconds / 3 if check_seconds is None else check_seconds
        self.min_cacheable_tokens = min_cacheable_tokens
        self.rate_limited = rate_limited
        self.retry_after = retry_after
        self.cache: set[str] = set()
        self.lock = threading.Lock()
        self.in_flight = self.in_flight_max = 0
        self.answered = self.refused = 0
        self.usage_total = dict.fromkeys(DEFAULT_USAGE, 0)

    def __call__(self, body: dict) -> Scripted:
        if self.rate_limited is not None and self.rate_limited(body):
            with self.lock:
                self.refused += 1
            return Scripted(
                status=429,
                body=error_body("rate_limit_error", "Number of concurrent connections has exceeded your rate limit."),
                headers={"retry-after": self.retry_after, "x-should-retry": "true"},
            )
        with self.lock:
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
        try:
            working = bool(body.get("tools"))
            seconds = self.turn_seconds if working else self.check_seconds
            if seconds:
                time.sleep(seconds)
            turn = self._plan(body) if working else self._check_answer()
            usage = self._usage(body, output=turn.content)
            with self.lock:
                self.answered += 1
                for name, value in usage.items():
                    self.usage_total[name] += value
            return Scripted(
                body={
                    "id": f"msg_planned_{uuid.uuid4().hex[:12]}",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": turn.content,
                    "stop_reason": turn.stop_reason,
                    "stop_sequence": None,
                    "usage": usage,
                }
            )
        finally:
            with self.lock:
                self.in_flight -= 1

    @staticmethod
    def _check_answer():
        """A request without tools is the reply's second check (agent.reply_check): the planner's
        replies are honest, so the model answers NO."""
        from refundagent.agent.providers.base import ModelTurn

        return ModelTurn(content=[{"type": "text", "text": "NO"}], stop_reason="end_turn")

    @staticmethod
    def _plan(body: dict):
        from refundagent.agent.providers.base import ToolSpec
        from refundagent.agent.providers.offline import OfflineProvider
        from refundagent.agent.tools import TOOL_DEFS

        capability_of = {definition.name: capability for capability, definition in TOOL_DEFS.items()}
        tools = [
            ToolSpec(
                name=t["name"],
                capability=capability_of.get(t["name"], t["name"]),
                description=t.get("description", ""),
                input_schema=t.get("input_schema") or {},
            )
            for t in body.get("tools") or []
        ]
        system = (
            "".join(b.get("text", "") for b in body.get("system") or [])
            if isinstance(body.get("system"), list)
            else body.get("system") or ""
        )
        return OfflineProvider().complete(
            system=system, tools=tools, messages=body["messages"], max_tokens=body["max_tokens"]
        )

    def _usage(self, body: dict, *, output: list[dict]) -> dict:
        from refundagent.agent.providers.caching import tokens_estimate

        blocks: list[tuple[str, bool]] = []  # (canonical text, has a breakpoint)
        for tool in body.get("tools") or []:
            blocks.append(
                (
                    json.dumps({k: v for k, v in tool.items() if k != "cache_control"}, sort_keys=True),
                    bool(tool.get("cache_control")),
                )
            )
        system = body.get("system")
        for block in system if isinstance(system, list) else [{"type": "text", "text": system or ""}]:
            blocks.append((block.get("text", ""), bool(block.get("cache_control"))))
        for message in body.get("messages") or []:
            content = message.get("content")
            for block in content if isinstance(content, list) else [{"type": "text", "text": content or ""}]:
                plain = {k: v for k, v in block.items() if k != "cache_control"}
                blocks.append((message["role"] + json.dumps(plain, sort_keys=True), bool(block.get("cache_control"))))
        digest = hashlib.sha256()
        tokens = 0
        read = 0
        to_write: list[tuple[str, int]] = []
        with self.lock:
            for text, breakpoint in blocks:
                digest.update(text.encode())
                tokens += tokens_estimate(text)
                key = digest.hexdigest()
                if key in self.cache:
                    read = tokens
                if breakpoint and tokens >= self.min_cacheable_tokens:
                    to_write.append((key, tokens))
            written = max((t for key, t in to_write if key not in self.cache), default=0)
            self.cache.update(key for key, _ in to_write)
        creation = max(0, written - read)
        return {
            "input_tokens": tokens - read - creation,
            "output_tokens": max(1, tokens_estimate(json.dumps(output))),
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": read,
        }


def retryable(status: int) -> bool:
    """The statuses the SDK retries."""
    return status in (408, 409, 429) or status >= 500


def validate_request(body: dict) -> str | None:
    """The shape errors the real Messages API answers with 400 (a subset)."""
    if not body.get("model"):
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        return "max_tokens: must be an integer >= 1"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for tool in body.get("tools") or []:
        if not TOOL_NAME.match(str(tool.get("name", ""))):
            return f"tools.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$' (got {tool.get('name')!r})"
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{tool.get('name')}.input_schema: Field required"
    breakpoints = count_cache_breakpoints(body)
    if breakpoints > 4:
        return f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
    for i, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        wanted = {b.get("id") for b in content if isinstance(b, dict) and b.get("type") == "tool_use"}
        if not wanted:
            continue
        following = messages[i + 1].get("content") if i + 1 < len(messages) else None
        given = {
            b.get("tool_use_id") for b in following or [] if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        if i + 1 < len(messages) and not wanted <= given:
            return (
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(sorted(wanted - given))}"
            )
    return None


def count_cache_breakpoints(body: dict) -> int:
    blocks = list(body.get("tools") or [])
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            blocks += message["content"]
    return sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))


def _handler_for(fake: FakeAnthropic):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep test output quiet
            pass

        def do_GET(self):
            self._handle()

        def do_POST(self):
            self._handle()

        def _handle(self):
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            request = RecordedRequest(
                method=self.command, path=self.path, headers={k.lower(): v for k, v in self.headers.items()}, body=body
            )
            with fake._lock:
                fake.requests.append(request)
            scripted = fake._answer(request)
            if scripted.delay:
                time.sleep(scripted.delay)
            if scripted.disconnect:
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass
                return
            payload = json.dumps(scripted.body if scripted.body is not None else {}).encode()
            try:
                self.send_response(scripted.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("request-id", f"req_fake_{len(fake.requests)}")
                for name, value in scripted.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (timeout) before the answer
                self.close_connection = True

    return Handler


@pytest.fixture
def fake_anthropic():
    """A running FakeAnthropic; stopped after the test."""
    with FakeAnthropic() as fake:
        yield fake
