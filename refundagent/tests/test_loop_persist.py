"""The loop's persist: a step and its trace events are one transaction, a lost claim writes
neither, the capabilities are read once per run and again at the decision, and a run's query
count is bounded."""

import pytest
from django.db import connection

from approvals.models import Capability, RefundPolicy
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import AgentRun, RefundDraft, Ticket, TraceEvent

# The agent's run after filing, with the four calls below (savepoints not counted): the claim
# (2), the ticket with its values to redact and the capabilities (1), three reads (3), four
# persists, each the run's compare-and-set and its step's events (8), and the decision (11:
# capabilities, policy, the payments with their methods (the original one is the first's),
# whether any is disputed and what each can still return, order position, the policy's risk
# figures in one query, draft, approval, the decision's record of facts (docs/replay.md),
# ticket, and the stop's run and events). With the filing's three statements the whole ticket
# is 28 (the benchmark allows 30: benchmarks/side_by_side.py).
RUN_QUERIES_MAX = 25


@pytest.fixture
def ticket_defaults():
    return {
        "order": "ORD-5001",
        "message": "My headphones arrived broken. Please refund me.",
        "requested_amount": "120.00",
    }


def four_calls(ticket) -> list[dict]:
    version = RefundPolicy.objects.current_for(ticket.tenant).version
    return [
        {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}},
        {"tool": "payments_get_summary", "input": {"order_id": "ORD-5001"}},
        {"tool": "refund_policy_retrieve", "input": {}},
        {
            "tool": "refunds_create_draft",
            "input": {
                "recommendation": "refund",
                "amount": "120.00",
                "policy_version": version,
                "rationale": "Damaged on arrival, inside the window.",
                "customer_reply": "We are looking into it.",
            },
        },
    ]


def test_every_trace_event_of_a_run_is_written_with_the_persist_of_its_step(file_ticket):
    # given a filed ticket and a model making the four calls
    ticket = file_ticket()
    provider = ScriptedProvider(four_calls(ticket))

    # when the agent runs, each statement noted with how many atomic blocks it ran in
    statements = []

    def record(execute, sql, params, many, context):
        statements.append((sql.lstrip(), len(context["connection"].atomic_blocks)))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        agent_run_ticket(ticket_id=ticket.pk, provider=provider)

    # then no trace event was inserted on its own: each INSERT went in right after its step's
    # compare-and-set on the run, inside a transaction of the loop's own (the run's reads, such
    # as its ticket's, ran outside any: the test's transaction stands for the outermost)
    outside = next(depth for sql, depth in statements if sql.startswith('SELECT "refundagent_ticket"."id"'))
    persists = [n for n, (sql, _) in enumerate(statements) if sql.startswith('UPDATE "refundagent_agentrun"')]
    inserts = [n for n, (sql, _) in enumerate(statements) if sql.startswith('INSERT INTO "refundagent_traceevent"')]
    assert len(persists) == 5  # three reads, the proposal, the decision's stop
    assert inserts == [n + 1 for n in persists]
    assert all(statements[n][1] > outside and statements[n + 1][1] > outside for n in persists)
    # and the trace is whole and in order
    spans = list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values_list("seq", "span"))
    assert [s for s, _ in spans] == list(range(1, len(spans) + 1))
    assert [span for _, span in spans] == [
        "run",
        "run",
        "model",
        "tool",
        "model",
        "tool",
        "model",
        "tool",
        "model",
        "draft",
        "policy",
        "approval",
        "stop",
    ]
    counted = [sql for sql, _ in statements if "SAVEPOINT" not in sql]
    assert len(counted) <= RUN_QUERIES_MAX, "\n".join(s[:140] for s in counted)


class _TakenOver(ScriptedProvider):
    """While the model thinks, another task takes the run over (its lease expired)."""

    def complete(self, **kwargs):
        AgentRun.objects.update(claimed_by="another-task")
        return super().complete(**kwargs)


def test_a_run_that_lost_its_claim_writes_neither_its_step_nor_its_trace(file_ticket):
    # given a filed ticket whose run is taken over during the first model call
    ticket = file_ticket()
    provider = _TakenOver(four_calls(ticket))

    # when the agent runs
    agent_run_ticket(ticket_id=ticket.pk, provider=provider)

    # then the lost step was not persisted, and none of its trace events was written
    run = AgentRun.objects.get(ticket=ticket)
    assert (run.iterations, run.messages) == (0, [])
    assert list(TraceEvent.objects.filter(ticket=ticket).values_list("span", "decision")) == [("run", "filed")]


class _SwitchOffWhileDrafting(ScriptedProvider):
    """An operator switches refunds.create_draft off while the model writes its draft."""

    def complete(self, **kwargs):
        turn = super().complete(**kwargs)
        if any(call.name == "refunds_create_draft" for call in turn.tool_calls):
            Capability.objects.filter(name="refunds.create_draft").update(enabled=False)
        return turn


def test_the_kill_switch_flipped_during_a_run_still_stops_the_draft_at_the_decision(file_ticket):
    # given a run under way, and the draft switched off while the model proposes it
    ticket = file_ticket()
    provider = _SwitchOffWhileDrafting(four_calls(ticket))

    # when the agent runs
    agent_run_ticket(ticket_id=ticket.pk, provider=provider)
    ticket.refresh_from_db()

    # then the decision re-read the capabilities: no draft, the ticket goes to a person
    assert ticket.status == Ticket.Status.ESCALATED
    assert "kill switch" in ticket.stop_detail
    assert not RefundDraft.objects.filter(ticket=ticket).exists()
