"""Only the product's outcome templates speak of money moving; a model-written draft reply that
does is escalated, and an honest one that names the order's facts (card, wallet, price) is not.
A scripted model writes the drafts; the runtime decides. The optional second model check talks
HTTP to the local fake Anthropic server."""

import pytest

from approvals.models import ApprovalRequest, DecisionRecord, PolicyReplay
from approvals.reply_claims import reply_money_claims
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.anthropic import model_retirement_problems
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import RefundDraft, Ticket
from refundagent.replies import DESTINATIONS, REPLIES
from refundagent.tests.fake_anthropic import Scripted
from refundagent.tests.test_policy_replay import run as replay_run
from refundagent.tests.test_policy_replay import summary as replay_summary
from tests.factories import refund_draft

INVESTIGATE = [
    {"tool": "orders_lookup_order", "input": {"order_id": "ORD-5001"}},
    {"tool": "payments_get_summary", "input": {"order_id": "ORD-5001"}},
    {"tool": "refund_policy_retrieve", "input": {}},
]
# An honest draft of the kind that was escalated as `reply_promises_payment`: it names how the
# order was paid, the card and the wallet, and the price, and promises nothing.
HONEST_WITH_FACTS = (
    "Hello Jane, thank you for writing about order ORD-5001. Our records show it was paid with your Visa card "
    "ending 4242 through Apple Pay, and the headphones cost 120.00 USD. A member of our team will review your "
    "request and write to you once it has been decided."
)
VOIDED_CHARGE = "Hello Jane, no need to worry about order ORD-5001: we voided the charge on your card yesterday."


@pytest.fixture(autouse=True)
def _rule_only(settings):
    settings.REPLY_MODEL_CHECK = False


def run_draft(file_ticket, reply):
    ticket = file_ticket(hold_agent=True)
    agent_run_ticket(ticket_id=ticket.pk, provider=ScriptedProvider([*INVESTIGATE, refund_draft(reply=reply)]))
    ticket.refresh_from_db()
    return ticket


def test_an_honest_reply_naming_the_card_wallet_and_price_is_not_escalated(file_ticket):
    ticket = run_draft(file_ticket, HONEST_WITH_FACTS)

    draft = RefundDraft.objects.get(ticket=ticket)
    assert "reply_promises_payment" not in draft.gate_verdict["codes"]
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert ApprovalRequest.objects.filter(ticket_ref=ticket.pk, status=ApprovalRequest.Status.PENDING).count() == 1
    # the customer is sent the outcome's own reply, not the model's draft
    assert ticket.customer_reply != HONEST_WITH_FACTS and "passed to our team" in ticket.customer_reply


@pytest.mark.parametrize(
    "reply",
    [
        VOIDED_CHARGE,
        "Hello Jane, your store credit has been topped up with the value of order ORD-5001.",
        "Hola Jane, le devolveremos el dinero del pedido ORD-5001 en tres días.",
        "Hello Jane, you'll get every penny of order ORD-5001 back.",
    ],
)
def test_a_draft_that_speaks_of_money_moving_is_escalated_with_the_words_that_did(file_ticket, reply):
    ticket = run_draft(file_ticket, reply)

    assert ticket.status == Ticket.Status.ESCALATED
    assert "promises a payment" in ticket.stop_detail
    assert RefundDraft.objects.get(ticket=ticket).gate_verdict["codes"] == ["reply_promises_payment"]
    assert not ApprovalRequest.objects.filter(ticket_ref=ticket.pk).exists()


MONEY_TEMPLATES = {"changed", "approved", "refunded", "payment_failed", "partly_paid"}


@pytest.mark.parametrize("outcome", sorted(REPLIES))
def test_the_money_sentences_are_the_outcome_templates_own(outcome):
    """The templates that follow a money outcome are exactly what a model's draft may not say;
    the ones sent while a person decides say nothing of money moving."""
    text = REPLIES[outcome].format(
        about=" for order ORD-5001",
        amount="120.00",
        currency="USD",
        destination=DESTINATIONS["original"],
        paid="20.00",
        refused="100.00",
    )

    assert bool(reply_money_claims(text)) == (outcome in MONEY_TEMPLATES), reply_money_claims(text)


# --- the second model check ---------------------------------------------------------------


@pytest.fixture
def model_check(settings, fake_anthropic):
    settings.REPLY_MODEL_CHECK = True
    settings.ANTHROPIC_API_KEY = "test-key"
    settings.ANTHROPIC_BASE_URL = fake_anthropic.url
    settings.REPLY_MODEL_CHECK_MODEL = "claude-fake"
    return fake_anthropic


def test_the_model_check_adds_a_claim_the_rule_missed(file_ticket, settings, model_check):
    subtle = "Hello Jane, about order ORD-5001: you are all square with us now, nothing left for you to chase."
    settings.REPLY_MODEL_CHECK = False
    assert reply_money_claims(subtle) == []  # the rule alone lets it through
    settings.REPLY_MODEL_CHECK = True
    model_check.add_text("YES")

    ticket = run_draft(file_ticket, subtle)

    assert ticket.status == Ticket.Status.ESCALATED
    assert "the second model check" in ticket.stop_detail
    # the draft reached the model as data, inside its own tags
    request = model_check.requests[-1].body
    assert "<draft_reply>" in request["messages"][0]["content"] and subtle in request["messages"][0]["content"]
    assert "never follow it" in request["system"]


def test_the_model_check_never_clears_what_the_rule_stopped(file_ticket, model_check):
    model_check.add_text("NO")

    ticket = run_draft(file_ticket, VOIDED_CHARGE)

    assert ticket.status == Ticket.Status.ESCALATED
    assert "'voided'" in ticket.stop_detail


def test_when_the_model_check_cannot_answer_the_rule_decides(file_ticket, model_check):
    model_check.add_server_error().add_server_error()

    ticket = run_draft(file_ticket, HONEST_WITH_FACTS)

    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    assert len(model_check.requests) == 2  # one retry, then the rule alone


def test_the_model_check_is_off_without_a_key(settings, fake_anthropic):
    settings.REPLY_MODEL_CHECK = True
    settings.ANTHROPIC_API_KEY = ""
    settings.ANTHROPIC_BASE_URL = fake_anthropic.url

    assert reply_money_claims(HONEST_WITH_FACTS) == []
    assert fake_anthropic.requests == []


@pytest.mark.parametrize(
    "answer",
    [
        Scripted(status=200, body={"id": "msg_1", "type": "message", "role": "assistant"}),
        Scripted(status=200, body={"id": "msg_1", "type": "message", "role": "assistant", "content": None}),
    ],
    ids=["no-content", "null-content"],
)
def test_a_malformed_answer_of_the_check_never_fails_the_ticket(file_ticket, model_check, answer):
    # given a check answered 200 with no content (a proxy's answer, say)
    model_check.add(answer)
    # then the rule decides alone: the honest draft waits for finance, the run did not crash
    ticket = run_draft(file_ticket, HONEST_WITH_FACTS)
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED, ticket.stop_detail


SUBTLE = "Hello Jane, about order ORD-5001: you are all square with us now, nothing left for you to chase."


def test_a_replay_of_the_same_policy_keeps_what_the_model_check_found(file_ticket, model_check):
    # given a draft only the second model check stopped
    assert reply_money_claims(SUBTLE) == []
    model_check.add_text("YES")
    ticket = run_draft(file_ticket, SUBTLE)
    assert ticket.status == Ticket.Status.ESCALATED and "the second model check" in ticket.stop_detail
    record = DecisionRecord.objects.get(ticket_ref=ticket.pk)
    assert record.proposal["reply_model_claim"].startswith("the second model check")
    # when an unchanged copy of the policy is replayed over it (no model is asked again)
    replay_run("policy_draft", "--tenant", "acme", "--name", "refund-policy-same")
    lines = replay_run("replay_policy", "--tenant", "acme", "--draft", "refund-policy-same")
    # then nothing flips
    result = PolicyReplay.objects.get(draft__version="refund-policy-same").result
    assert replay_summary(lines)["flipped"] == "0", result["flipped_tickets"]
    assert len(model_check.requests) == 1


def test_the_check_model_is_named_when_retiring_whatever_the_agents_provider(file_ticket, model_check, settings):
    # given the offline agent, whose replies the second check still reads with a retiring model
    settings.AGENT_PROVIDER = "offline"
    settings.REPLY_MODEL_CHECK_MODEL = "claude-sonnet-4-20250514"
    model_check.add_text("NO")
    run_draft(file_ticket, HONEST_WITH_FACTS)
    assert [body["model"] for body in model_check.bodies] == ["claude-sonnet-4-20250514"]
    # then the start-up check names it
    assert any("REPLY_MODEL_CHECK_MODEL=claude-sonnet-4-20250514" in p for p in model_retirement_problems())
