"""The log context and formats (settings.LOGGING names these; no model import: logging is
configured before the apps load).

Every record gets the request id, the task id, the tenant, the ticket and the trace id from the
context bound by RequestContextMiddleware, the Celery task signals and the services
(ledger.telemetry.bind). JSON in production, a readable line in development.
"""

import json
import logging
import time
import uuid

from opentelemetry import trace

from ledger import telemetry


class ContextFilter(logging.Filter):
    """Adds the bound context and the current trace id to every record (for both formats)."""

    def filter(self, record: logging.LogRecord) -> bool:
        bound = telemetry.context()
        for name in ("request_id", "task_id", "tenant", "ticket"):
            if not getattr(record, name, None):
                setattr(record, name, bound.get(name, ""))
        if not getattr(record, "trace_id", None):
            record.trace_id = telemetry.current_trace_hex() or bound.get("ticket_trace_id", "")
        if not getattr(record, "ticket_trace_id", None):
            record.ticket_trace_id = bound.get("ticket_trace_id", "")
        return True


_RECORD_ATTRIBUTES = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
CONTEXT_KEYS = ("request_id", "task_id", "tenant", "ticket", "trace_id", "ticket_trace_id")
ID_KEYS = ("tenant", "ticket")  # database ids: numbers in JSON, whether bound or passed


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the context, and any `extra`."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            line[key] = getattr(record, key, "") or None
        for key in ID_KEYS:
            # The bound context holds strings; a line's own `extra` often the int: one type to query.
            if isinstance(line[key], str) and line[key].isdigit():
                line[key] = int(line[key])
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class ConsoleFormatter(logging.Formatter):
    """Development: the plain line, then the known context as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_KEYS[:-1] if getattr(record, k, ""))
        return f"{text} [{context}]" if context else text


class RequestContextMiddleware:
    """Binds a request id (X-Request-ID if the proxy sent one) for the logs and spans of the
    request, and returns it as X-Request-ID."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request_id = (request.headers.get("X-Request-ID") or "").strip()[:64] or uuid.uuid4().hex
        request.request_id = request_id
        with telemetry.bind(request_id=request_id):
            trace.get_current_span().set_attribute("refund.request.id", request_id)
            response = self.get_response(request)
        response.headers["X-Request-ID"] = request_id
        return response
