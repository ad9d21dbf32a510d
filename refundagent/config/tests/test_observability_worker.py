"""A real worker exports its spans over OTLP, in the trace of the request that enqueued the task."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import format_trace_id

from refundagent.models import Ticket


class _Collector(BaseHTTPRequestHandler):
    """The smallest OTLP/HTTP collector: keeps every span it is sent."""

    received: list = []

    def do_POST(self):  # noqa: N802 - the http.server API
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                self.received.extend(scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def collector():
    _Collector.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, _Collector.received
    server.shutdown()
    server.server_close()


@pytest.mark.worker
def test_the_worker_continues_the_requests_trace(celery_worker_process, spans, collector, file_ticket):
    # given a worker that exports to a collector, and tracing on in this (the web) process
    server, received = collector
    celery_worker_process.start(
        extra_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "INFO",
        }
    )
    # when support files a ticket over HTTP and the worker investigates it
    ticket = file_ticket()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ticket.refresh_from_db()
        names = {s.name for s in received}
        if (
            ticket.status != Ticket.Status.QUEUED
            and ticket.status != Ticket.Status.RUNNING
            and ("invoke_agent refundagent" in names)
        ):
            break
        time.sleep(0.2)
    # then the worker's spans are in the request's trace, the task under the publish
    [request] = [s for s in spans.get_finished_spans() if s.name == "POST api/tickets"]
    [publish] = [s for s in spans.get_finished_spans() if s.name.startswith("apply_async/")]
    [task] = [s for s in received if s.name.startswith("run/refundagent.tasks.agent_run_ticket_task")]
    [run] = [s for s in received if s.name == "invoke_agent refundagent"]
    trace_hex = format_trace_id(request.context.trace_id)
    assert ticket.trace_id.hex == trace_hex
    assert task.trace_id.hex() == trace_hex and run.trace_id.hex() == trace_hex
    assert int.from_bytes(task.parent_span_id, "big") == publish.context.span_id
    assert int.from_bytes(run.parent_span_id, "big") == int.from_bytes(task.span_id, "big")
    assert any(s.name.startswith("chat ") for s in received)
    # and the worker logs JSON lines with the context fields (Celery did not take the root logger over)
    log = Path(f"/tmp/celery-worker-{os.getpid()}-{celery_worker_process.n}.log").read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert lines and all({"request_id", "task_id", "tenant", "ticket", "trace_id"} <= set(line) for line in lines)
