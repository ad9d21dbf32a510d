"""One approval pays every tender leg it names: an order of 120.00 paid 20.00 by gift card and
100.00 by card, refunded in full, is one request with two legs (store credit 20.00, a Stripe refund
of 100.00 on the card's PaymentIntent), written in one transaction, each under its own key, each
checked by the evaluator; a leg the provider refuses goes back to finance alone."""

from decimal import Decimal
from unittest import mock

import pytest

from approvals.exceptions import ApprovalConflict
from approvals.models import ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from approvals.services.refile import approval_request_payment_retry
from approvals.services.verification import approval_verify
from ledger.exceptions import PaymentProviderUnavailable, RefundRefused
from ledger.models import PaymentMethod, RefundEntry
from ledger.selectors import order_refund_position
from ledger.services import canonical_hash, ledger_refund_correct, ledger_refund_issue
from refundagent.models import Ticket
from refundagent.services import ticket_refund_propose
from refundagent.tests.payments_support import order_paid, ticket_gated
from refundagent.tests.test_late_provider_failure import post_event, refund_event

pytestmark = pytest.mark.django_db


# The shop's people this module works with (conftest.STAFF).
PEOPLE = ("support", "finance", "finance2")


def approve(request, finance, capture, *, execute=True):
    with capture(execute=execute):
        approval_request_decide(request_id=request.pk, user=finance, decision="approve", args_hash=request.args_hash)
    request.refresh_from_db()
    return request


def test_the_whole_order_is_refunded_as_store_credit_and_a_card_refund(
    fake_stripe, split_order, gift_card, people, django_capture_on_commit_callbacks
):
    # given the whole 120.00 asked back to the order's own payments
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="whole")
    gift_payment, card_payment = split_order.payments.order_by("id")

    # then one request names both legs, inside its hash: the gift card first (payments in the order made)
    assert verdict.codes == [] and request.amount == Decimal("120.00")
    assert request.args["legs"] == [
        {
            "payment": gift_payment.pk,
            "method": "gift_card_9",
            "kind": "gift_card",
            "amount": "20.00",
            "returnable": "20.00",
        },
        {"payment": card_payment.pk, "method": "card_1", "kind": "card", "amount": "100.00", "returnable": "100.00"},
    ]
    assert request.args_hash == canonical_hash(request.args)

    # when finance approves it
    request = approve(request, people["finance"], django_capture_on_commit_callbacks)

    # then the gift card got 20.00 of store credit, and the card's PaymentIntent one refund of 100.00 under the leg's key
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00")
    [call] = fake_stripe.posts()
    assert (call["params"]["payment_intent"], call["params"]["amount"]) == ("pi_split", "10000")
    assert call["idempotency_key"] == "whole:leg1"
    entries = list(RefundEntry.objects.filter(order=split_order).order_by("id"))
    assert [(e.payment_id, e.gateway, e.status, e.amount, e.idempotency_key) for e in entries] == [
        (gift_payment.pk, "store_credit", "succeeded", Decimal("20.00"), "whole"),
        (card_payment.pk, "stripe", "succeeded", Decimal("100.00"), "whole:leg1"),
    ]
    # and the evaluator checked each leg against the ledger and the provider
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    checks = request.verification["checks"]
    assert {(c["name"], c.get("leg")) for c in checks} >= {
        ("leg_payment", 1),
        ("leg_payment", 2),
        ("leg_amount", 1),
        ("leg_amount", 2),
        ("leg_provider_payment", 2),
        ("provider_amount", 2),
        ("legs_sum", None),
        ("one_entry_per_leg", None),
    }
    # and the ticket says the whole amount went back
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED and "120.00" in ticket.customer_reply


def test_the_evaluator_catches_a_leg_paid_to_another_payment(
    fake_stripe, split_order, people, django_capture_on_commit_callbacks, make_order
):
    make_order("100.00", external_id="ORD-ELSE", payment_ref="pi_elsewhere")
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="else")
    # when the card leg's refund is made on another payment than the approved one
    with mock.patch("ledger.payouts.refund_entry_payment_ref", return_value="pi_elsewhere"):
        request = approve(request, people["finance"], django_capture_on_commit_callbacks)
    # then the evaluator fails that leg, and the ticket is not refunded
    assert request.status == ApprovalRequest.Status.FAILED
    failed = [(c["name"], c.get("leg")) for c in request.verification["checks"] if not c["ok"]]
    assert failed == [("leg_provider_payment", 2)]
    ticket.refresh_from_db()
    assert ticket.status != Ticket.Status.REFUNDED


def test_the_evaluator_catches_a_leg_of_another_amount(
    fake_stripe, split_order, people, django_capture_on_commit_callbacks
):
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="amt")
    request = approve(request, people["finance"], django_capture_on_commit_callbacks)
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    # when the gift card leg is corrected to 10.00 in the ledger and the evaluator reads it again
    gift_entry = RefundEntry.objects.get(idempotency_key="amt")
    ledger_refund_correct(entry=gift_entry, new_amount="10.00", reason="operator correction")
    verdict = approval_verify(request_id=request.pk)
    # then the first leg's amount and the sum fail; the card leg still verifies
    failed = {(c["name"], c.get("leg")) for c in verdict["checks"] if not c["ok"]}
    assert failed == {("leg_amount", 1), ("amount_exact", None)}
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.FAILED


def test_the_provider_refusing_the_card_leg_sends_only_that_leg_back_to_finance(
    fake_stripe, split_order, gift_card, people, django_capture_on_commit_callbacks
):
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="refuse")
    card_leg = request.args["legs"][1]
    # when the provider declines the card leg
    fake_stripe.fail_next("402")
    request = approve(request, people["finance"], django_capture_on_commit_callbacks)

    # then that leg is failed, the gift card leg stands, and the request and ticket go back to finance
    gift_entry, card_entry = RefundEntry.objects.filter(order=split_order).order_by("id")
    assert (gift_entry.status, card_entry.status) == ("succeeded", "failed")
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00")
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED and request.ledger_entry_id == card_entry.pk
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED

    # when finance files it again: only the refused leg, exactly as approved, under a new key
    again = approval_request_payment_retry(request_id=request.pk, user=people["finance2"])
    assert again.amount == Decimal("100.00") and again.args["amount"] == "100.00"
    assert again.args["legs"] == [card_leg] and again.args["destination_method"] == "card_1"
    assert again.args_hash == canonical_hash(again.args) and again.idempotency_key == "refuse:r1"
    again = approve(again, people["finance"], django_capture_on_commit_callbacks)

    # then the card is refunded once, the gift card never again
    assert again.status == ApprovalRequest.Status.EXECUTED, again.verification
    posts = fake_stripe.posts()
    assert [(p["idempotency_key"], p["params"]["amount"]) for p in posts] == [
        ("refuse:leg1", "10000"),
        ("refuse:r1", "10000"),
    ]
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00")
    assert RefundEntry.objects.filter(order=split_order, payment__method="gift_card").count() == 1
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED


def test_a_retry_after_a_crash_between_two_card_legs_pays_neither_twice(
    fake_stripe, tenant, customer, card, people, django_capture_on_commit_callbacks
):
    other_card = PaymentMethod.objects.create(customer=customer, external_id="card_2", kind="card", last4="1111")
    order = order_paid(
        tenant, customer, "ORD-TWO-CARDS", (card, "60.00", "pi_first"), (other_card, "60.00", "pi_second")
    )
    ticket, verdict, request = ticket_gated(order=order, filer=people["support"], amount="120.00", key="two")
    request = approve(request, people["finance"], django_capture_on_commit_callbacks, execute=False)
    # when the first leg is refunded and the provider is unreachable for the second (every retry)
    fake_stripe.fail_next("none", "500", "500", "500")
    with pytest.raises(PaymentProviderUnavailable):
        approval_execute(request_id=request.pk)
    first, second = RefundEntry.objects.filter(order=order).order_by("id")
    assert (first.status, second.status) == ("succeeded", "pending")
    # and the execution runs again (the task's retry), twice
    approval_execute(request_id=request.pk)
    approval_execute(request_id=request.pk)

    # then each charge was refunded exactly once, under its own leg's key
    assert sorted((r["payment_intent"], r["amount"]) for r in fake_stripe.refunds.values()) == [
        ("pi_first", 6000),
        ("pi_second", 6000),
    ]
    assert {p["idempotency_key"] for p in fake_stripe.posts()} == {"two", "two:leg1"}
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    assert RefundEntry.objects.filter(order=order).count() == 2


def test_two_requests_racing_for_one_payments_returnable_never_overdraw_it(
    fake_stripe, split_order, gift_card, people, django_capture_on_commit_callbacks
):
    # given two tickets each asking 20.00, both named onto the gift card payment (the first able to return it)
    _, _, first = ticket_gated(order=split_order, filer=people["support"], amount="20.00", key="race-a")
    _, _, second = ticket_gated(order=split_order, filer=people["support"], amount="20.00", key="race-b")
    gift_payment = split_order.payments.get(method="gift_card")
    assert first.args["legs"][0]["payment"] == second.args["legs"][0]["payment"] == gift_payment.pk
    # both approved before either runs
    first = approve(first, people["finance"], django_capture_on_commit_callbacks, execute=False)
    second = approve(second, people["finance"], django_capture_on_commit_callbacks, execute=False)
    # when both executions run
    approval_execute(request_id=first.pk)
    approval_execute(request_id=second.pk)
    # then the gift card returned 20.00 once; the second is invalidated (its facts changed), not paid
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00")
    assert RefundEntry.objects.filter(order=split_order, payment=gift_payment).count() == 1
    second.refresh_from_db()
    assert second.status == ApprovalRequest.Status.INVALIDATED
    # and the ledger itself refuses a leg on that payment even when the check above is skipped
    with pytest.raises(RefundRefused) as refused:
        ledger_refund_issue(
            order=split_order,
            amount="5.00",
            currency="USD",
            idempotency_key="race-c",
            destination=gift_card,
            payment=gift_payment,
            approval_ref="0",
        )
    assert refused.value.code == "refund_exceeds_payment"


def test_a_payment_that_can_return_less_by_payout_time_refuses_every_leg(
    fake_stripe, tenant, customer, gift_card, card, people, django_capture_on_commit_callbacks
):
    # given an order of 150.00 of which 120.00 was recorded paid (so the order could still refund
    # more than the card can return), and its 120.00 approved as two legs
    split_order = order_paid(
        tenant, customer, "ORD-MORE", (gift_card, "20.00", ""), (card, "100.00", "pi_more"), total="150.00"
    )
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="late")
    assert len(request.args["legs"]) == 2
    request = approve(request, people["finance"], django_capture_on_commit_callbacks, execute=False)
    # given 10.00 refunded on the card elsewhere (an operator, by hand) after the approval
    ledger_refund_issue(
        order=split_order,
        amount="10.00",
        currency="USD",
        idempotency_key="by-hand",
        destination=card,
        source=RefundEntry.Source.MANUAL,
    )
    # when the execution runs even past the facts check (the ledger is the backstop)
    with mock.patch("approvals.services.execution.approval_facts_changed", return_value=""):
        approval_execute(request_id=request.pk)
    # then nothing of the request was written (all legs or none), nothing sent to the provider
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.FAILED
    assert request.verification["error"] == "refund_exceeds_payment"
    assert not RefundEntry.objects.filter(approval_ref=str(request.pk)).exists()
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("0.00") and fake_stripe.posts() == []


def test_a_payment_that_can_return_less_by_payout_time_invalidates_the_request(
    fake_stripe, split_order, card, people, django_capture_on_commit_callbacks
):
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="late2")
    request = approve(request, people["finance"], django_capture_on_commit_callbacks, execute=False)
    ledger_refund_issue(
        order=split_order,
        amount="10.00",
        currency="USD",
        idempotency_key="by-hand-2",
        destination=card,
        source=RefundEntry.Source.MANUAL,
    )
    approval_execute(request_id=request.pk)
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED
    assert "refundable" in request.decision_note and fake_stripe.posts() == []
    assert not RefundEntry.objects.filter(approval_ref=str(request.pk)).exists()


def test_an_item_refund_no_one_payment_can_return_goes_to_a_person(
    fake_stripe, tenant, customer, card, gift_card, people
):
    order = order_paid(tenant, customer, "ORD-ITEMS", (gift_card, "20.00", ""), (card, "100.00", "pi_items"))
    # the split is refused for named items, even where the payments together could return them
    from approvals.gate import _refund_legs
    from ledger.selectors import order_payments_returnable

    legs, why = _refund_legs(
        order=order,
        destination="original",
        method=None,
        amount=Decimal("110.00"),
        payments=order_payments_returnable(order),
        items=["ITEM-1"],
    )
    assert legs == [] and "item refund is not split" in why


def test_the_review_page_lists_the_legs_before_approval_and_each_leg_executed(
    fake_stripe, split_order, people, client, django_capture_on_commit_callbacks
):
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="screen")
    client.force_login(people["finance"])
    review = f"/admin/approvals/approvalrequest/{request.pk}/change/"
    page = client.get(review).content.decode()
    # before approving: where each part of the money goes (the card's provider reference is not shown)
    assert "leg 1: <strong>20.00 USD</strong> to Gift Card gift_card_9 (store credit" in page
    assert "leg 2: <strong>100.00 USD</strong> to Card card_1 (refund to the payment" in page
    assert "pi_split" not in page
    request = approve(request, people["finance"], django_capture_on_commit_callbacks)
    gift_entry, card_entry = RefundEntry.objects.filter(order=split_order).order_by("id")
    page = client.get(review).content.decode()
    # after: each leg's refund and its status, and the evaluator's checks per leg
    assert f"refund #{gift_entry.pk} <strong>succeeded</strong>" in page
    assert f"refund #{card_entry.pk} <strong>succeeded</strong>" in page
    assert "The provider refunded the leg&#x27;s payment (leg 2)" in page


def test_a_card_leg_paid_by_hand_waits_for_finance_after_the_store_credit(
    settings, split_order, gift_card, people, client, django_capture_on_commit_callbacks
):
    settings.PAYMENT_GATEWAY = "manual"
    ticket, verdict, request = ticket_gated(order=split_order, filer=people["support"], amount="120.00", key="hand")
    request = approve(request, people["finance"], django_capture_on_commit_callbacks)
    gift_entry, card_entry = RefundEntry.objects.filter(order=split_order).order_by("id")
    assert (gift_entry.status, card_entry.status, card_entry.gateway) == ("succeeded", "pending", "manual")
    assert request.status == ApprovalRequest.Status.APPROVED
    # when finance records the card leg paid on the review page
    client.force_login(people["finance2"])
    with django_capture_on_commit_callbacks(execute=True):
        client.post(f"/admin/approvals/approvalrequest/{request.pk}/paid/", {"reference": "SEPA-7"})
    approval_execute(request_id=request.pk)
    # then that leg is paid, the request verified, the gift card credited once
    card_entry.refresh_from_db()
    request.refresh_from_db()
    gift_card.refresh_from_db()
    assert (card_entry.status, card_entry.provider_ref) == ("succeeded", "SEPA-7")
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    assert gift_card.balance == Decimal("20.00")


@pytest.fixture
def two_cards(tenant, customer, card):
    other_card = PaymentMethod.objects.create(customer=customer, external_id="card_2", kind="card", last4="1111")
    return order_paid(tenant, customer, "ORD-LATE-LEG", (card, "60.00", "pi_first"), (other_card, "60.00", "pi_second"))


def first_refused_then_filed_again(fake_stripe, order, people, capture):
    """A 120.00 refund over two card legs: the first paid, the second refused; finance files the
    second again. Returns the ticket, the first request, its replacement and the first leg's refund."""
    ticket, verdict, request = ticket_gated(order=order, filer=people["support"], amount="120.00", key="late-leg")
    fake_stripe.fail_next("none", "402")
    request = approve(request, people["finance"], capture)
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    again = approval_request_payment_retry(request_id=request.pk, user=people["finance2"])
    assert again.amount == Decimal("60.00")
    [paid] = [refund for refund in fake_stripe.refunds.values() if refund["status"] == "succeeded"]
    return ticket, request, again, paid


def fail_later(fake_stripe, refund, capture, event_id="evt_leg_late"):
    """The provider fails a paid refund (its charge can give the amount back again) and says so."""
    fake_stripe.refunds[refund["id"]]["status"] = "failed"
    payload = refund_event(refund, event_id=event_id, status="failed", failure_reason="expired_or_canceled_card")
    with capture(execute=True):
        assert post_event(payload).status_code == 200


def test_a_leg_that_fails_after_another_was_filed_and_paid_again_sends_the_ticket_back(
    fake_stripe, two_cards, people, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    ticket, request, again, paid = first_refused_then_filed_again(fake_stripe, two_cards, people, capture)
    again = approve(again, people["finance"], capture)
    ticket.refresh_from_db()
    assert again.status == ApprovalRequest.Status.EXECUTED and ticket.status == Ticket.Status.REFUNDED

    # when the first leg's refund, paid, fails at the provider afterwards (and is announced twice)
    fail_later(fake_stripe, paid, capture)
    fail_later(fake_stripe, paid, capture)

    # then the first request records that leg's failure too, once, and the ticket is back with
    # finance, saying which part was not paid and how it is paid now
    first_entry = RefundEntry.objects.get(order=two_cards, idempotency_key="late-leg")
    assert first_entry.status == "failed"
    request.refresh_from_db()
    refused = [c for c in request.verification["checks"] if c.get("entry") == first_entry.pk]
    assert len(refused) == 1 and "expired_or_canceled_card" in refused[0]["actual"]
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.PAYMENT_FAILED, ticket.stop_detail
    assert "refused 60.00 USD of the refund of 120.00 USD" in ticket.stop_detail
    assert "propose a refund of 60.00 USD on this ticket" in ticket.stop_detail
    assert "we have refunded" not in ticket.customer_reply.lower()
    # and the failed part is refundable again, once: a person proposes it, finance pays it
    assert order_refund_position(two_cards).refundable == Decimal("60.00")
    proposal = ticket_refund_propose(ticket=ticket, user=people["support"], amount="60.00", reason="A leg failed.")
    proposal = approve(proposal, people["finance"], capture)
    assert proposal.status == ApprovalRequest.Status.EXECUTED, proposal.verification
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert paid_at_the_provider(fake_stripe) == 12000 and order_refund_position(two_cards).refundable == 0


def test_a_leg_that_fails_while_the_refile_waits_withdraws_the_refile_for_a_person(
    fake_stripe, two_cards, people, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    ticket, request, again, paid = first_refused_then_filed_again(fake_stripe, two_cards, people, capture)

    # when the first leg's refund fails at the provider while the refile of the second waits
    fail_later(fake_stripe, paid, capture)

    # then the refile is withdrawn (never paid for half of what is owed) and a person has the
    # ticket, told why and what is owed: the whole 120.00
    again.refresh_from_db()
    assert again.status == ApprovalRequest.Status.INVALIDATED and again.replaced_by_id is None
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.ESCALATED, ticket.stop_detail
    assert f"Approval request #{again.pk} was withdrawn: 60.00 USD of request #{request.pk}" in ticket.stop_detail
    assert order_refund_position(two_cards).refundable == Decimal("120.00")
    with pytest.raises(ApprovalConflict, match="already invalidated; it cannot be decided again"):
        approval_request_decide(
            request_id=again.pk, user=people["finance"], decision="approve", args_hash=again.args_hash
        )
    # and the person's proposal of what is owed is paid in full, over both cards
    proposal = ticket_refund_propose(ticket=ticket, user=people["support"], amount="120.00", reason="Both legs failed.")
    proposal = approve(proposal, people["finance"], capture)
    assert proposal.status == ApprovalRequest.Status.EXECUTED, proposal.verification
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED
    assert paid_at_the_provider(fake_stripe) == 12000 and order_refund_position(two_cards).refundable == 0


def paid_at_the_provider(fake_stripe) -> int:
    return sum(refund["amount"] for refund in fake_stripe.refunds.values() if refund["status"] == "succeeded")
