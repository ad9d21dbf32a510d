"""An approved refund paid out at the provider (the real `stripe` SDK against the local fake
Stripe server), exactly once, with the ticket following what the provider said."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services.execution import approval_execute
from approvals.services.refile import approval_request_payment_retry
from ledger.exceptions import PaymentProviderUnavailable
from ledger.models import ReconciliationFinding, RefundEntry
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_record_paid
from refundagent.models import Ticket
from refundagent.sweep import outbox_sweep
from refundagent.tests.payments_support import approve, ticket_awaiting_approval

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-PAY", payment_ref="pi_pay"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


@pytest.fixture
def approved_ticket(shop, django_capture_on_commit_callbacks):
    """approved_ticket("30.00") -> (ticket, request) after finance approved and the (eager) execution ran."""

    def make(amount="30.00", key="approval-key-1", execute=True):
        ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount=amount, key=key)
        with django_capture_on_commit_callbacks(execute=execute):
            approve(request, shop["finance"])
        ticket.refresh_from_db()
        request.refresh_from_db()
        return ticket, request

    return make


def test_an_approved_refund_is_paid_out_once_and_the_ticket_is_refunded(fake_stripe, shop, approved_ticket):
    # given a ticket waiting for finance, when finance approves 30.00 (the execution runs)
    ticket, request = approved_ticket("30.00")

    # then the provider got one refund: 3000 cents on the payment, the approval's key, the metadata
    [call] = fake_stripe.posts()
    assert call["params"]["payment_intent"] == "pi_pay" and call["params"]["amount"] == "3000"
    assert call["idempotency_key"] == request.idempotency_key == "approval-key-1"
    assert (
        call["params"]["metadata[approval]"],
        call["params"]["metadata[ticket]"],
        call["params"]["metadata[tenant]"],
    ) == (str(request.pk), str(ticket.pk), shop["order"].tenant.slug)
    # and the ledger entry succeeded, naming that refund
    [entry] = RefundEntry.objects.filter(order=shop["order"])
    [refund] = fake_stripe.refunds.values()
    assert (entry.status, entry.provider_ref, entry.amount) == ("succeeded", refund["id"], Decimal("30.00"))
    # and the evaluator checked the provider's record before the ticket became refunded
    assert request.status == ApprovalRequest.Status.EXECUTED and request.verification["ok"]
    checked = {c["name"] for c in request.verification["checks"]}
    assert {
        "entry_succeeded",
        "provider_refund_id",
        "provider_status",
        "provider_amount",
        "provider_metadata_approval",
    } <= checked
    assert [c for c in fake_stripe.calls if c["method"] == "GET"]  # the provider was asked
    assert ticket.status == Ticket.Status.REFUNDED
    # and executing again changes nothing at the provider
    approval_execute(request_id=request.pk)
    assert len(fake_stripe.posts()) == 1


def test_a_lost_response_is_retried_with_the_same_key_and_pays_once(fake_stripe, shop, approved_ticket, settings):
    # given the provider makes the refund but the answer is lost, and the SDK does not retry
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    fake_stripe.fail_next("drop")
    ticket, request = approved_ticket("30.00", execute=False)

    # when the execution runs: the provider is unavailable as far as we know; the entry stays pending
    with pytest.raises(PaymentProviderUnavailable):
        approval_execute(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.APPROVED
    assert RefundEntry.objects.get(order=shop["order"]).status == "pending"

    # and the task's retry runs it again
    approval_execute(request_id=request.pk)

    # then the retry got the same refund back: one refund at the provider, one ledger entry
    assert len(fake_stripe.refunds) == 1 and len(fake_stripe.posts()) == 2
    assert {c["idempotency_key"] for c in fake_stripe.posts()} == {request.idempotency_key}
    [entry] = RefundEntry.objects.filter(order=shop["order"])
    assert entry.status == "succeeded" and entry.provider_ref == next(iter(fake_stripe.refunds))
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED


def test_a_500_then_success_makes_one_refund(fake_stripe, shop, approved_ticket):
    fake_stripe.fail_next("500")
    ticket, request = approved_ticket("30.00")
    assert len(fake_stripe.posts()) == 2 and len(fake_stripe.refunds) == 1
    assert RefundEntry.objects.get(order=shop["order"]).status == "succeeded"
    assert ticket.status == Ticket.Status.REFUNDED


@pytest.mark.parametrize(("fault", "reason"), [("402", "card_declined"), ("400", "charge_already_refunded")])
def test_a_refused_payout_goes_back_to_finance_and_a_new_approval_pays_it(
    fake_stripe, shop, approved_ticket, make_user, api_client, django_capture_on_commit_callbacks, fault, reason
):
    # given the provider refuses the refund
    fake_stripe.fail_next(fault)

    # when finance approves it
    ticket, request = approved_ticket("100.00")

    # then the entry failed, the amount is refundable again, and nothing was paid
    [entry] = RefundEntry.objects.filter(order=shop["order"])
    assert entry.status == "failed" and not fake_stripe.refunds
    assert order_refund_position(shop["order"]).refundable == Decimal("100.00")
    # and the request and the ticket are payment_failed with the provider's reason
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    assert reason in request.verification["detail"]
    assert ticket.status == Ticket.Status.PAYMENT_FAILED and reason in ticket.stop_detail
    # and finance sees it in the review queue (the API and the admin list)
    finance = api_client(shop["finance"])
    shown = finance.get(f"/api/approvals/{request.pk}").json()
    assert shown["status"] == "payment_failed" and reason in shown["payment_failure"]
    admin_user = make_user("boss", "finance", is_staff=True, is_superuser=True)
    web = Client()
    web.force_login(admin_user)
    page = web.get("/admin/approvals/approvalrequest/").content.decode()
    assert "Payment failed" in page and reason in page
    assert "1 refund(s) refused by the payment provider" in page

    # when finance files it again and approves the new request
    again = approval_request_payment_retry(request_id=request.pk, user=shop["finance"], note="customer updated card")
    assert again.idempotency_key != request.idempotency_key and again.args_hash == request.args_hash
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
    with django_capture_on_commit_callbacks(execute=True):
        approve(again, shop["finance"])

    # then it is paid once, and the ticket is refunded
    again.refresh_from_db()
    ticket.refresh_from_db()
    assert again.status == ApprovalRequest.Status.EXECUTED and len(fake_stripe.refunds) == 1
    assert ticket.status == Ticket.Status.REFUNDED
    assert order_refund_position(shop["order"]).refundable == Decimal("0.00")


def test_without_a_gateway_the_refund_waits_until_a_person_records_the_payout(
    shop, approved_ticket, settings, django_capture_on_commit_callbacks
):
    # given PAYMENT_GATEWAY unset (manual): finance pays by hand, so approval alone pays nothing
    settings.PAYMENT_GATEWAY = "manual"
    ticket, request = approved_ticket("30.00")
    entry = RefundEntry.objects.get(order=shop["order"])
    assert (entry.gateway, entry.status) == ("manual", "pending")
    assert request.status == ApprovalRequest.Status.APPROVED and ticket.status == Ticket.Status.APPROVED
    # when finance records the payout they made, then the refund is paid and the ticket refunded
    with django_capture_on_commit_callbacks(execute=True):
        ledger_refund_record_paid(entry_id=entry.pk, tenant=entry.tenant, reference="BANK-TRF-1", user=shop["finance"])
    approval_execute(request_id=request.pk)
    entry.refresh_from_db()
    ticket.refresh_from_db()
    request.refresh_from_db()
    assert (entry.status, entry.provider_ref) == ("succeeded", "BANK-TRF-1")
    assert request.status == ApprovalRequest.Status.EXECUTED and ticket.status == Ticket.Status.REFUNDED


def test_the_finance_queue_counts_unresolved_reconciliation_findings(shop, make_user):
    # given a difference between the ledger and the provider, not yet resolved
    ReconciliationFinding.objects.create(
        tenant=shop["order"].tenant,
        kind="missing_at_provider",
        currency="USD",
        detail="refund not found at the provider",
    )
    # when a finance user of the shop opens the queue
    web = Client()
    web.force_login(make_user("queue-reader", "finance", is_staff=True))
    page = web.get("/admin/approvals/approvalrequest/", follow=True).content.decode()
    # then it says so
    assert "1 unresolved payment reconciliation finding(s)" in page


def test_a_refusal_whose_receiver_failed_still_sends_the_request_back_to_finance(fake_stripe, shop, approved_ticket):
    # given the provider refuses, and the receiver of the ledger's signal breaks (its writes roll back alone)
    fake_stripe.fail_next("402")
    with mock.patch("approvals.ledger_events.approval_follow_refund_status", side_effect=RuntimeError("bug")):
        ticket, request = approved_ticket("30.00")
    # then the ledger recorded the refusal and the execution itself sent the request back to finance
    assert RefundEntry.objects.get(order=shop["order"]).status == "failed"
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED and "card_declined" in request.verification["detail"]
    assert ticket.status == Ticket.Status.PAYMENT_FAILED


def test_a_pending_refund_waits_until_the_sweep_polls_the_provider_then_the_ticket_is_refunded(
    fake_stripe, shop, approved_ticket, settings, django_capture_on_commit_callbacks
):
    # given the provider answers the refund is pending (a bank refund that takes days)
    fake_stripe.refund_status = "pending"
    ticket, request = approved_ticket("30.00")
    # then it counts, the request waits, the ticket is not refunded yet
    entry = RefundEntry.objects.get(order=shop["order"])
    assert entry.status == "pending" and entry.provider_ref
    assert order_refund_position(shop["order"]).refundable == Decimal("70.00")
    assert request.status == ApprovalRequest.Status.APPROVED and ticket.status == Ticket.Status.APPROVED
    # when the provider completes it (its webhook is lost) and the sweep polls pending payouts
    fake_stripe.refunds[entry.provider_ref]["status"] = "succeeded"
    settings.SWEEP_GRACE_SECONDS = 1
    with (
        mock.patch("django.utils.timezone.now", return_value=timezone.now() + timedelta(seconds=5)),
        django_capture_on_commit_callbacks(execute=True),
    ):
        done = outbox_sweep()
    # then the entry succeeded, the execution was enqueued again and verified it: refunded, one refund
    assert done["payouts_polled"] == 1
    entry.refresh_from_db()
    request.refresh_from_db()
    ticket.refresh_from_db()
    assert entry.status == "succeeded" and request.status == ApprovalRequest.Status.EXECUTED
    assert ticket.status == Ticket.Status.REFUNDED and len(fake_stripe.refunds) == 1


def test_finance_files_a_refused_payment_again_from_the_queue(fake_stripe, shop, approved_ticket, make_user):
    # given a refund the provider declined
    fake_stripe.fail_next("402")
    ticket, request = approved_ticket("30.00")
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    # when finance uses the queue's action on it
    web = Client()
    web.force_login(make_user("queue-finance", "finance", is_staff=True))
    web.post("/admin/approvals/approvalrequest/", {"action": "payment_file_again", "_selected_action": [request.pk]})
    # then a new request for the same refund waits for approval, and the ticket is back with finance
    request.refresh_from_db()
    again = request.replaced_by
    assert again is not None and again.status == ApprovalRequest.Status.PENDING
    assert (again.amount, again.args_hash) == (request.amount, request.args_hash)
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.APPROVAL_REQUIRED
