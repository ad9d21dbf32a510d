"""agent_draft_decide on its own: the gate's verdict, the draft, the approval request, the ticket's
move and the caller's stop of its run commit together, or not at all."""

from decimal import Decimal

import pytest

from approvals.models import ApprovalRequest
from refundagent.agent.decision import DraftDecision, agent_draft_decide
from refundagent.agent.loop import agent_run_claim
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.agent.tools import CREATE_DRAFT, tool_args_validate
from refundagent.exceptions import TicketStateConflict
from refundagent.models import RefundDraft, Ticket, TraceEvent
from refundagent.services import ticket_create

REFUND_120 = {
    "recommendation": "refund",
    "amount": "120.00",
    "policy_version": "refund-policy-v4",
    "rationale": "Arrived broken, inside the window.",
    "customer_reply": "We are sorry: finance reviews a refund for ORD-5001.",
}


@pytest.fixture
def running(user):
    """A ticket on ORD-5001 (120.00) asking for 200.00, its run claimed by the agent."""

    def make(order="ORD-5001"):
        ticket = ticket_create(
            user=user("acme-support"), order=order, customer="CUST-1001", message="Broken.", requested_amount="200.00"
        )
        run, _ = agent_run_claim(ticket_id=ticket.pk, task_id="task-1", provider=OfflineProvider())
        ticket.refresh_from_db()
        return ticket, run

    return make


def _args(raw: dict):
    args, problems = tool_args_validate(capability=CREATE_DRAFT, arguments=raw)
    assert problems == []
    return args


def decide(ticket, run, raw=REFUND_120, stop_run=None, order="ticket's"):
    stops: list[DraftDecision] = []
    decision = agent_draft_decide(
        run=run,
        ticket=ticket,
        args=_args(raw),
        raw_args=raw,
        order=ticket.order if order == "ticket's" else order,
        stop_run=stop_run or stops.append,
    )
    return decision, stops


def test_an_eligible_refund_asks_finance_for_exactly_what_the_gate_allows(running):
    # given a running ticket and the agent's draft for 120.00 citing the current policy
    ticket, run = running()

    # when the runtime decides it
    decision, stops = decide(ticket, run)

    # then one approval request for 120.00 keyed by the draft, the ticket waits for finance,
    # and the caller was asked to stop its run with that very decision
    assert decision.status == Ticket.Status.APPROVAL_REQUIRED
    assert stops == [decision]
    draft = RefundDraft.objects.get(run=run)
    assert draft == decision.draft and draft.gate_verdict["outcome"] == "approval_required"
    approval = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    assert approval == decision.approval and approval.amount == Decimal("120.00")
    assert approval.idempotency_key == f"refund:acme:ticket-{ticket.pk}:draft-{draft.pk}"
    assert decision.result == {
        "draft": draft.pk,
        "outcome": "approval_required",
        "reasons": decision.verdict.reasons,
        "allowed_amount": "120.00",
        "approval": approval.pk,
    }
    row = Ticket.objects.get(pk=ticket.pk)
    assert (row.status, row.stop_reason) == ("approval_required", "approval_required")
    assert row.stop_detail == decision.detail and f"approval #{approval.pk}" in row.stop_detail
    spans = list(TraceEvent.objects.filter(ticket=ticket, run=run).values_list("span", flat=True))
    assert spans[-3:] == ["draft", "policy", "approval"]


def test_a_draft_that_names_no_order_goes_to_a_person_without_an_approval(running):
    # given a running ticket whose draft named none of the customer's orders
    ticket, run = running()

    # when the runtime decides it with no order
    decision, stops = decide(ticket, run, order=None)

    # then the ticket is escalated with the gate's reason, and no approval is asked for
    assert (decision.status, decision.stop_reason) == (Ticket.Status.ESCALATED, Ticket.StopReason.ESCALATED)
    assert decision.verdict.codes == ["order_not_named"] and decision.approval is None
    assert Ticket.objects.get(pk=ticket.pk).status == "escalated"
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()
    assert len(stops) == 1


def test_a_ticket_a_person_changed_meanwhile_gets_no_decision(running):
    # given a running ticket that a person escalated while the agent worked
    ticket, run = running()
    Ticket.objects.filter(pk=ticket.pk).update(status=Ticket.Status.ESCALATED)
    events = TraceEvent.objects.filter(ticket=ticket).count()

    # when the runtime decides the draft
    with pytest.raises(TicketStateConflict):
        decide(ticket, run, stop_run=lambda decision: pytest.fail("the run must not be stopped as decided"))

    # then nothing of the decision was written
    assert not RefundDraft.objects.filter(ticket=ticket).exists()
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()
    assert TraceEvent.objects.filter(ticket=ticket).count() == events
    assert Ticket.objects.get(pk=ticket.pk).status == "escalated"


def test_when_the_run_cannot_be_stopped_the_whole_decision_rolls_back(running):
    # given a running ticket, and a caller whose stop of the run fails (it lost its claim)
    ticket, run = running()
    events = TraceEvent.objects.filter(ticket=ticket).count()

    def lost_claim(decision):
        raise RuntimeError("lost the claim")

    # when the runtime decides the draft
    with pytest.raises(RuntimeError):
        decide(ticket, run, stop_run=lost_claim)

    # then the draft, the approval, the ticket's move and the trace roll back with it
    assert not RefundDraft.objects.filter(ticket=ticket).exists()
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()
    assert Ticket.objects.get(pk=ticket.pk).status == "running"
    assert TraceEvent.objects.filter(ticket=ticket).count() == events
