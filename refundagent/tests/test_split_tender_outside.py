"""Money that moves around the product's legs: a refund made by hand at the provider on one leg's
payment, card legs paid by hand, a late leg failure while the refile's refund is pending, and what
the customer is told after a refused card leg when the gift card's store credit stood."""

import json
from decimal import Decimal

import pytest
from django.test import Client

from approvals.services.decisions import approval_request_decide
from ledger.models import PaymentMethod, RefundEntry
from ledger.selectors import order_payments_returnable, order_refund_position
from ledger.tests.fake_stripe import sign_webhook
from refundagent.tests.payments_support import order_paid, ticket_gated

pytestmark = pytest.mark.django_db
SECRET = "whsec_test_secret"


def post_refund_created(refund: dict):
    obj = {k: v for k, v in refund.items() if not k.startswith("_")}
    payload = {
        "id": "evt_hand_1",
        "object": "event",
        "type": "refund.created",
        "data": {"object": obj},
        "api_version": "2025-01-01",
        "created": 1_700_000_000,
    }
    body = json.dumps(payload).encode()
    return Client().post(
        "/webhooks/stripe", data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=sign_webhook(body, SECRET)
    )


def test_an_external_refund_on_the_second_card_is_counted_against_that_card(
    fake_stripe, tenant, customer, card, make_user, policy, django_capture_on_commit_callbacks
):
    other_card = PaymentMethod.objects.create(customer=customer, external_id="card_2", kind="card", last4="1111")
    order = order_paid(tenant, customer, "ORD-HAND", (card, "60.00", "pi_first"), (other_card, "60.00", "pi_second"))
    # given someone refunded the second card's charge in full, by hand in the Stripe dashboard
    refund = fake_stripe.add_refund(payment_intent="pi_second", amount=6000)
    with django_capture_on_commit_callbacks(execute=True):
        assert post_refund_created(refund).status_code == 200
    assert RefundEntry.objects.get(order=order).status == "external"
    assert order_refund_position(order).refundable == Decimal("60.00")

    # then the remaining 60.00, approved, is refunded on pi_first, never on the exhausted pi_second
    first, second = order.payments.order_by("id")
    returnable = {p.payment_id: p.returnable for p in order_payments_returnable(order)}
    support, finance = make_user("support", "support"), make_user("finance", "finance")
    ticket, verdict, request = ticket_gated(order=order, filer=support, amount="60.00", key="hand")
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)
    # (the fake Stripe does not cap a charge's refunds; the real one answers charge_already_refunded)
    posts = [call["params"]["payment_intent"] for call in fake_stripe.posts()]
    assert posts == ["pi_first"], (posts, returnable)


def test_each_card_leg_paid_by_hand_is_the_one_the_trace_records(
    settings, tenant, customer, card, make_user, policy, client, django_capture_on_commit_callbacks
):
    settings.PAYMENT_GATEWAY = "manual"
    other_card = PaymentMethod.objects.create(customer=customer, external_id="card_2", kind="card", last4="1111")
    order = order_paid(tenant, customer, "ORD-HAND2", (card, "60.00", "pi_first"), (other_card, "60.00", "pi_second"))
    support, finance, finance2 = (
        make_user("support", "support"),
        make_user("finance", "finance"),
        make_user("finance2", "finance"),
    )
    ticket, verdict, request = ticket_gated(order=order, filer=support, amount="120.00", key="hand2")
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)
    first, second = RefundEntry.objects.filter(order=order).order_by("id")
    assert (first.gateway, first.status, second.gateway, second.status) == ("manual", "pending", "manual", "pending")
    # when finance records each card leg paid on the review page, one after the other
    client.force_login(finance2)
    for reference in ("SEPA-1", "SEPA-2"):
        with django_capture_on_commit_callbacks(execute=True):
            client.post(f"/admin/approvals/approvalrequest/{request.pk}/paid/", {"reference": reference})
    first.refresh_from_db()
    second.refresh_from_db()
    request.refresh_from_db()
    assert (first.provider_ref, second.provider_ref) == ("SEPA-1", "SEPA-2")
    assert request.status == "executed", request.verification
    # then the ticket's trace records each leg's payout by hand once: #first and #second
    recorded = [e.reason for e in ticket.trace_events.order_by("seq") if e.decision == "payout_recorded"]
    assert any(f"#{first.pk}:" in r for r in recorded) and any(f"#{second.pk}:" in r for r in recorded), recorded


def test_a_refile_paid_after_another_leg_failed_does_not_close_the_ticket_as_refunded(
    fake_stripe, tenant, customer, card, make_user, policy, django_capture_on_commit_callbacks
):
    from approvals.services.refile import approval_request_payment_retry
    from refundagent.models import Ticket
    from refundagent.tests.test_late_provider_failure import post_event, refund_event

    capture = django_capture_on_commit_callbacks
    other_card = PaymentMethod.objects.create(customer=customer, external_id="card_2", kind="card", last4="1111")
    order = order_paid(tenant, customer, "ORD-LP", (card, "60.00", "pi_first"), (other_card, "60.00", "pi_second"))
    support, finance, finance2 = (
        make_user("support", "support"),
        make_user("finance", "finance"),
        make_user("finance2", "finance"),
    )
    ticket, verdict, request = ticket_gated(order=order, filer=support, amount="120.00", key="lp")
    # given a 120.00 refund over two cards: the first leg paid, the second refused, and filed again
    fake_stripe.fail_next("none", "402")
    with capture(execute=True):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)
    request.refresh_from_db()
    assert request.status == "payment_failed"
    [paid] = [r for r in fake_stripe.refunds.values() if r["status"] == "succeeded"]
    again = approval_request_payment_retry(request_id=request.pk, user=finance2)
    # and the refile approved, its refund still pending at the provider
    fake_stripe.refund_status = "pending"
    with capture(execute=True):
        approval_request_decide(request_id=again.pk, user=finance, decision="approve", args_hash=again.args_hash)
    again.refresh_from_db()
    assert again.status == "approved"
    [pending] = [r for r in fake_stripe.refunds.values() if r["status"] == "pending"]
    # when the first leg's paid refund fails at the provider
    fake_stripe.refunds[paid["id"]]["status"] = "failed"
    with capture(execute=True):
        post_event(refund_event(paid, event_id="evt_lp_1", status="failed", failure_reason="expired_or_canceled_card"))
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED, ticket.stop_detail
    assert "propose a refund of 60.00 USD" in ticket.stop_detail
    # and then the refile's refund (the second card's 60.00) succeeds at the provider
    fake_stripe.refunds[pending["id"]]["status"] = "succeeded"
    with capture(execute=True):
        post_event(refund_event(pending, event_id="evt_lp_2", status="succeeded"))
    again.refresh_from_db()
    assert again.status == "executed", again.verification
    # then the ticket still says 60.00 is owed (the first card's failed leg): it is not "refunded"
    ticket.refresh_from_db()
    assert order_refund_position(order).refundable == Decimal("60.00")
    assert ticket.status == Ticket.Status.PAYMENT_FAILED, (ticket.status, ticket.stop_detail, ticket.customer_reply)


def test_the_reply_after_a_refused_card_leg_says_the_store_credit_was_given(
    fake_stripe, tenant, customer, card, make_user, policy, django_capture_on_commit_callbacks
):
    from refundagent.models import Ticket

    gift_card = PaymentMethod.objects.create(
        customer=customer, external_id="gift_card_9", kind=PaymentMethod.Kind.GIFT_CARD, balance=Decimal("0.00")
    )
    order = order_paid(tenant, customer, "ORD-GIFT", (gift_card, "20.00", ""), (card, "100.00", "pi_split"))
    support, finance = make_user("support", "support"), make_user("finance", "finance")
    ticket, verdict, request = ticket_gated(order=order, filer=support, amount="120.00", key="gift")
    # when the provider declines the card leg (the gift card's 20.00 store credit is given and kept)
    fake_stripe.fail_next("402")
    with django_capture_on_commit_callbacks(execute=True):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00")
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED
    # then the customer is not told that nothing reached them: the 20.00 on the gift card did
    assert "we have refunded 20.00 USD for order ORD-GIFT to your gift card" not in ticket.customer_reply
    assert "of your refund for order ORD-GIFT, we have refunded 20.00 USD to your gift card" in ticket.customer_reply
    assert "the remaining 100.00 USD could not be completed" in ticket.customer_reply
