"""The model's amounts go through the one money parser: a float, a shape Python reads as a
number, or an amount finer than the order's currency is an invalid argument the model is told
about and may correct. Nothing is rounded into a draft, and nothing reaches the ledger."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest
from ledger.models import Customer, Order, Payment, RefundEntry
from refundagent.agent.tools import CREATE_DRAFT, tool_args_validate
from refundagent.models import RefundDraft, Ticket
from refundagent.tests.scripted_runs import answers, run
from tests.factories import refund_draft as draft

DRAFT = {"recommendation": "refund", "policy_version": "v", "rationale": "r", "customer_reply": "c"}
# Shapes Python (Decimal(), float(), int()) reads as a number, which an amount is not.
NOT_MONEY = ["1e2", "１２０", "1_000", True, 1.5, 49.9, "NaN", "Infinity", " 12 ", "-0", "0.004", "120.005"]


@pytest.mark.parametrize("amount", [*NOT_MONEY, "10000000000.00", 10**10], ids=repr)
def test_an_amount_that_is_not_money_is_an_invalid_argument(amount):
    args, problems = tool_args_validate(capability=CREATE_DRAFT, arguments={**DRAFT, "amount": amount})

    assert args is None
    assert [problem["field"] for problem in problems] == ["amount"]


@pytest.mark.parametrize("amount", NOT_MONEY, ids=repr)
def test_the_model_is_told_and_its_corrected_draft_is_decided_as_said(file_ticket, amount):
    # given a model whose first draft says that amount, and whose second says 100.00
    ticket = file_ticket()

    # when the run goes
    ticket, agent_run = run(ticket, [draft(amount=amount), draft(amount="100.00")])

    # then the first draft was answered as an invalid argument naming the amount
    first = answers(agent_run)[0]
    assert first["error"] == "invalid_arguments"
    assert [problem["field"] for problem in first["problems"]] == ["amount"]
    assert agent_run.invalid_args_retries == 1
    # and the one draft decided is the corrected one, exactly as said: nothing rounded
    [made] = RefundDraft.objects.filter(ticket=ticket)
    assert made.amount == Decimal("100.00")
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert ApprovalRequest.objects.get(ticket_ref=ticket.pk).amount == Decimal("100.00")


@pytest.fixture
def yen_order(demo):
    """CUST-1001's 1000 JPY order, delivered two days ago (yen have no minor unit)."""
    customer = Customer.objects.get(tenant=demo["acme"], external_id="CUST-1001")
    order = Order.objects.create(
        tenant=demo["acme"],
        external_id="ORD-JPY",
        customer=customer,
        total=Decimal("1000"),
        currency="JPY",
        placed_at=timezone.now() - timedelta(days=2),
        status="delivered",
    )
    Payment.objects.create(order=order, method="card", amount=Decimal("1000"), currency="JPY", payment_ref="pi_jpy1")
    return order


@pytest.mark.parametrize("amount", ["1.5", "120.50"])
def test_an_amount_finer_than_the_orders_currency_is_told_to_the_model_never_rounded(file_ticket, yen_order, amount):
    # given a ticket on the yen order, and a model that drafts that many yen, then 120
    ticket = file_ticket(order="ORD-JPY")

    # when the run goes
    ticket, agent_run = run(ticket, [draft(amount=amount), draft(amount="120")])

    # then the first draft was answered as an invalid amount that names the currency
    first = answers(agent_run)[0]
    assert first["error"] == "invalid_arguments"
    [problem] = first["problems"]
    assert problem["field"] == "amount" and "JPY" in problem["problem"]
    # and only the whole-yen draft was decided: no draft, request or ledger entry of a fraction of a yen
    [made] = RefundDraft.objects.filter(ticket=ticket)
    assert made.amount == Decimal("120")
    assert ApprovalRequest.objects.get(ticket_ref=ticket.pk).amount == Decimal("120")
    assert not RefundEntry.objects.filter(order=yen_order).exists()


def test_a_model_that_keeps_drafting_half_a_yen_fails_the_run(file_ticket, yen_order, settings):
    # given a model that drafts 1.5 yen every time
    ticket = file_ticket(order="ORD-JPY")

    # when the run goes
    turns = [draft(amount="1.5") for _ in range(settings.AGENT_MAX_INVALID_ARGS_RETRIES + 1)]
    ticket, agent_run = run(ticket, turns)

    # then the run fails with the reason, as for any invalid argument, and nothing was drafted
    assert ticket.status == Ticket.Status.FAILED
    assert "invalid arguments" in ticket.stop_detail and "JPY" in ticket.stop_detail
    assert not RefundDraft.objects.filter(ticket=ticket).exists()
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()
