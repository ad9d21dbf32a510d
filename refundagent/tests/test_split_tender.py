"""An order paid two ways: the approval names the tender leg that receives the money (payment,
method, provider reference, amount within what that payment can still return), the payout pays
exactly that leg (store credit for a gift card, the provider for a card), and the evaluator checks
the leg against the provider and the ledger."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest
from ledger.models import Order, Payment, RefundEntry
from ledger.services import canonical_hash
from refundagent.models import Ticket
from refundagent.tests.payments_support import order_paid, ticket_gated

pytestmark = pytest.mark.django_db


def file_refund(order, filer, amount, *, refund_to=None, key="split-1"):
    """What the agent's decision does with a draft: the gate, then the request if it allows one."""
    return ticket_gated(order=order, filer=filer, amount=amount, key=key, refund_to=refund_to)


def approve_by_api(api_client, finance, request, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_client(finance).post(
            f"/api/approvals/{request.pk}/decision",
            {"decision": "approve", "args_hash": request.args_hash},
            content_type="application/json",
        )
    assert answer.status_code == 200, answer.content
    request.refresh_from_db()
    return request


def test_the_approval_names_the_card_leg_and_the_card_is_refunded(
    fake_stripe, split_order, people, api_client, django_capture_on_commit_callbacks
):
    # given 30.00 on the order paid 20.00 by gift card and 100.00 by card (only the card can return it whole)
    ticket, verdict, request = file_refund(split_order, people["support"], "30.00")

    # then the approval names the leg: the card's payment, its reference, the amount
    assert request.args["destination_method"] == "card_1"
    card_payment = split_order.payments.get(payment_ref="pi_split")
    assert request.args["legs"] == [
        {"payment": card_payment.pk, "method": "card_1", "kind": "card", "amount": "30.00", "returnable": "100.00"}
    ]

    # when finance approves exactly that
    request = approve_by_api(api_client, people["finance"], request, django_capture_on_commit_callbacks)

    # then the card's PaymentIntent got exactly that refund, and the evaluator checked the leg
    [call] = fake_stripe.posts()
    assert (call["params"]["payment_intent"], call["params"]["amount"]) == ("pi_split", "3000")
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    assert {"leg_method", "leg_amount", "leg_provider_payment"} <= {c["name"] for c in request.verification["checks"]}
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED


def test_a_refund_to_the_gift_card_leg_is_store_credit_and_never_touches_the_card(
    fake_stripe, split_order, gift_card, people, api_client, django_capture_on_commit_callbacks
):
    # given the ticket asks for the refund on the gift card the order was partly paid with
    ticket, verdict, request = file_refund(split_order, people["support"], "20.00", refund_to=gift_card)
    gift_payment = split_order.payments.get(payment_method=gift_card)
    assert request.args["legs"] == [
        {
            "payment": gift_payment.pk,
            "method": "gift_card_9",
            "kind": "gift_card",
            "amount": "20.00",
            "returnable": "20.00",
        }
    ]

    # when finance approves it
    request = approve_by_api(api_client, people["finance"], request, django_capture_on_commit_callbacks)

    # then the gift card's balance grew by 20.00 as store credit, and the provider was never asked to refund
    assert fake_stripe.posts() == []
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00")
    [entry] = RefundEntry.objects.filter(order=split_order)
    assert (entry.gateway, entry.status, entry.destination_id) == ("store_credit", "succeeded", gift_card.pk)
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED


def test_more_than_the_gift_card_can_return_is_never_sent_to_it(fake_stripe, split_order, gift_card, people):
    # given a refund of 30.00 asked onto the gift card that paid 20.00
    ticket, verdict, request = file_refund(split_order, people["support"], "30.00", refund_to=gift_card)
    # then nothing is requested: a person decides how to split it
    assert request is None and verdict.outcome == "escalated" and "split_tender" in verdict.codes
    assert "gift_card_9" in verdict.reason and "20.00" in verdict.reason


def test_more_than_all_the_payments_can_return_goes_to_a_person(fake_stripe, tenant, customer, card, gift_card, people):
    # given an order of 150.00 whose recorded payments add up to 120.00 (20.00 gift card, 100.00 card)
    order = order_paid(
        tenant, customer, "ORD-SHORT", (gift_card, "20.00", ""), (card, "100.00", "pi_short"), total="150.00"
    )
    # when the whole 150.00 is asked
    ticket, verdict, request = file_refund(order, people["support"], "150.00", key="short")
    # then the gate escalates it, saying what the payments can return together and each; nothing is requested
    assert request is None and verdict.outcome == "escalated" and "split_tender" in verdict.codes
    assert "together can still return only 120.00" in verdict.reason
    assert "gift_card_9 20.00" in verdict.reason and "card_1 100.00" in verdict.reason
    assert fake_stripe.posts() == [] and not ApprovalRequest.objects.exists()


def test_an_order_paid_only_by_gift_card_is_refunded_as_store_credit(
    fake_stripe, tenant, customer, gift_card, people, api_client, django_capture_on_commit_callbacks
):
    order = Order.objects.create(
        tenant=tenant,
        customer=customer,
        external_id="ORD-GIFT",
        total=Decimal("25.00"),
        currency="USD",
        placed_at=timezone.now() - timedelta(days=2),
    )
    Payment.objects.create(
        order=order, payment_method=gift_card, method="gift_card", amount=Decimal("25.00"), currency="USD"
    )
    ticket, verdict, request = file_refund(order, people["support"], "25.00", key="gift-only")

    request = approve_by_api(api_client, people["finance"], request, django_capture_on_commit_callbacks)

    # then not `failed: no_payment_ref`: store credit, verified, refunded
    [entry] = RefundEntry.objects.filter(order=order)
    assert (entry.gateway, entry.status) == ("store_credit", "succeeded")
    assert request.status == ApprovalRequest.Status.EXECUTED, request.verification
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("25.00") and fake_stripe.posts() == []
    ticket.refresh_from_db()
    assert ticket.status == Ticket.Status.REFUNDED


def test_the_evaluator_catches_a_payout_to_a_method_nobody_approved(
    fake_stripe, split_order, people, api_client, django_capture_on_commit_callbacks, make_order
):
    # given another payment the runtime could wrongly pick (the bug this pins: the first payment
    # with a provider reference, not the approved leg's)
    make_order("50.00", external_id="ORD-ELSE", payment_ref="pi_elsewhere")
    ticket, verdict, request = file_refund(split_order, people["support"], "30.00")
    # when the payout refunds another payment than the approved leg's
    with mock.patch("ledger.payouts.refund_entry_payment_ref", return_value="pi_elsewhere"):
        request = approve_by_api(api_client, people["finance"], request, django_capture_on_commit_callbacks)
    # then the evaluator fails it: the provider's refund is not on the approved leg's payment
    assert request.status == ApprovalRequest.Status.FAILED
    assert "leg_provider_payment" in request.verification["failed"]
    ticket.refresh_from_db()
    assert ticket.status != Ticket.Status.REFUNDED


def test_two_requests_on_one_gift_card_leg_never_return_more_than_it_paid(
    fake_stripe, split_order, gift_card, people, api_client, django_capture_on_commit_callbacks
):
    # given two tickets each asking 20.00 back onto the gift card that paid 20.00
    first_ticket, _, first = file_refund(split_order, people["support"], "20.00", refund_to=gift_card, key="leg-a")
    second_ticket, _, second = file_refund(split_order, people["support"], "20.00", refund_to=gift_card, key="leg-b")
    # when finance approves the first, then the second
    approve_by_api(api_client, people["finance"], first, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_client(people["finance"]).post(
            f"/api/approvals/{second.pk}/decision",
            {"decision": "approve", "args_hash": second.args_hash},
            content_type="application/json",
        )
    # then the second is refused (the leg can no longer return it) and no replacement is made
    assert answer.status_code == 409
    second.refresh_from_db()
    assert second.status == ApprovalRequest.Status.INVALIDATED and second.replaced_by_id is None
    gift_card.refresh_from_db()
    assert gift_card.balance == Decimal("20.00") and RefundEntry.objects.filter(order=split_order).count() == 1


def test_a_request_whose_legs_cannot_be_paid_as_approved_goes_back_to_finance(
    fake_stripe, split_order, people, api_client, django_capture_on_commit_callbacks, make_order
):
    # given a request whose second leg names a payment of another order, stored with its own hash
    # as a hand-made request would be
    elsewhere = make_order("80.00", external_id="ORD-ELSE", payment_ref="pi_elsewhere").payments.get()
    ticket, verdict, request = file_refund(split_order, people["support"], "100.00")
    gift_payment = split_order.payments.get(method="gift_card")
    args = dict(request.args)
    args["legs"] = [
        {
            "payment": gift_payment.pk,
            "method": "gift_card_9",
            "kind": "gift_card",
            "amount": "20.00",
            "returnable": "20.00",
        },
        {**request.args["legs"][0], "payment": elsewhere.pk, "amount": "80.00"},
    ]
    args["destination_method"] = "gift_card_9"
    ApprovalRequest.objects.filter(pk=request.pk).update(args=args, args_hash=canonical_hash(args))
    request.refresh_from_db()
    # when finance approves exactly that
    with django_capture_on_commit_callbacks(execute=True):
        answer = api_client(people["finance"]).post(
            f"/api/approvals/{request.pk}/decision",
            {"decision": "approve", "args_hash": request.args_hash},
            content_type="application/json",
        )
    # then it is refused with the reason, nothing is paid anywhere, and finance decides again on
    # what the gate names now (the replacement), never on the legs the runtime cannot pay
    assert answer.status_code == 409 and "cannot be paid as approved" in answer.json()["detail"]
    assert fake_stripe.posts() == [] and not RefundEntry.objects.filter(order=split_order).exists()
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED
    replacement = request.replaced_by
    assert replacement is None or (
        replacement.status == ApprovalRequest.Status.PENDING
        and [leg["payment"] for leg in replacement.args["legs"]] == [split_order.payments.get(method="card").pk]
    )
