"""approval_request_create is keyed: a resumed run asking again gets the same request back.
The order is the 120.00 one of the approvals conftest's shop."""

from decimal import Decimal

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from approvals.models import ApprovalRequest
from approvals.services.requests import approval_request_create
from ledger.exceptions import InvalidInput
from ledger.models import Order


def eligible(order):
    order = Order.objects.select_related("customer", "tenant").get(pk=order.pk)
    policy = policy_current(order.tenant)
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        proposal=Proposal(recommendation="refund", amount=None, policy_version=policy.version),
        now=timezone.now(),
    )
    return order, policy, verdict


def test_the_same_key_returns_the_request_already_made_and_writes_nothing(orders):
    # given a request made under a key
    order, policy, verdict = eligible(orders["120.00"])
    first, created = approval_request_create(order=order, policy=policy, verdict=verdict, idempotency_key="k-1")
    assert created
    # when the same key is asked again, inside the caller's transaction (as the agent's decision does)
    with transaction.atomic():
        again, created_again = approval_request_create(
            order=order, policy=policy, verdict=verdict, idempotency_key="k-1"
        )
        # then the caller's transaction is still usable
        assert ApprovalRequest.objects.count() == 1
    assert (again.pk, created_again) == (first.pk, False)


def test_the_common_path_is_one_insert_in_a_savepoint(orders, django_assert_num_queries):
    order, policy, verdict = eligible(orders["120.00"])
    with transaction.atomic(), django_assert_num_queries(3):  # SAVEPOINT, INSERT, RELEASE
        request, created = approval_request_create(order=order, policy=policy, verdict=verdict, idempotency_key="k-2")
    assert created and request.amount == Decimal("120.00")


def test_another_integrity_error_is_not_taken_for_a_replay(orders):
    order, policy, verdict = eligible(orders["120.00"])
    verdict.allowed_amount = Decimal("-1.00")  # the database refuses a non-positive amount
    with pytest.raises(IntegrityError):
        approval_request_create(order=order, policy=policy, verdict=verdict, idempotency_key="k-3")
    assert not ApprovalRequest.objects.filter(idempotency_key="k-3").exists()


def test_a_fresh_key_is_one_insert_without_a_savepoint(orders, django_assert_num_queries):
    # given a caller whose key cannot exist yet (the agent's decision, keyed by its new draft)
    order, policy, verdict = eligible(orders["120.00"])
    with transaction.atomic():
        with django_assert_num_queries(1):
            request, created = approval_request_create(
                order=order, policy=policy, verdict=verdict, idempotency_key="draft-key", fresh_key=True
            )
        assert created and request.amount == Decimal("120.00")
    # and a duplicate would not be taken for a replay: it fails the caller's transaction
    with pytest.raises(IntegrityError), transaction.atomic():
        approval_request_create(
            order=order, policy=policy, verdict=verdict, idempotency_key="draft-key", fresh_key=True
        )


def test_the_gate_escalates_an_amount_finer_than_the_orders_currency(make_order, policy):
    # given a 1000 JPY order (yen have no minor unit)
    order = make_order("1000", currency="JPY", external_id="ORD-JPY", days_old=3)
    order = Order.objects.select_related("customer", "tenant").get(pk=order.pk)
    policy = policy_current(order.tenant)
    for drafted, requested in ((Decimal("120.50"), None), (None, Decimal("120.50"))):
        # when the model drafts, or the customer asked for, 120.50 yen
        verdict = policy_gate_evaluate(
            order=order,
            policy=policy,
            proposal=Proposal(recommendation="refund", amount=drafted, policy_version=policy.version),
            requested_amount=requested,
            now=timezone.now(),
        )
        # then no amount is allowed: a person decides
        assert (verdict.outcome, verdict.allowed_amount, verdict.codes) == ("escalated", None, ["amount_precision"])
    # while 120 yen is eligible as it stands
    verdict = policy_gate_evaluate(
        order=order,
        policy=policy,
        proposal=Proposal(recommendation="refund", amount=Decimal("120"), policy_version=policy.version),
        now=timezone.now(),
    )
    assert (verdict.outcome, verdict.allowed_amount) == ("approval_required", Decimal("120"))


def test_no_request_is_made_for_an_amount_its_currency_cannot_pay(make_order, policy):
    # given an eligible verdict on a JPY order whose amount was altered past the gate to 120.50
    order, policy, verdict = eligible(make_order("1000", currency="JPY", external_id="ORD-JPY", days_old=3))
    verdict.allowed_amount = Decimal("120.50")
    # when a request is made from it
    with pytest.raises(InvalidInput) as refused:
        approval_request_create(order=order, policy=policy, verdict=verdict, idempotency_key="k-jpy")
    # then it is refused, and nothing is written
    assert refused.value.code == "amount_precision"
    assert not ApprovalRequest.objects.exists()
