"""What every provider fake shares: its own HTTP server on a free local port, served from a
thread, a handler that logs nothing, and one that answers JSON (FakeStripe, FakeShopify,
refundagent's FakeZendesk).

Each fake keeps its own faults: which calls take one, and what each does, is the provider's
(Stripe's 402 card_declined on a refund, Zendesk's 429 with Retry-After on any call, Shopify's
throttled or slow GraphQL).
"""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


class JSONHandler(QuietHandler):
    """Answers a JSON body, with the provider's Content-Type and any headers it adds."""

    content_type = "application/json"

    def _send(self, status: int, body: dict, headers: dict | None = None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class FakeServer:
    """A subclass builds its handler class in `_handler()`; `start()` serves it, `stop()` ends it."""

    def __init__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
