"""Dual control that cannot be split across requests, and decisions and
executions that re-run the gate's checks on the request's exact args against current facts."""

from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.exceptions import ApprovalConflict
from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from ledger.importing import orders_import
from ledger.models import PaymentMethod, RefundEntry
from ledger.services import ledger_refund_issue
from tests.factories import manual_payout_record

pytestmark = pytest.mark.django_db


def approve(request, user):
    return approval_request_decide(request_id=request.pk, user=user, decision="approve", args_hash=request.args_hash)


def reimport(order, **changes):
    """The shop re-imports `order` with `changes` (e.g. status='cancelled'), as import_orders would."""
    row = {
        "id": order.external_id,
        "customer": order.customer.external_id,
        "total": str(order.total),
        "currency": order.currency,
        "placed_at": order.placed_at.isoformat(),
        "status": order.status,
        "items": [
            {"id": i.item_id, "name": i.name, "price": str(i.price), "quantity": i.quantity}
            for i in order.items.order_by("line_no")
        ],
    }
    row.update(changes)
    return orders_import(data={"tenant": order.tenant.slug, "orders": [row]})


# --- 1. dual control counts the order's other refunds ------------------------------------------


@pytest.fixture
def split_order(make_order, policy):
    """A 1000.00 order; the policy wants two approvers above 500.00."""
    assert policy.two_approver_threshold == Decimal("500.00")
    return make_order("1000.00", external_id="ORD-SPLIT", items=[("ITEM-A", "500.00", 2)])


def test_two_halves_of_one_order_need_two_distinct_approvers(
    split_order, people, approval_request_make, django_capture_on_commit_callbacks
):
    # given two tickets for 500.00 each on the 1000.00 order
    first = approval_request_make(order=split_order, filer=people["support"], amount="500.00", ticket_ref=1)
    second = approval_request_make(order=split_order, filer=people["support"], amount="500.00", ticket_ref=2)
    # then the second counts the first: together they are above the threshold
    assert (first.required_approvals, second.required_approvals) == (1, 2)

    # when one finance user approves both
    with django_capture_on_commit_callbacks(execute=True):
        approve(first, people["finance"])
        approve(second, people["finance"])

    # then neither moved money: the first, decided after the second existed, needs two as well
    assert not RefundEntry.objects.filter(order=split_order).exists()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.required_approvals) == ("pending", 2)
    assert (second.status, second.required_approvals) == ("pending", 2)


def test_one_finance_user_alone_never_moves_the_whole_order(
    split_order, people, approval_request_make, django_capture_on_commit_callbacks
):
    # given the two halves, the first approved by two people and executed
    first = approval_request_make(order=split_order, filer=people["support"], amount="500.00", ticket_ref=1)
    second = approval_request_make(order=split_order, filer=people["support"], amount="500.00", ticket_ref=2)
    with django_capture_on_commit_callbacks(execute=True):
        approve(first, people["finance"])
        approve(first, people["finance2"])
    first = manual_payout_record(first)  # the manual gateway: finance paid by hand
    assert first.status == "executed"

    # when finance alone approves the second half (its facts changed: replaced first)
    with pytest.raises(ApprovalConflict) as raised:
        approve(second, people["finance"])
    replacement = ApprovalRequest.objects.get(pk=raised.value.details["replaced_by"])
    with django_capture_on_commit_callbacks(execute=True):
        approve(replacement, people["finance"])

    # then the replacement counts the executed 500.00: it still waits for a second approver
    replacement.refresh_from_db()
    assert (replacement.status, replacement.required_approvals) == ("pending", 2)
    total = sum(e.amount for e in RefundEntry.objects.filter(order=split_order))
    assert total == Decimal("500.00")


def test_an_external_refund_counts_toward_the_threshold(split_order, people, approval_request_make):
    # given 600.00 already refunded by the shop itself
    ledger_refund_issue(
        order=split_order,
        amount="600.00",
        currency="USD",
        idempotency_key="ext-1",
        source=RefundEntry.Source.IMPORT,
        reason="Refunded by the shop.",
    )
    # when a request for 100.00 more is made
    request = approval_request_make(order=split_order, filer=people["support"], amount="100.00")
    # then it needs two approvers: it takes the order's refunds to 700.00
    assert request.required_approvals == 2


def test_a_small_order_still_needs_one_approver(orders, file_request):
    request = file_request("120.00")
    assert request.required_approvals == 1


# --- 2. every fact re-checked at decision and execution time -----------------------------------


def test_approving_a_request_on_an_order_reimported_as_cancelled_is_refused(file_request, orders, people):
    # given a pending request, then the shop re-imports the order as cancelled
    request = file_request("120.00")
    reimport(orders["120.00"], status="cancelled")

    # when finance approves
    with pytest.raises(ApprovalConflict) as raised:
        approve(request, people["finance"])

    # then 409 with the reason, the request invalidated, no replacement (not eligible), nothing moved
    assert raised.value.code == "approval_invalidated"
    assert "cancelled" in raised.value.message
    request.refresh_from_db()
    assert request.status == "invalidated" and request.replaced_by is None
    assert "cancelled" in request.decision_note
    assert not RefundEntry.objects.filter(order=orders["120.00"]).exists()


def test_executing_a_request_on_an_order_cancelled_after_approval_moves_nothing(
    file_request, orders, people, django_capture_on_commit_callbacks
):
    # given an approved request whose execution has not run yet
    request = file_request("120.00")
    with django_capture_on_commit_callbacks(execute=False):
        approve(request, people["finance"])
    assert ApprovalRequest.objects.get(pk=request.pk).status == "approved"
    # and the order re-imported as cancelled meanwhile
    reimport(orders["120.00"], status="cancelled")

    # when the execution runs
    executed = approval_execute(request_id=request.pk)

    # then it is invalidated, nothing was written
    assert executed.status == "invalidated"
    assert "cancelled" in executed.decision_note
    assert not RefundEntry.objects.filter(order=orders["120.00"]).exists()


def test_a_request_past_the_window_is_invalidated_at_decision_time(file_request, orders, people):
    # given a request on a 12-day-old order, decided 20 days later (the window is 30 days)
    request = file_request("120.00")
    later = timezone.now() + timezone.timedelta(days=20)
    ApprovalRequest.objects.filter(pk=request.pk).update(expires_at=later + timezone.timedelta(days=1))
    with pytest.raises(ApprovalConflict) as raised:
        approval_request_decide(
            request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash, now=later
        )
    assert "window" in raised.value.message
    assert ApprovalRequest.objects.get(pk=request.pk).status == "invalidated"


def test_a_destination_no_longer_the_customers_is_invalidated(file_request, orders, people, gift_card, make_user):
    # given a request to the customer's gift card, which then moves to another customer
    request = file_request("50.00", items=["ITEM-2"], destination="gift_card", refund_to="gift_card_1")
    other = type(gift_card.customer).objects.create(
        tenant=gift_card.customer.tenant, external_id="CUST-OTHER", name="Other", email="other@example.com"
    )
    PaymentMethod.objects.filter(pk=gift_card.pk).update(customer=other)
    # when finance approves: 409, nothing moved
    with pytest.raises(ApprovalConflict) as raised:
        approve(request, people["finance"])
    assert "destination" in raised.value.message
    assert not RefundEntry.objects.filter(order=orders["50.00"]).exists()


def test_items_refunded_elsewhere_invalidate_an_item_request(file_request, orders, people):
    # given a request for the socks, which the shop then refunds itself
    order = orders["200.00"]
    request = file_request("200.00", items=["ITEM-6"])
    ledger_refund_issue(
        order=order,
        amount="25.00",
        currency="USD",
        idempotency_key="ext-socks",
        item_ids=["ITEM-6", "ITEM-6"],
        source=RefundEntry.Source.IMPORT,
        reason="Shop refund.",
    )
    with pytest.raises(ApprovalConflict):
        approve(request, people["finance"])
    assert ApprovalRequest.objects.get(pk=request.pk).status == "invalidated"
    assert RefundEntry.objects.filter(order=order).count() == 1
