"""The gate's reasons are sentences a person reads (ticket page, queue, review page): no raw code
in quotes ("The agent recommends 'escalate'."). The codes on the verdict stay exactly as they
were: tests, replays and evals match them."""

from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from approvals.gate import Proposal, policy_current, policy_gate_evaluate
from ledger.models import Order, Tenant

pytestmark = pytest.mark.django_db

QUEUE = "/admin/approvals/approvalrequest/"


def _evaluate(order_id: str, *, refund_to: str | None = None, **proposal):
    order = Order.objects.select_related("customer", "tenant").get(
        tenant=Tenant.objects.get(slug="acme"), external_id=order_id
    )
    policy = policy_current(order.tenant)
    method = order.customer.payment_methods.get(external_id=refund_to) if refund_to else None
    fields = {"recommendation": "refund", "amount": None, "policy_version": policy.version, **proposal}
    return policy_gate_evaluate(
        order=order, policy=policy, proposal=Proposal(**fields), refund_to=method, now=timezone.now()
    )


@pytest.mark.parametrize(
    "recommendation,sentence",
    [
        ("escalate", "The agent asks a person to decide."),
        ("deny", "The agent recommends refusing the refund. A person decides."),
        ("request_info", "The agent asks for more information from the customer. A person decides."),
    ],
)
def test_what_the_agent_recommends_instead_of_a_refund_reads_as_a_sentence(demo, recommendation, sentence):
    # given an eligible order (ORD-5001) and a draft that does not recommend the refund
    verdict = _evaluate("ORD-5001", recommendation=recommendation)
    # then a person decides, the code is unchanged and the reason is the sentence
    assert verdict.outcome == "escalated"
    assert verdict.codes == [f"model_recommends_{recommendation}"]
    assert verdict.reason == sentence
    assert "'" not in verdict.reason and recommendation not in verdict.reason


def test_a_refusal_the_gate_does_not_share_says_why_in_words(demo):
    # given ORD-5002, placed 45 days ago (outside the 30-day window), and a draft that denies
    verdict = _evaluate("ORD-5002", recommendation="deny")
    # then the window is no fact that denies by itself: a person decides, told both things
    assert verdict.outcome == "escalated" and verdict.codes == ["model_recommends_deny"]
    assert verdict.reason.startswith("The agent recommends refusing the refund. Order ORD-5002 was placed 45 days")
    assert verdict.reason.endswith("A person decides.")


def test_a_recommendation_without_words_is_never_echoed_raw_in_quotes(demo):
    # given a model output that slipped past its schema (the gate is pure: it must still read well)
    verdict = _evaluate("ORD-5001", recommendation="refund_twice_to_me")
    assert verdict.codes == ["model_recommends_refund_twice_to_me"]
    assert verdict.reason == "The agent does not recommend a refund (refund twice to me). A person decides."


def test_a_draft_that_changes_the_destination_names_both_in_words(demo):
    # given a ticket for the original payment and a draft that sends the refund to a gift card
    verdict = _evaluate("ORD-5001", amount=Decimal("120.00"), destination="gift_card")
    assert verdict.codes == ["destination_mismatch"]
    assert verdict.reason == (
        "The draft sends the refund to a gift card, but the ticket asks for the original payment method "
        "(card_4242): a person decides."
    )


def test_a_destination_the_policy_does_not_allow_is_named_in_words(demo):
    # given a whole-order refund to the customer's gift card: refund-policy-v4 allows only the original
    verdict = _evaluate("ORD-5001", amount=Decimal("120.00"), refund_to="gift_card_cust-1001")
    assert verdict.codes == ["destination_not_allowed"]
    assert verdict.reason == (
        "Refunds to a gift card (gift_card_cust-1001) are not allowed by refund-policy-v4 for full refunds "
        "(allowed: the original payment method)."
    )


def test_the_review_and_confirm_pages_name_the_destination_in_words(demo, user, approval_request_make):
    request = approval_request_make(order="ORD-5001")
    finance = Client()
    finance.force_login(user("acme-finance"))

    review = finance.get(f"{QUEUE}{request.pk}/change/").content.decode()
    confirm = finance.get(f"{QUEUE}{request.pk}/decide/approve/").content.decode()

    assert 'id="ra-destination">the original payment method (card_4242)<' in review
    assert 'id="ra-confirm-destination">the original payment method (card_4242)<' in confirm
    assert "to <strong>original</strong>" not in review
