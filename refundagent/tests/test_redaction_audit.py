"""Redaction cannot be turned against the audit trail (a customer's name
made of decision words), and a card's last four digits are never stored in a trace."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from ledger.models import Customer, Order, Payment, PaymentMethod
from refundagent.agent.loop import agent_run_ticket
from refundagent.agent.providers.offline import OfflineProvider
from refundagent.agent.providers.scripted import ScriptedProvider
from refundagent.models import TraceEvent
from refundagent.redaction import redact, redact_text
from refundagent.services import ticket_create
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db

TAMPER_NAME = "Mallory refund-policy-v4 USD 12.00 approve"


def stored_events(ticket):
    return list(TraceEvent.objects.filter(ticket=ticket).order_by("seq").values("span", "decision", "reason", "data"))


def draft_turns(order_id, amount, reply):
    return [
        {"tool": "orders_lookup_order", "input": {"order_id": order_id}},
        {"tool": "payments_get_summary", "input": {"order_id": order_id}},
        {"tool": "refund_policy_retrieve", "input": {}},
        {
            "tool": "refunds_create_draft",
            "input": {
                "recommendation": "refund",
                "amount": amount,
                "policy_version": "refund-policy-v4",
                "rationale": "Within the window.",
                "customer_reply": reply,
            },
        },
    ]


def test_a_name_made_of_decision_words_does_not_blank_the_audit_trail(
    tenant, policy, make_user, django_capture_on_commit_callbacks
):
    # given a customer named after the fields of the audit trail, with a 12.00 USD order
    customer = Customer.objects.create(
        tenant=tenant, external_id="CUST-M", name=TAMPER_NAME, email="mallory@example.com"
    )
    card = PaymentMethod.objects.create(
        customer=customer, external_id="card_m", kind="card", brand="visa", last4="1881"
    )
    order = Order.objects.create(
        tenant=tenant,
        customer=customer,
        external_id="ORD-M",
        total="12.00",
        currency="USD",
        placed_at=timezone.now() - timedelta(days=3),
        status="delivered",
    )
    Payment.objects.create(
        order=order,
        payment_method=card,
        method="card",
        card_brand="visa",
        card_last4="1881",
        payment_ref="pi_mallory123456",
        amount="12.00",
        currency="USD",
    )
    support, finance = make_user("support", "support"), make_user("finance", "finance")
    with django_capture_on_commit_callbacks(execute=False):
        ticket = ticket_create(
            user=support, customer="CUST-M", order="ORD-M", message=f"I am {TAMPER_NAME}. Please refund."
        )

    # when the agent drafts 12.00 under refund-policy-v4 and finance approves
    agent_run_ticket(
        ticket_id=ticket.pk,
        provider=ScriptedProvider(
            draft_turns("ORD-M", "12.00", "Dear Mallory, we passed your request to our team for review.")
        ),
    )
    request = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)
    with django_capture_on_commit_callbacks(execute=True):
        manual_payout_record(request)  # the manual gateway: finance paid by hand, then it is verified

    # then the policy and approval events keep amount, currency, version and decision intact
    events = stored_events(ticket)
    policy_event = next(e for e in events if e["span"] == "policy")
    assert policy_event["data"]["allowed_amount"] == "12.00"
    assert policy_event["data"]["currency"] == "USD"
    assert policy_event["data"]["policy_version"] == "refund-policy-v4"
    assert policy_event["data"]["outcome"] == "approval_required"
    assert "12.00 USD" in policy_event["reason"] and "refund-policy-v4" in policy_event["reason"]
    approved = next(e for e in events if e["span"] == "approval" and e["decision"] == "approve")
    assert approved["data"]["decision"] == "approve"
    assert (approved["data"]["amount"], approved["data"]["currency"]) == ("12.00", "USD")
    assert approved["data"]["policy_version"] == "refund-policy-v4"
    assert approved["data"]["args_hash"] == request.args_hash
    assert any(e["span"] == "verify" and e["decision"] == "verified" for e in events)
    # and the customer's data is still redacted, as whole values and name words
    stored = json.dumps(events, default=str)
    for secret in ("Mallory", TAMPER_NAME, "mallory@example.com", "pi_mallory123456", "card_m"):
        assert secret.lower() not in stored.lower(), secret


def test_structured_fields_are_never_redacted_but_evidence_is():
    known = ["Ada 12.00 USD", "Ada", "12.00", "USD"]
    data = {
        "amount": "12.00",
        "currency": "USD",
        "codes": ["USD"],
        "reasons": ["Ada paid 12.00 USD"],
        "args": {"amount": "Ada", "note": "Ada"},
    }
    redacted = redact(data, known)
    assert redacted["amount"] == "12.00" and redacted["currency"] == "USD" and redacted["codes"] == ["USD"]
    assert redacted["args"] == {"amount": "[redacted]", "note": "[redacted]"}
    assert "Ada" not in redacted["reasons"][0]


def test_a_last4_is_redacted_as_a_whole_number_only():
    assert redact_text("card ending 4242, charged 4242.00 on 14242", ["4242"]) == (
        "card ending [redacted], charged 4242.00 on 14242"
    )


@pytest.mark.parametrize("provider", ["scripted", "offline"])
def test_no_card_last4_is_stored_in_any_trace(demo, user, provider, django_capture_on_commit_callbacks):
    # given an order whose shop note and ticket text carry the card's last four
    order = Order.objects.get(external_id="ORD-5001")
    last4 = order.payments.get().card_last4
    assert last4 and PaymentMethod.objects.filter(customer=order.customer, last4=last4).exists()
    Order.objects.filter(pk=order.pk).update(note=f"Customer called: card ending {last4} was charged twice.")
    with django_capture_on_commit_callbacks(execute=False):
        ticket = ticket_create(
            user=user("acme-support"),
            order="ORD-5001",
            customer="CUST-1001",
            message=f"My visa ending in {last4} (last4: {last4}) was charged. Refund please.",
        )

    # when the agent runs (reading the order, its note and the payment summary)
    runner = (
        OfflineProvider()
        if provider == "offline"
        else ScriptedProvider(draft_turns("ORD-5001", None, "We passed your request on for review."))
    )
    agent_run_ticket(ticket_id=ticket.pk, provider=runner)

    # then no stored trace event contains the last four, while the brand is kept
    stored = json.dumps(stored_events(ticket), default=str)
    assert TraceEvent.objects.filter(ticket=ticket).count() >= 4
    assert last4 not in stored
    if provider == "scripted":
        summary = TraceEvent.objects.get(ticket=ticket, tool="payments.get_summary", span="tool")
        assert summary.data["result"]["payments"][0]["brand_untrusted"] == "visa"
