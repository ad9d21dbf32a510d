"""The agent loop driven by the real `anthropic` client against the local fake Messages API."""

from decimal import Decimal

import pytest

from approvals.models import ApprovalRequest
from ledger.models import RefundEntry
from refundagent.agent.loop import agent_run_ticket
from refundagent.models import AgentRun, RefundDraft, Ticket
from refundagent.services import ticket_create

ORDER = "ORD-5001"
USAGES = [
    {"input_tokens": 1500, "output_tokens": 40, "cache_creation_input_tokens": 1800, "cache_read_input_tokens": 0},
    {"input_tokens": 300, "output_tokens": 35, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1800},
    {"input_tokens": 250, "output_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2100},
    {"input_tokens": 400, "output_tokens": 220, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2400},
]
DRAFT = {
    "recommendation": "refund",
    "amount": "120.00",
    "policy_version": "refund-policy-v4",
    "rationale": "Delivered 12 days ago, inside the 30-day window of refund-policy-v4; nothing refunded yet.",
    "customer_reply": "Thanks for reaching out. We have reviewed your order and passed a refund request "
    "for the headphones to our finance team, who will confirm the next steps.",
}


@pytest.fixture
def ticket(user, django_capture_on_commit_callbacks):
    # Filing enqueues the run on commit, and tasks are eager in tests: keep that run from
    # consuming the fake's queue with the default provider; the test runs the loop itself.
    with django_capture_on_commit_callbacks(execute=False):
        return ticket_create(
            user=user("acme-support"),
            order=ORDER,
            customer="CUST-1001",
            message="My headphones stopped working, please refund me $200.",
            requested_amount="200.00",
        )


def script_investigation(fake, usages=USAGES):
    fake.add_tool_use("orders_lookup_order", {"order_id": ORDER}, usage=usages[0])
    fake.add_tool_use("payments_get_summary", {"order_id": ORDER}, usage=usages[1])
    fake.add_tool_use("refund_policy_retrieve", {}, usage=usages[2])
    fake.add_tool_use("refunds_create_draft", DRAFT, usage=usages[3])


def run(ticket, provider):
    agent_run_ticket(ticket_id=ticket.pk, provider=provider)
    ticket.refresh_from_db()
    return ticket.runs.get()


def test_tool_use_turns_over_http_reach_approval_required_with_the_fakes_token_counts(ticket, fake_anthropic, settings):
    # claude-fake is priced here at Sonnet's list prices (an unknown model would get the fallback).
    settings.ANTHROPIC_PRICE_INPUT_PER_MTOK = Decimal("3.00")
    settings.ANTHROPIC_PRICE_OUTPUT_PER_MTOK = Decimal("15.00")
    settings.ANTHROPIC_PRICE_CACHE_WRITE_PER_MTOK = Decimal("3.75")
    settings.ANTHROPIC_PRICE_CACHE_READ_PER_MTOK = Decimal("0.30")
    script_investigation(fake_anthropic)
    provider = fake_anthropic.provider()

    agent_run = run(ticket, provider)

    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    assert len(fake_anthropic.requests) == 4 and fake_anthropic.remaining == 0
    assert agent_run.status == AgentRun.Status.STOPPED
    assert agent_run.provider == "anthropic"
    assert agent_run.model == "claude-fake"
    assert agent_run.input_tokens == sum(u["input_tokens"] for u in USAGES)
    assert agent_run.output_tokens == sum(u["output_tokens"] for u in USAGES)
    assert agent_run.cache_creation_input_tokens == sum(u["cache_creation_input_tokens"] for u in USAGES)
    assert agent_run.cache_read_input_tokens == sum(u["cache_read_input_tokens"] for u in USAGES)
    # 2450*3 + 325*15 + 1800*3.75 + 6300*0.30 = 7350 + 4875 + 6750 + 1890 = 20865 per million
    assert agent_run.cost_usd == Decimal("0.020865")
    draft = RefundDraft.objects.get(ticket=ticket)
    assert (draft.recommendation, draft.amount, draft.policy_version) == (
        "refund",
        Decimal("120.00"),
        "refund-policy-v4",
    )
    approval = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert (approval.amount, approval.policy_version) == (Decimal("120.00"), "refund-policy-v4")
    assert not RefundEntry.objects.filter(order__external_id=ORDER).exists()
    model_events = ticket.trace_events.filter(span="model").order_by("seq")
    assert [(e.input_tokens, e.output_tokens, e.data["cache_read_input_tokens"]) for e in model_events] == [
        (u["input_tokens"], u["output_tokens"], u["cache_read_input_tokens"]) for u in USAGES
    ]


def test_every_request_carries_the_cached_system_prompt_the_offered_tools_and_the_growing_transcript(
    ticket, fake_anthropic
):
    script_investigation(fake_anthropic)

    run(ticket, fake_anthropic.provider())

    bodies = fake_anthropic.bodies
    for body in bodies:
        assert body["model"] == "claude-fake"
        assert 1 <= body["max_tokens"]
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        names = {t["name"] for t in body["tools"]}
        assert {
            "orders_lookup_order",
            "payments_get_summary",
            "refund_policy_retrieve",
            "refunds_create_draft",
        } <= names
        assert "refunds_issue_refund" not in names and "email_send_customer_message" not in names
    # Each turn sends the previous turn's tool_use back with its tool_result (the fake refuses otherwise).
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5, 7]
    assert bodies[0]["system"] == bodies[3]["system"] and bodies[0]["tools"] == bodies[3]["tools"]
    second = bodies[1]["messages"]
    assert second[1]["content"][-1]["name"] == "orders_lookup_order"
    assert second[2]["content"][0]["type"] == "tool_result"
    assert "ORD-5001" in str(second[2]["content"][0]["content"])
    # The customer's email never reaches the model.
    assert "jane.doe@example.com" not in str(bodies)


def test_a_400_from_the_api_stops_the_run_failed_with_the_reason(ticket, fake_anthropic):
    fake_anthropic.add_invalid_request("messages: prompt is too long")
    fake_anthropic.add_text("never reached")

    agent_run = run(ticket, fake_anthropic.provider())

    assert len(fake_anthropic.requests) == 1
    assert ticket.status == Ticket.Status.FAILED
    assert ticket.stop_reason == Ticket.StopReason.FAILED
    assert "400" in ticket.stop_detail and "prompt is too long" in ticket.stop_detail
    assert agent_run.stop_reason == Ticket.StopReason.FAILED
    [error] = ticket.trace_events.filter(span="model", status="error")
    assert (error.data["status_code"], error.data["transient"]) == (400, False)
    assert not RefundDraft.objects.filter(ticket=ticket).exists()
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()


def test_a_529_overload_then_success_completes_the_run(ticket, fake_anthropic):
    fake_anthropic.add_overloaded()
    script_investigation(fake_anthropic)

    agent_run = run(ticket, fake_anthropic.provider())

    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail
    assert len(fake_anthropic.requests) == 5 and fake_anthropic.remaining == 0
    assert fake_anthropic.bodies[0] == fake_anthropic.bodies[1]
    # The overloaded attempt used no tokens: only the four answers count.
    assert agent_run.input_tokens == sum(u["input_tokens"] for u in USAGES)


def test_overload_on_every_attempt_stops_the_run_failed(ticket, fake_anthropic, settings):
    # an outage is waited out up to AGENT_PROVIDER_OUTAGE_SECONDS: none here, so the SDK's own
    # attempts are all there is
    settings.AGENT_PROVIDER_OUTAGE_SECONDS = 0
    for _ in range(3):
        fake_anthropic.add_overloaded()

    agent_run = run(ticket, fake_anthropic.provider(max_retries=2))

    assert len(fake_anthropic.requests) == 3
    assert ticket.status == Ticket.Status.FAILED
    assert "529" in ticket.stop_detail or "overloaded" in ticket.stop_detail.lower()
    assert agent_run.stop_reason == Ticket.StopReason.FAILED
    [error] = ticket.trace_events.filter(span="model", status="error")
    assert (error.data["status_code"], error.data["transient"]) == (529, True)


def test_the_anthropic_provider_without_a_key_stops_the_run_failed_with_a_readable_reason(ticket, settings):
    settings.ANTHROPIC_API_KEY = ""
    settings.AGENT_PROVIDER = "anthropic"

    agent_run_ticket(ticket_id=ticket.pk)

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.FAILED
    assert "ANTHROPIC_API_KEY is not set" in ticket.stop_detail
    assert ticket.runs.get().provider == "anthropic"
