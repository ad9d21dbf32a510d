"""The observability switches as an operator sets them: OpenTelemetry by the standard
variables and off without them, JSON logs by default in production, Sentry by SENTRY_DSN with
the Django and Celery integrations and customer data scrubbed. Each process is a real one
(a subprocess with its own environment): the setup is once per process and global."""

import gzip
import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from refundagent.config.observability import otel_enabled

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("env", "enabled"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
        ({"OTEL_SERVICE_NAME": "refundagent"}, False),  # a name alone exports nothing
    ],
)
def test_tracing_is_on_only_when_a_standard_variable_asks_for_an_exporter(monkeypatch, env, enabled):
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert otel_enabled() is enabled


def _run(code: str, **env) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Django process in production mode (DJANGO_DEBUG=0), with `env`."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SENTRY_", "LOG_"))}
    base.update(
        DJANGO_SETTINGS_MODULE="refundagent.config.settings",
        DJANGO_DEBUG="0",
        DJANGO_SECRET_KEY="test-" + "x" * 60,
        DJANGO_ALLOWED_HOSTS="localhost",
        # production names its database; these processes never connect to it
        DATABASE_URL="postgres://refundagent@db.example.com:5432/refundagent",
        **env,
    )
    script = "import django\ndjango.setup()\n" + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result


def test_production_logs_one_json_object_per_line_with_the_context():
    # given a production process with no LOG_FORMAT set
    # when a money line is logged with a ticket bound
    result = _run(
        """
        import logging
        from ledger import telemetry
        with telemetry.bind(request_id="req-1", tenant=3, ticket=41):
            logging.getLogger("money").info("refund #7 ...", extra={"event": "payout.result", "status": "failed"})
        """
    )
    # then stderr holds that line as JSON, with the context fields
    [line] = [json.loads(text) for text in result.stderr.splitlines() if text.startswith("{")]
    assert (line["logger"], line["level"], line["event"], line["status"]) == (
        "money",
        "INFO",
        "payout.result",
        "failed",
    )
    assert (line["request_id"], line["tenant"], line["ticket"]) == ("req-1", 3, 41)
    assert {"time", "message", "task_id", "trace_id", "ticket_trace_id"} <= set(line)


class _SentryServer(BaseHTTPRequestHandler):
    """The smallest Sentry ingest endpoint: keeps every envelope item it is sent."""

    items: list = []

    def do_POST(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        lines = body.decode().splitlines()
        # An envelope: its header, then (item header, item payload) pairs.
        for header, payload in zip(lines[1::2], lines[2::2], strict=False):
            self.items.append((json.loads(header), json.loads(payload)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def sentry_server():
    _SentryServer.items = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SentryServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, _SentryServer.items
    server.shutdown()
    server.server_close()


def test_sentry_dsn_reports_errors_with_django_and_celery_and_no_customer_data(sentry_server):
    server, items = sentry_server
    # given a process with SENTRY_DSN pointing at a local ingest endpoint
    dsn = f"http://publickey@127.0.0.1:{server.server_port}/1"
    # when it sets observability up (as wsgi.py and the worker do) and an error names a customer
    _run(
        """
        import sentry_sdk
        from refundagent.config.observability import observability_setup
        observability_setup()
        try:
            raise RuntimeError("refund for jane.doe@example.com on pi_3PqORD5001A1b2C3d4 failed")
        except RuntimeError:
            sentry_sdk.capture_exception()
        sentry_sdk.flush(10)
        """,
        SENTRY_DSN=dsn,
    )
    # then Sentry got the error, from an SDK with the Django and Celery integrations
    [event] = [payload for header, payload in items if header.get("type") == "event"]
    assert event["exception"]["values"][0]["type"] == "RuntimeError"
    assert {"django", "celery"} <= set(event["sdk"]["integrations"])
    # and without the customer's email or payment reference, and no personal data (no user, no IP)
    sent = json.dumps(event)
    assert "jane.doe@example.com" not in sent and "pi_3PqORD5001A1b2C3d4" not in sent
    assert event["exception"]["values"][0]["value"] == "refund for [email] on [payment_ref] failed"
    assert "user" not in event or "ip_address" not in event["user"]
