"""A refund the provider reported paid and then failed (Stripe's `refund.updated` with `status:
failed`, or `charge.refund.updated`): the ticket goes back to finance as `payment_failed` with the
provider's reason, whether the failure arrives before or after the evaluator verified the payout,
and however often it is delivered."""

import json
from decimal import Decimal

import pytest
from django.test import Client

from approvals.models import ApprovalRequest
from approvals.services.refile import approval_request_payment_retry
from ledger.models import RefundEntry
from ledger.selectors import order_refund_position
from ledger.tests.fake_stripe import sign_webhook
from refundagent.models import Ticket
from refundagent.tests.payments_support import approve, ticket_awaiting_approval

pytestmark = pytest.mark.django_db

SECRET = "whsec_test_secret"


def refund_event(refund: dict, *, event_type="refund.updated", event_id="evt_late_1", **changes) -> dict:
    obj = {key: value for key, value in refund.items() if not key.startswith("_")}
    obj.update(changes)
    return {"id": event_id, "object": "event", "type": event_type, "data": {"object": obj}, "created": 1_700_000_000}


def post_event(payload: dict):
    body = json.dumps(payload).encode()
    return Client().post(
        "/webhooks/stripe", data=body, content_type="application/json", HTTP_STRIPE_SIGNATURE=sign_webhook(body, SECRET)
    )


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-LATE", payment_ref="pi_late"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def assert_back_with_finance(shop, ticket, request, reason):
    ticket.refresh_from_db()
    request.refresh_from_db()
    [entry] = RefundEntry.objects.filter(order=shop["order"])
    assert entry.status == "failed"
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED and reason in request.verification["detail"]
    assert ticket.status == Ticket.Status.PAYMENT_FAILED, ticket.stop_detail
    assert reason in ticket.stop_detail
    # the reply no longer says the money was refunded
    assert "could not be completed" in ticket.customer_reply and "we have refunded" not in ticket.customer_reply.lower()
    # the refused money is refundable again, and finance can file it again
    assert order_refund_position(shop["order"]).refundable == Decimal("100.00")
    again = approval_request_payment_retry(request_id=request.pk, user=shop["finance"])
    assert again.status == ApprovalRequest.Status.PENDING and again.amount == Decimal("30.00")


@pytest.mark.parametrize("event_type", ["refund.updated", "charge.refund.updated"])
def test_a_failure_after_verification_sends_the_refunded_ticket_back_to_finance(
    fake_stripe, shop, django_capture_on_commit_callbacks, event_type
):
    # given a refund paid, verified, and the ticket refunded
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="late-1")
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    [refund] = fake_stripe.refunds.values()

    # when the provider fails it afterwards, and announces it twice (the same event, then another)
    failed = refund_event(refund, event_type=event_type, status="failed", failure_reason="expired_or_canceled_card")
    for payload in (failed, failed, refund_event(refund, event_id="evt_late_2", status="failed")):
        with django_capture_on_commit_callbacks(execute=True):
            assert post_event(payload).status_code == 200

    # then the ticket is payment_failed with the provider's reason, once
    assert_back_with_finance(shop, ticket, request, "expired_or_canceled_card")


def test_a_failure_before_verification_sends_the_ticket_back_to_finance(
    fake_stripe, shop, django_capture_on_commit_callbacks
):
    # given the provider answered the payout `pending`
    fake_stripe.refund_status = "pending"
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="late-2")
    with django_capture_on_commit_callbacks(execute=True):
        approve(request, shop["finance"])
    [refund] = fake_stripe.refunds.values()
    # when it reports success (the execution that verifies is enqueued, not run yet) ...
    with django_capture_on_commit_callbacks(execute=False) as verification:
        assert post_event(refund_event(refund, event_id="evt_ok", status="succeeded")).status_code == 200
    # ... and then the failure, before the verification ran
    with django_capture_on_commit_callbacks(execute=True):
        assert (
            post_event(
                refund_event(refund, event_id="evt_bad", status="failed", failure_reason="lost_or_stolen_card")
            ).status_code
            == 200
        )
    with django_capture_on_commit_callbacks(execute=True):
        for callback in list(verification):
            callback()

    # then the ticket never became refunded; it is back with finance with the reason
    assert_back_with_finance(shop, ticket, request, "lost_or_stolen_card")
