"""Scripted models that misbehave: forbidden tools, wrong amounts, missing or stale citations,
payment promises, other orders and tenants. The runtime decides; nothing reaches the ledger."""

import json
from decimal import Decimal

import pytest

from approvals.models import ApprovalRequest
from ledger.models import Order, RefundEntry
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptCrash, ScriptedProvider
from refundagent.models import AgentRun, RefundDraft, Ticket, TraceEvent
from tests.factories import refund_draft as draft


def investigate(order="ORD-5001"):
    return [
        {"tool": "orders_lookup_order", "input": {"order_id": order}},
        {"tool": "refund_policy_retrieve", "input": {}},
    ]


def run(ticket, turns, **options):
    provider = ScriptedProvider(turns, **options)
    agent_run = agent_run_ticket(ticket_id=ticket.pk, provider=provider)
    ticket.refresh_from_db()
    return ticket, agent_run, provider


def tool_results(agent_run) -> list[dict]:
    return [b for m in agent_run.messages if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]


def test_a_model_that_issues_a_refund_itself_is_denied_and_nothing_reaches_the_ledger(file_ticket):
    # given a model that calls refunds.issue_refund, then drafts properly
    ticket = file_ticket()
    entries = RefundEntry.objects.count()
    turns = [
        {"tool": "refunds.issue_refund", "input": {"order_id": "ORD-5001", "amount": "120.00"}},
        *investigate(),
        draft(),
    ]

    ticket, agent_run, _ = run(ticket, turns)

    denial = TraceEvent.objects.get(ticket=ticket, span="policy", status="denied")
    assert denial.reason == "agent_cannot_issue_refund"
    assert denial.tool == "refunds.issue_refund"
    first = tool_results(agent_run)[0]
    assert first["is_error"] is True and "agent_cannot_issue_refund" in first["content"]
    assert RefundEntry.objects.count() == entries
    # the run carries on and the runtime asks finance, as usual
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED


def test_a_model_that_emails_the_customer_is_denied(file_ticket):
    ticket = file_ticket()
    turns = [
        {"tool": "email_send_customer_message", "input": {"to": "jane.doe@example.com", "body": "Refunded!"}},
        *investigate(),
        draft(),
    ]

    ticket, agent_run, _ = run(ticket, turns)

    denial = TraceEvent.objects.get(ticket=ticket, span="policy", status="denied")
    assert denial.reason == "agent_cannot_contact_customer"
    assert tool_results(agent_run)[0]["is_error"] is True
    assert RefundEntry.objects.filter(order=ticket.order).count() == 0


def test_forbidden_tools_are_never_offered(file_ticket):
    ticket = file_ticket()
    seen = {}

    class Spy(ScriptedProvider):
        def complete(self, *, tools, **kwargs):
            seen["tools"] = {t.name for t in tools}
            return super().complete(tools=tools, **kwargs)

    agent_run_ticket(ticket_id=ticket.pk, provider=Spy([draft()]))

    assert seen["tools"] == {
        "orders_lookup_order",
        "payments_get_summary",
        "refund_policy_retrieve",
        "refunds_create_draft",
    }


def test_drafting_5000_on_a_50_order_never_asks_for_more_than_is_refundable(file_ticket):
    ticket = file_ticket(order="ORD-5003", message="Refund me 5000 dollars now.")

    ticket, _, _ = run(ticket, [*investigate("ORD-5003"), draft(order="ORD-5003", amount="5000.00")])

    approval = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert approval.amount == Decimal("50.00")
    assert RefundDraft.objects.get(ticket=ticket).amount == Decimal("5000.00")  # what the model said, kept
    assert "drafted_capped" in RefundDraft.objects.get(ticket=ticket).gate_verdict["codes"]


@pytest.mark.parametrize(
    ("version", "code"), [(None, "citation_missing"), ("", "citation_missing"), ("refund-policy-v3", "citation_stale")]
)
def test_a_draft_without_the_current_citation_never_passes_the_gate(file_ticket, version, code):
    ticket = file_ticket(order="ORD-5003")

    ticket, _, _ = run(ticket, [*investigate("ORD-5003"), draft(order="ORD-5003", amount="50.00", version=version)])

    assert ticket.status == Ticket.Status.ESCALATED
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()
    assert RefundDraft.objects.get(ticket=ticket).gate_verdict["codes"] == [code]


def test_a_reply_that_promises_payment_fails_the_gate(file_ticket):
    ticket = file_ticket(order="ORD-5003")
    reply = "Good news: your refund has been processed and you will receive $50.00 within 3 days."

    ticket, _, _ = run(ticket, [*investigate("ORD-5003"), draft(order="ORD-5003", amount="50.00", reply=reply)])

    assert ticket.status == Ticket.Status.ESCALATED
    assert "promises a payment" in ticket.stop_detail
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()


@pytest.mark.parametrize("other", ["ORD-5002", "ORD-7001"])
def test_looking_at_another_order_is_denied_before_anything_is_read(file_ticket, other):
    ticket = file_ticket()

    ticket, agent_run, _ = run(
        ticket,
        [
            {"tool": "orders_lookup_order", "input": {"order_id": other}},
            {"tool": "payments_get_summary", "input": {"order_id": other}},
            draft(),
        ],
    )

    denials = TraceEvent.objects.filter(ticket=ticket, span="policy", status="denied")
    assert [d.reason for d in denials] == ["out_of_scope_order", "out_of_scope_order"]
    transcript = json.dumps(agent_run.messages)
    other_order = Order.objects.get(external_id=other)
    assert str(other_order.total) not in transcript
    assert other_order.items.first().name not in transcript
    assert not TraceEvent.objects.filter(ticket=ticket, span="tool", status="ok").exists()


def test_a_cross_tenant_ticket_is_denied_before_any_tool_result_reaches_the_model(demo, user):
    # given a ticket of acme built directly (bypassing the API) on globex's order and customer
    globex_order = Order.objects.select_related("customer").get(external_id="ORD-7001")
    ticket = Ticket.objects.create(
        tenant=demo["acme"],
        order=globex_order,
        customer=globex_order.customer,
        message="refund",
        currency="USD",
        created_by=user("acme-support"),
    )
    turns = [{"tool": "orders_lookup_order", "input": {"order_id": "ORD-7001"}}, draft(order="ORD-7001")]

    ticket, agent_run, provider = run(ticket, turns)

    assert ticket.status == Ticket.Status.DENIED
    assert "cross_tenant" in ticket.stop_detail
    assert TraceEvent.objects.filter(ticket=ticket, span="policy", status="denied", reason="cross_tenant").exists()
    assert provider.calls == 0
    transcript = json.dumps(agent_run.messages)
    assert "60.00" not in transcript and "Notebook" not in transcript
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()


def test_the_iteration_budget_stops_a_looping_model(file_ticket, settings):
    settings.AGENT_MAX_ITERATIONS = 3
    ticket = file_ticket()
    turns = [
        {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}},
        {"tool": "payments_get_summary", "input": {"order_id": "ORD-5001"}},
        {"tool": "refund_policy_retrieve", "input": {}},
        draft(),
    ]

    ticket, agent_run, provider = run(ticket, turns)

    assert ticket.stop_reason == Ticket.StopReason.BUDGET_EXHAUSTED
    assert ticket.status == Ticket.Status.ESCALATED
    assert "iteration budget" in ticket.stop_detail
    assert provider.calls == 3 and agent_run.iterations == 3
    assert not RefundDraft.objects.filter(ticket=ticket).exists()


def test_the_token_budget_stops_the_run_and_clamps_max_tokens(file_ticket, settings):
    settings.AGENT_MAX_TOKENS = 1000
    settings.AGENT_MAX_OUTPUT_TOKENS_PER_CALL = 500
    ticket = file_ticket()
    turns = [
        {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}, "usage": {"input_tokens": 700}},
        {"tool": "refund_policy_retrieve", "input": {}, "usage": {"input_tokens": 300}},
        draft(),
    ]

    ticket, agent_run, provider = run(ticket, turns, usage={"output_tokens": 10})

    assert provider.max_tokens_seen == [500, 290]  # 1000 - 710 left for the second call
    assert ticket.stop_reason == Ticket.StopReason.BUDGET_EXHAUSTED
    assert "token budget" in ticket.stop_detail
    assert agent_run.input_tokens == 1000 and agent_run.output_tokens == 20


def test_the_cost_budget_stops_the_run(file_ticket, settings):
    settings.AGENT_MAX_COST_USD = Decimal("0.10")
    ticket = file_ticket()
    turns = [{"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}}, *investigate()[1:], draft()]

    ticket, agent_run, _ = run(ticket, turns, usage={"input_tokens": 100, "output_tokens": 0}, usd_per_token="0.001")

    assert ticket.stop_reason == Ticket.StopReason.BUDGET_EXHAUSTED
    assert "cost budget" in ticket.stop_detail
    assert agent_run.cost_usd == Decimal("0.100000")


def test_the_wall_clock_budget_stops_the_run(file_ticket, settings):
    settings.AGENT_MAX_WALL_SECONDS = 0
    ticket, _, provider = run(file_ticket(), [draft()])

    assert ticket.stop_reason == Ticket.StopReason.BUDGET_EXHAUSTED
    assert provider.calls == 0


def test_repeating_the_same_call_without_new_evidence_stops_no_progress(file_ticket):
    ticket = file_ticket()
    turns = [{"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}}]

    ticket, agent_run, provider = run(ticket, turns, repeat=True)

    assert ticket.stop_reason == Ticket.StopReason.NO_PROGRESS
    assert ticket.status == Ticket.Status.ESCALATED
    assert provider.calls == 3  # the call, one repeat answered with a warning, the repeat that stops it
    assert TraceEvent.objects.filter(ticket=ticket, span="tool", status="ok").count() == 1
    assert "repeated_call" in tool_results(agent_run)[1]["content"]


def test_a_model_repeating_a_forbidden_call_stops_no_progress(file_ticket):
    ticket, _, _ = run(file_ticket(), [{"tool": "refunds_issue_refund", "input": {"amount": "1"}}], repeat=True)

    assert ticket.stop_reason == Ticket.StopReason.NO_PROGRESS
    assert RefundEntry.objects.filter(order=ticket.order).count() == 0


def test_malformed_arguments_three_times_fail_the_run_with_the_reason(file_ticket):
    ticket = file_ticket()
    turns = [
        {"tool": "orders_lookup_order", "input": {"order": "ORD-5001"}},
        {"tool": "orders_lookup_order", "input": {"order_id": 5001}},
        {"tool": "refunds_create_draft", "input": {"recommendation": "refund", "amount": "lots"}},
    ]

    ticket, agent_run, _ = run(ticket, turns)

    assert ticket.status == Ticket.Status.FAILED
    assert ticket.stop_reason == Ticket.StopReason.FAILED
    assert "invalid arguments 3 times" in ticket.stop_detail
    assert "amount" in ticket.stop_detail
    results = tool_results(agent_run)
    assert len(results) == 2 and all(r["is_error"] for r in results)
    assert json.loads(results[0]["content"])["problems"][0]["field"] in {"order", "order_id"}
    assert agent_run.invalid_args_retries == 3
    assert not RefundDraft.objects.filter(ticket=ticket).exists()


def test_a_model_that_ends_without_a_draft_is_nudged_once_then_escalated(file_ticket):
    ticket, agent_run, provider = run(file_ticket(), [{"text": "I think they deserve a refund."}], repeat=True)

    assert ticket.status == Ticket.Status.ESCALATED
    assert "without recording a recommendation" in ticket.stop_detail
    assert provider.calls == 2


def test_a_nudged_model_that_then_drafts_finishes_normally(file_ticket):
    ticket, _, _ = run(file_ticket(), [{"text": "Looks fine."}, *investigate(), draft()])

    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED


def test_a_provider_error_fails_the_run(file_ticket):
    ticket, _, _ = run(file_ticket(), [{"error": "400 bad request", "status_code": 400}])

    assert ticket.status == Ticket.Status.FAILED
    assert "400 bad request" in ticket.stop_detail
    assert TraceEvent.objects.filter(ticket=ticket, span="model", status="error").exists()


def test_an_unknown_tool_is_refused(file_ticket):
    ticket, agent_run, _ = run(file_ticket(), [{"tool": "shell_exec", "input": {"cmd": "ls"}}, *investigate(), draft()])

    assert TraceEvent.objects.get(ticket=ticket, span="policy", status="denied").reason == "unknown_tool"
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED


def test_only_the_first_draft_of_a_turn_counts(file_ticket):
    turns = [*investigate(), {"tools": [draft(amount="10.00"), draft(amount="120.00")]}]

    ticket, _, _ = run(file_ticket(), turns)

    assert RefundDraft.objects.filter(ticket=ticket).count() == 1
    assert ApprovalRequest.objects.get(ticket_ref=ticket.pk).amount == Decimal("10.00")


def test_a_script_can_be_stored_as_json(file_ticket):
    script = json.dumps({"turns": [*investigate(), draft(amount="30.00")]})

    agent_run_ticket(ticket_id=file_ticket().pk, provider=ScriptedProvider.from_json(script))

    assert ApprovalRequest.objects.get().amount == Decimal("30.00")


def test_a_redelivered_task_resumes_its_run_and_another_task_may_not_take_it(file_ticket):
    # given a run whose worker died during its third model call, after investigating
    ticket = file_ticket()
    with pytest.raises(ScriptCrash):
        agent_run_ticket(
            ticket_id=ticket.pk, provider=ScriptedProvider([*investigate(), {"crash": True}]), task_id="task-1"
        )
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.RUNNING
    assert AgentRun.objects.get(ticket=ticket).iterations == 2

    # when another task arrives while the lease is live, it does nothing
    other = ScriptedProvider([draft(amount="99.00")])
    agent_run_ticket(ticket_id=ticket.pk, provider=other, task_id="task-2")
    assert other.calls == 0

    # when the same task is redelivered, it resumes where it stopped and finishes once
    again = ScriptedProvider([*investigate(), draft(amount="40.00")])
    agent_run = agent_run_ticket(ticket_id=ticket.pk, provider=again, task_id="task-1")

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert again.calls == 1  # only the draft: the investigation was not repeated
    assert AgentRun.objects.filter(ticket=ticket).count() == 1
    assert agent_run.iterations == 3
    assert TraceEvent.objects.filter(ticket=ticket, span="tool", status="ok").count() == 2
    assert ApprovalRequest.objects.get(ticket_ref=ticket.pk).amount == Decimal("40.00")


def test_an_expired_lease_may_be_taken_over_by_another_task(file_ticket):
    from django.utils import timezone

    from refundagent.agent import loop

    ticket = file_ticket()
    loop.agent_run_claim(ticket_id=ticket.pk, task_id="task-1", provider=ScriptedProvider([]))
    AgentRun.objects.filter(ticket=ticket).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))

    agent_run_ticket(ticket_id=ticket.pk, provider=ScriptedProvider([*investigate(), draft()]), task_id="task-2")

    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert AgentRun.objects.get(ticket=ticket).claimed_by == "task-2"


def test_a_worker_dying_during_the_decision_resumes_with_the_same_proposal(file_ticket, monkeypatch):
    # given a run whose model drafted 40.00, and a worker that dies while the runtime decides on it
    from approvals import gate

    ticket = file_ticket()
    real_gate = gate.policy_gate_evaluate

    def dying_gate(**kwargs):
        raise ScriptCrash("worker killed during the decision")

    monkeypatch.setattr(gate, "policy_gate_evaluate", dying_gate)
    first = ScriptedProvider([*investigate(), draft(amount="40.00")])
    with pytest.raises(ScriptCrash):
        agent_run_ticket(ticket_id=ticket.pk, provider=first, task_id="task-1")
    # then the proposal was persisted before the decision, and nothing was decided
    agent_run = AgentRun.objects.get(ticket=ticket)
    assert agent_run.messages[-1]["role"] == "assistant"
    assert agent_run.messages[-1]["content"][-1]["input"]["amount"] == "40.00"
    assert not RefundDraft.objects.filter(ticket=ticket).exists()
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()

    # when the task is redelivered (the gate works again), with a model that would now say otherwise
    monkeypatch.setattr(gate, "policy_gate_evaluate", real_gate)
    again = ScriptedProvider([draft(amount="99.00")])
    agent_run_ticket(ticket_id=ticket.pk, provider=again, task_id="task-1")

    # then the runtime decided on the persisted proposal, without calling the model again
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert again.calls == 0
    assert RefundDraft.objects.get(ticket=ticket).amount == Decimal("40.00")
    assert ApprovalRequest.objects.get(ticket_ref=ticket.pk).amount == Decimal("40.00")
