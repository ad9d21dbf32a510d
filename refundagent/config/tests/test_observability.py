"""OpenTelemetry spans, the log context and the redaction of what is exported."""

import json
import re

import pytest
from opentelemetry.trace import format_trace_id

from approvals.models import ApprovalRequest
from refundagent.config.observability import sentry_scrub

# The demo customer of ORD-5001 (refundagent/demo.py) and everything that identifies them.
CUSTOMER_DATA = ["jane.doe@example.com", "Jane", "Doe", "pi_3PqORD5001A1b2C3d4", "4242", "card_4242"]


def _attribute_text(span) -> str:
    return json.dumps({k: v if isinstance(v, (str, int, float, bool)) else list(v) for k, v in span.attributes.items()})


def _one(found, name_start):
    matching = [s for s in found if s.name.startswith(name_start)]
    assert matching, f"no span {name_start!r} among {[s.name for s in found]}"
    return matching


@pytest.mark.django_db(transaction=True)
def test_one_ticket_is_one_trace_from_the_request_to_the_tool_calls(demo, spans, file_ticket):
    # given tracing on (in memory) and eager tasks
    # when support files a ticket and the agent investigates it
    ticket = file_ticket()

    # then the spans form the tree request -> task -> agent run -> step -> model call / tool call
    found = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in found}

    def parent(span):
        return by_id[span.parent.span_id] if span.parent is not None else None

    [request] = [s for s in found if s.name == "POST api/tickets"]
    [task] = _one(found, "run/refundagent.tasks.agent_run_ticket_task")
    [run] = _one(found, "invoke_agent")
    steps = _one(found, "refund.agent.step")
    chats = _one(found, "chat ")
    tools = _one(found, "execute_tool ")
    assert parent(task) is request
    assert parent(run) is task
    assert all(parent(step) is run for step in steps)
    assert all(parent(chat) in steps for chat in chats)
    assert all(parent(tool) in steps for tool in tools)
    assert {s.context.trace_id for s in found} == {request.context.trace_id}
    # and the ticket's trace id is the OpenTelemetry trace id, also as an attribute of its spans
    ticket.refresh_from_db()
    assert ticket.trace_id.hex == format_trace_id(request.context.trace_id)
    assert all(s.attributes["refund.ticket.trace_id"] == ticket.trace_id.hex for s in [run, *steps, *chats])
    # and the model calls carry the GenAI attributes, the tool calls their tool name
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"]
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert list(chat.attributes["gen_ai.response.finish_reasons"]) == ["tool_use"]
    assert {t.attributes["gen_ai.tool.name"] for t in tools} >= {"orders_lookup_order", "refunds_create_draft"}
    # and the gate's verdict is a span of the draft's tool call
    [gate] = _one(found, "refund.gate.verdict")
    assert parent(gate) in tools and gate.attributes["refund.gate.outcome"] == "approval_required"
    # and no attribute, event or name holds the customer's email, name, payment reference or last4
    exported = " ".join(_attribute_text(s) + s.name + json.dumps([dict(e.attributes) for e in s.events]) for s in found)
    for value in CUSTOMER_DATA:
        # as a value of its own: a random trace or span id may hold "4242" among its hex digits
        assert not re.search(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])", exported), value
    # and without the opt-in no content is exported
    assert "gen_ai.input.messages" not in exported and "gen_ai.tool.call.result" not in exported


@pytest.mark.django_db(transaction=True)
def test_content_export_sends_only_redacted_content(demo, spans, content_export, file_ticket):
    # given the opt-in to export prompts and tool results
    # when a ticket whose message names the customer's email and name is investigated
    file_ticket("I am jane.doe@example.com (Jane Doe): refund ORD-5001 please.")

    # then the content is on the spans
    found = spans.get_finished_spans()
    chats, tools = _one(found, "chat "), _one(found, "execute_tool ")
    first_prompt = chats[0].attributes["gen_ai.input.messages"]
    assert "I am [redacted] ([redacted]): refund ORD-5001" in first_prompt
    assert all("gen_ai.output.messages" in c.attributes for c in chats)
    reads = [t for t in tools if t.attributes["gen_ai.tool.name"] != "refunds_create_draft"]  # the draft stops the run
    assert reads and all("gen_ai.tool.call.result" in t.attributes for t in reads)
    assert all("gen_ai.tool.call.arguments" in t.attributes for t in tools)
    # and it is redacted: nothing that identifies the customer or the payment leaves
    exported = " ".join(_attribute_text(s) for s in found)
    for value in CUSTOMER_DATA:
        # as a value of its own: a random trace or span id may hold "4242" among its hex digits
        assert not re.search(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])", exported), value


@pytest.mark.django_db(transaction=True)
def test_the_json_log_line_of_an_approval_carries_request_tenant_ticket_and_trace(
    demo, spans, json_log, file_ticket, api_client
):
    # given a ticket whose refund waits for finance
    ticket = file_ticket()
    approval = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    # when finance approves it, with a request id from the proxy
    response = api_client("acme-finance").post(
        f"/api/approvals/{approval.pk}/decision",
        {"decision": "approve", "args_hash": approval.args_hash},
        content_type="application/json",
        HTTP_X_REQUEST_ID="req-approve-1",
    )
    assert response.status_code == 200, response.content
    assert response.headers["X-Request-ID"] == "req-approve-1"

    # then one JSON line says so, with the request id, tenant, ticket and trace ids
    [line] = [entry for entry in json_log() if entry.get("event") == "approval.decided"]
    assert line["logger"] == "money"
    assert (line["level"], line["decision"]) == ("INFO", "approve")
    assert line["request_id"] == "req-approve-1"
    assert line["tenant"] == ticket.tenant_id
    assert line["ticket"] == ticket.pk
    assert line["ticket_trace_id"] == ticket.trace_id.hex
    [decide] = _one(spans.get_finished_spans(), "refund.approval.decide")
    assert line["trace_id"] == format_trace_id(decide.context.trace_id)
    assert decide.attributes["refund.ticket.trace_id"] == ticket.trace_id.hex
    # and the execution logs its line too (eager: in the same request); the verification waits for
    # finance to record the payout made by hand (the manual gateway)
    events = [entry["event"] for entry in json_log() if "event" in entry]
    assert events == ["approval.decided", "refund.executed"]
    # and the ledger write is a span of its own, in the ticket's trace: one trace from the filing
    # request to the ledger write, linked to finance's decision request
    found = spans.get_finished_spans()
    [write] = _one(found, "refund.ledger.refund_issue")
    assert write.attributes["refund.ledger.amount"] == "120.00"
    assert format_trace_id(write.context.trace_id) == ticket.trace_id.hex
    [execution] = _one(found, "refund.approval.execution")
    assert format_trace_id(execution.context.trace_id) == ticket.trace_id.hex
    assert [link.context.trace_id for link in execution.links] == [decide.context.trace_id]


def test_sentry_events_are_scrubbed_with_the_traces_redaction():
    # given an error event whose message and extra data hold an email and a payment reference
    event = {
        "message": "refund for jane.doe@example.com failed",
        "extra": {"ref": "pi_3PqORD5001A1b2C3d4"},
        "exception": {"values": [{"value": "card 4242 4242 4242 4242 declined"}]},
    }
    # when it is scrubbed before sending
    scrubbed = json.dumps(sentry_scrub(event))
    # then none of it remains
    for value in ("jane.doe@example.com", "pi_3PqORD5001A1b2C3d4", "4242 4242 4242 4242"):
        assert value not in scrubbed
