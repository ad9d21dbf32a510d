"""approvals.services.proposals without the agent app: a person's proposal is an ordinary approval request
(origin human, the proposer as maker), the gate waives only the policy's waivable rules, and the
evaluator refuses an exception that did not keep to them."""

from decimal import Decimal

import pytest
from django.utils import timezone

from approvals.exceptions import ApprovalConflict
from approvals.gate import Outcome, Proposal, policy_gate_evaluate
from approvals.models import ApprovalRequest, DecisionRecord
from approvals.services.decisions import approval_request_decide
from approvals.services.proposals import approval_proposal_create
from approvals.services.verification import approval_verdict
from ledger.exceptions import InvalidInput
from ledger.services import ledger_refund_issue

pytestmark = pytest.mark.django_db


def test_the_gate_waives_only_what_it_is_told(policy, make_order):
    # given an order 60 days old (outside the 30-day window) and one that is cancelled
    late, cancelled = make_order("100.00", days_old=60), make_order("100.00", status="cancelled")
    proposal = Proposal(recommendation="refund", amount=Decimal("50.00"), policy_version=policy.version)
    now = timezone.now()
    # then without a waiver both escalate, with the matching waiver each is eligible, with the other one not
    assert policy_gate_evaluate(order=late, policy=policy, proposal=proposal, now=now).codes == ["outside_window"]
    waived = policy_gate_evaluate(order=late, policy=policy, proposal=proposal, now=now, waive=frozenset({"window"}))
    assert (waived.outcome, waived.allowed_amount) == (Outcome.APPROVAL_REQUIRED, Decimal("50.00"))
    other = policy_gate_evaluate(
        order=cancelled, policy=policy, proposal=proposal, now=now, waive=frozenset({"window"})
    )
    assert other.codes == ["status_not_eligible"]


def test_an_exception_the_policy_data_does_not_allow_is_refused(policy, make_order, make_user):
    # given a policy whose waivable rules are only the order status, and an out-of-window order
    type(policy).objects.filter(pk=policy.pk).update(waivable_rules=["order_status"])
    order = make_order("100.00", days_old=60)
    # when support proposes an exception
    with pytest.raises(InvalidInput) as refused:
        approval_proposal_create(
            user=make_user("s", "support"), order=order, amount="50.00", reason="Goodwill.", exception=True
        )
    # then the window still holds and nothing is written
    assert refused.value.code == "outside_window"
    assert not ApprovalRequest.objects.exists()


def test_the_evaluator_refuses_an_exception_approved_by_fewer_than_two(policy, make_order, make_user):
    # given an executed exception whose stored request was lowered to one approver
    order = make_order("100.00", days_old=60)
    request = approval_proposal_create(
        user=make_user("s", "support"), order=order, amount="50.00", reason="Goodwill.", exception=True
    )
    assert (request.origin, request.required_approvals, request.waived_rules) == ("human", 2, ["window"])
    ApprovalRequest.objects.filter(pk=request.pk).update(required_approvals=1)
    request.refresh_from_db()
    ledger_refund_issue(
        order=order,
        amount="50.00",
        currency="USD",
        idempotency_key=request.idempotency_key,
        approval_ref=str(request.pk),
        reason="test",
    )
    # when the evaluator checks it
    verdict = approval_verdict(request=request)
    # then the exception check fails (the window itself was waived, so that check is not made)
    assert not verdict["ok"]
    assert "exception_within_policy" in verdict["failed"]
    assert "within_policy_window" not in [c["name"] for c in verdict["checks"]]


def test_a_proposal_replayed_with_its_key_is_one_request_and_one_record(policy, make_order, make_user):
    # given an exception proposed with an idempotency key
    order, support = make_order("100.00", days_old=60), make_user("s", "support")
    first = approval_proposal_create(
        user=support, order=order, amount="50.00", reason="Goodwill.", exception=True, idempotency_key="p-1"
    )
    # when the same proposal is made again with that key (a retried request)
    again = approval_proposal_create(
        user=support, order=order, amount="50.00", reason="Goodwill.", exception=True, idempotency_key="p-1"
    )
    # then it is the same request, and the decision is recorded once, with its waiver and proposer
    assert again.pk == first.pk
    record = DecisionRecord.objects.get()
    assert (record.source, record.waived_rules, record.proposed_by, record.required_approvals) == (
        "proposal",
        ["window"],
        support,
        2,
    )


def test_the_rechecks_before_approval_record_no_decision(people, make_order, django_capture_on_commit_callbacks):
    # given a person's exception on a 100.00 order outside the window (one recorded decision)
    order = make_order("100.00", days_old=60)
    request = approval_proposal_create(
        user=people["support"], order=order, amount="100.00", reason="Goodwill.", exception=True
    )
    assert DecisionRecord.objects.count() == 1

    # when finance approves it (the gate re-checks it first, with the window waived as approved)
    approval_request_decide(
        request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
    )
    # and the shop then refunds 30.00 by hand, so the second approval's re-check invalidates and replaces it
    ledger_refund_issue(order=order, amount="30.00", currency="USD", idempotency_key="shop:late", source="import")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApprovalConflict):
        approval_request_decide(
            request_id=request.pk, user=people["finance2"], decision="approve", args_hash=request.args_hash
        )

    # then the re-checks and the replacement decided the one recorded decision again: still one record
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED and request.replaced_by is not None
    assert request.replaced_by.waived_rules == ["window"]
    assert DecisionRecord.objects.count() == 1
