"""Before its first payout a payment reference (imported with the order, never checked before) is
retrieved from the provider (the fake Stripe server) and checked: on this shop's account and the
shop's, in the order's currency, able to return the amount. Otherwise nothing is paid and the
refund goes back to finance with the reason."""

from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest
from ledger.models import RefundEntry
from ledger.selectors import order_refund_position
from refundagent.models import Ticket
from refundagent.tests.payments_support import ticket_awaiting_approval

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(policy, make_order, make_user):
    return {
        "order": make_order("100.00", external_id="ORD-REF", payment_ref="pi_checked"),
        "support": make_user("support", "support"),
        "finance": make_user("finance", "finance"),
    }


def approve_by_api(api_client, shop, request, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_client(shop["finance"]).post(
            f"/api/approvals/{request.pk}/decision",
            {"decision": "approve", "args_hash": request.args_hash},
            content_type="application/json",
        )
    assert answer.status_code == 200, answer.content
    request.refresh_from_db()
    return request


def assert_back_with_finance_unpaid(fake_stripe, shop, ticket, request, code):
    assert fake_stripe.posts() == [] and not fake_stripe.refunds  # never paid against it
    [entry] = RefundEntry.objects.filter(order=shop["order"])
    assert entry.status == "failed"
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED and code in request.verification["detail"]
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED and code in ticket.stop_detail
    assert order_refund_position(shop["order"]).refundable == Decimal("100.00")


def test_a_checked_payment_is_retrieved_on_the_shops_account_before_the_refund(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks
):
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k1")
    request = approve_by_api(api_client, shop, request, django_capture_on_commit_callbacks)
    assert request.status == ApprovalRequest.Status.EXECUTED
    paths = [(c["method"], c["path"]) for c in fake_stripe.calls]
    assert paths.index(("GET", "/v1/payment_intents/pi_checked")) < paths.index(("POST", "/v1/refunds"))


@pytest.mark.parametrize("shop_account", ["", "acct_shop"])
def test_a_payment_the_provider_does_not_have_on_this_shops_account_is_never_refunded(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks, shop_account
):
    # given the shop's payment exists only on another account (another shop's Connect account)
    tenant = shop["order"].tenant
    tenant.stripe_account = shop_account
    tenant.save()
    fake_stripe.payments.clear()
    fake_stripe.add_payment("pi_checked", amount=10000, account="acct_someone_else")
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k2")
    # when finance approves
    request = approve_by_api(api_client, shop, request, django_capture_on_commit_callbacks)
    # then nothing is paid and it is back with finance, saying why
    assert_back_with_finance_unpaid(fake_stripe, shop, ticket, request, "payment_ref_unknown")


@pytest.mark.parametrize(("metadata", "destination"), [({"tenant": "another-shop"}, ""), ({}, "acct_another_shop")])
def test_another_shops_payment_on_a_shared_platform_account_is_never_refunded(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks, metadata, destination
):
    # given shops sharing the platform account, and this order's reference is another shop's payment
    fake_stripe.payments.clear()
    fake_stripe.add_payment("pi_checked", amount=10000, metadata=metadata, destination=destination)
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k3")
    request = approve_by_api(api_client, shop, request, django_capture_on_commit_callbacks)
    assert_back_with_finance_unpaid(fake_stripe, shop, ticket, request, "payment_ref_foreign")


def test_a_payment_in_another_currency_is_never_refunded(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks
):
    fake_stripe.payments.clear()
    fake_stripe.add_payment("pi_checked", amount=10000, currency="eur")
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k4")
    request = approve_by_api(api_client, shop, request, django_capture_on_commit_callbacks)
    assert_back_with_finance_unpaid(fake_stripe, shop, ticket, request, "payment_ref_currency")


def test_a_payment_that_cannot_return_the_amount_is_never_asked_to(
    fake_stripe, shop, api_client, django_capture_on_commit_callbacks
):
    # given 80.00 of the 100.00 payment was refunded at the provider already (the ledger has not heard)
    fake_stripe.add_refund(payment_intent="pi_checked", amount=8000, created=int(timezone.now().timestamp()))
    ticket, request = ticket_awaiting_approval(order=shop["order"], filer=shop["support"], amount="30.00", key="k5")
    request = approve_by_api(api_client, shop, request, django_capture_on_commit_callbacks)
    # then the 30.00 is not sent against a charge that can return 20.00
    assert fake_stripe.posts() == []
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    assert "payment_ref_exceeds" in request.verification["detail"] and "20.00" in request.verification["detail"]
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED
