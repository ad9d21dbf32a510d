"""`@traced` makes a span when spans are recorded, and none when every span would be a no-op."""

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from ledger import telemetry


@telemetry.traced("test.double", result=lambda returned: {"test.value": returned[0]})
def double(value, *, fail=False):
    if fail:
        raise ValueError("no")
    return 2 * value, trace.get_current_span()


@pytest.fixture
def recorded(monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "_tracer", provider.get_tracer(telemetry.TRACER_NAME))
    yield exporter
    provider.shutdown()


@pytest.mark.skipif(not telemetry.spans_off(), reason="an SDK tracer provider is set for this process")
def test_without_an_sdk_no_span_is_made_and_the_callers_span_stays_current():
    caller = trace.NonRecordingSpan(
        trace.SpanContext(trace_id=0x1234, span_id=0x99, is_remote=True, trace_flags=trace.TraceFlags(1))
    )
    with trace.use_span(caller):
        value, current = double(21)

    assert value == 42
    assert current is caller  # a no-op span would only have carried the caller's context
    with pytest.raises(ValueError):
        double(1, fail=True)


def test_with_a_tracer_the_span_is_recorded_with_its_result_and_errors(recorded):
    assert not telemetry.spans_off()

    value, current = double(21)
    with pytest.raises(ValueError):
        double(1, fail=True)

    ok, failed = recorded.get_finished_spans()
    assert value == 42 and current.get_span_context() == ok.get_span_context()
    assert (ok.name, dict(ok.attributes), ok.status.status_code) == (
        "test.double",
        {"test.value": 42},
        StatusCode.UNSET,
    )
    assert (failed.status.status_code, failed.attributes["error.type"]) == (StatusCode.ERROR, "ValueError")
