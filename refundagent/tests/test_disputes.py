"""A dispute (chargeback) on an order's charge, from the webhook or the reconciliation: the order
is disputed, the gate escalates a refund on it (`disputed`), a request waiting for a decision or a
payout is held, and nothing is paid until a person decides again."""

import json
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.models import ApprovalRequest
from ledger.models import Dispute, RefundEntry
from ledger.tests.fake_stripe import sign_webhook
from refundagent.models import Ticket
from refundagent.tests.payments_support import ticket_awaiting_approval

pytestmark = pytest.mark.django_db

SECRET = "whsec_test_secret"


def dispute_event(event_type="charge.dispute.created", *, event_id="evt_dp_1", status="needs_response", **changes):
    dispute = {
        "id": "dp_1",
        "object": "dispute",
        "amount": 10000,
        "currency": "usd",
        "charge": "ch_disputed",
        "payment_intent": "pi_disputed",
        "status": status,
        "reason": "fraudulent",
        "is_charge_refundable": False,
        **changes,
    }
    return {"id": event_id, "object": "event", "type": event_type, "data": {"object": dispute}, "created": 1}


def deliver(payload, django_capture_on_commit_callbacks):
    body = json.dumps(payload).encode()
    with django_capture_on_commit_callbacks(execute=True):
        return Client().post(
            "/webhooks/stripe",
            data=body,
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=sign_webhook(body, SECRET),
        )


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-DISP", payment_ref="pi_disputed"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def gate(order, amount="30.00"):
    policy = policy_current(order.tenant)
    return policy_gate_evaluate(
        order=order,
        policy=policy,
        now=timezone.now(),
        proposal=Proposal(recommendation="refund", amount=Decimal(amount), policy_version=policy.version),
    )


def approve_api(api_client, finance, request):
    return api_client(finance).post(
        f"/api/approvals/{request.pk}/decision",
        {"decision": "approve", "args_hash": request.args_hash},
        content_type="application/json",
    )


def test_a_dispute_webhook_marks_the_order_disputed_and_the_gate_escalates(
    fake_stripe, shop, django_capture_on_commit_callbacks
):
    assert gate(shop["order"]).outcome == "approval_required"
    # when the bank disputes the charge, and the event is delivered twice
    for _ in range(2):
        assert deliver(dispute_event(), django_capture_on_commit_callbacks).status_code == 200
    # then the order is disputed once, and the gate escalates with the reason
    [dispute] = Dispute.objects.filter(order=shop["order"])
    assert (dispute.provider_ref, dispute.status, dispute.is_charge_refundable) == ("dp_1", "needs_response", False)
    verdict = gate(shop["order"])
    assert verdict.outcome == "escalated" and verdict.codes == ["disputed"]
    assert "dp_1" in verdict.reason and "not refundable" in verdict.reason
    # when the shop wins it (an older event arriving late never reopens it)
    deliver(
        dispute_event("charge.dispute.closed", event_id="evt_dp_2", status="won"), django_capture_on_commit_callbacks
    )
    deliver(dispute_event("charge.dispute.updated", event_id="evt_dp_0"), django_capture_on_commit_callbacks)
    dispute.refresh_from_db()
    assert dispute.status == "won" and gate(shop["order"]).outcome == "approval_required"


def test_a_pending_approval_is_held_when_a_dispute_arrives(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks
):
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="d1")
    # when the dispute arrives before finance decides
    deliver(dispute_event(), django_capture_on_commit_callbacks)
    # then the request is held (invalidated with the reason), the ticket is with a person
    request.refresh_from_db()
    ticket.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED and request.replaced_by_id is None
    assert ticket.status == Ticket.Status.ESCALATED and "disputed" in ticket.stop_detail
    # and approving it is refused: nothing is paid
    with django_capture_on_commit_callbacks(execute=True):
        assert approve_api(api_client, shop["finance"], request).status_code == 409
    assert fake_stripe.posts() == [] and not RefundEntry.objects.exists()


def test_a_dispute_between_approval_and_payout_stops_the_payout(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks
):
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="d2")
    # given finance approved; the execution is enqueued but has not run
    with django_capture_on_commit_callbacks(execute=False) as execution:
        assert approve_api(api_client, shop["finance"], request).status_code == 200
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.APPROVED
    # when the dispute arrives now, then the execution runs
    deliver(dispute_event(), django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        for callback in execution:
            callback()
    # then nothing was paid or written, and the ticket waits for a person
    assert fake_stripe.posts() == [] and not RefundEntry.objects.exists()
    request.refresh_from_db()
    ticket.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED
    assert ticket.status == Ticket.Status.ESCALATED


def test_a_dispute_the_provider_knows_but_the_ledger_not_yet_stops_the_payout(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks
):
    # given the webhook was lost: only the provider knows the charge is disputed
    fake_stripe.add_dispute(payment_intent="pi_disputed", amount=10000)
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="d3")
    with django_capture_on_commit_callbacks(execute=True):
        assert approve_api(api_client, shop["finance"], request).status_code == 200
    # then the payment check refuses it: nothing paid, back with finance with the reason
    assert fake_stripe.posts() == []
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    assert "payment_disputed" in request.verification["detail"]


def test_the_reconciliation_records_a_dispute_whose_webhook_was_lost(fake_stripe, shop, capsys):
    fake_stripe.add_dispute(payment_intent="pi_disputed", amount=10000, created=int(timezone.now().timestamp()))
    try:
        call_command("reconcile_payments")
    except SystemExit:
        pass
    [dispute] = Dispute.objects.filter(order=shop["order"])
    assert dispute.status == "needs_response"
    assert gate(shop["order"]).codes == ["disputed"]


@pytest.mark.parametrize(
    "changes", [{"charge": None}, {"amount": "100"}, {"status": ""}, {"is_charge_refundable": "yes"}]
)
def test_a_malformed_dispute_event_answers_400_and_stores_nothing(
    fake_stripe, shop, django_capture_on_commit_callbacks, changes
):
    answer = deliver(dispute_event(event_id="evt_bad_dp", **changes), django_capture_on_commit_callbacks)
    assert answer.status_code == 400
    assert not Dispute.objects.exists() and gate(shop["order"]).outcome == "approval_required"


def test_another_accounts_dispute_never_marks_our_order(fake_stripe, shop, django_capture_on_commit_callbacks):
    # given a dispute on a payment with our reference, sent from another connected account
    payload = dispute_event(event_id="evt_other_acct")
    payload["account"] = "acct_someone_else"
    assert deliver(payload, django_capture_on_commit_callbacks).status_code == 200
    # then our order is not disputed
    assert not Dispute.objects.exists() and gate(shop["order"]).outcome == "approval_required"
