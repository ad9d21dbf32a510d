"""Refunds paid out at Stripe (the real SDK against a local fake server): exactly once, whatever fails."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ledger.exceptions import PaymentProviderUnavailable, RefundRefused
from ledger.models import PaymentMethod, RefundEntry, RefundEntryEvent
from ledger.payouts import ledger_refund_payout, refund_entry_provider_record
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_correct, ledger_refund_issue
from ledger.signals import refund_entry_status_changed


def issue(order, amount="30.00", key="approval-key-1", approval="7", **kwargs):
    return ledger_refund_issue(
        order=order,
        amount=amount,
        currency=order.currency,
        idempotency_key=key,
        source=RefundEntry.Source.APPROVAL,
        approval_ref=approval,
        **kwargs,
    )


def test_an_approved_refund_is_paid_once_with_minor_units_key_and_metadata(fake_stripe, make_order, tenant):
    # given an order paid with a PaymentIntent, and an approved refund written to the ledger
    order = make_order("100.00", payment_ref="pi_123")
    entry = issue(order, "30.00")
    assert entry.status == "pending" and entry.gateway == "stripe"
    assert order_refund_position(order).refundable == Decimal("70.00")  # pending already counts

    # when it is paid out
    entry = ledger_refund_payout(entry_id=entry.pk, metadata={"ticket": "42"})

    # then Stripe got one refund: 3000 cents, the approval's key, the metadata
    [call] = fake_stripe.posts()
    assert call["params"]["payment_intent"] == "pi_123"
    assert call["params"]["amount"] == "3000"
    assert call["idempotency_key"] == "approval-key-1"
    assert (
        call["params"]["metadata[approval]"],
        call["params"]["metadata[ticket]"],
        call["params"]["metadata[tenant]"],
    ) == ("7", "42", tenant.slug)
    assert call["account"] == ""
    # and the entry succeeded, with the provider's id, through appended events
    [refund] = fake_stripe.refunds.values()
    assert (entry.status, entry.provider_ref) == ("succeeded", refund["id"])
    assert [(e.from_status, e.to_status) for e in entry.events.all()] == [("", "pending"), ("pending", "succeeded")]
    # and paying again changes nothing
    assert ledger_refund_payout(entry_id=entry.pk).status == "succeeded"
    assert len(fake_stripe.posts()) == 1


def test_a_charge_and_a_connected_account_are_used_when_the_shop_has_them(fake_stripe, make_order, tenant):
    tenant.stripe_account = "acct_shop1"
    tenant.save()
    order = make_order("50.00", payment_ref="ch_999")
    entry = ledger_refund_payout(entry_id=issue(order, "50.00").pk)
    [call] = fake_stripe.posts()
    assert (call["params"]["charge"], call["account"], entry.status) == ("ch_999", "acct_shop1", "succeeded")


def test_a_lost_response_is_retried_by_the_sdk_and_returns_the_same_refund(fake_stripe, make_order):
    # given Stripe makes the refund and the connection drops before the answer
    order = make_order("100.00", payment_ref="pi_drop")
    fake_stripe.fail_next("drop")
    # when it is paid out (the SDK retries with the same key)
    entry = ledger_refund_payout(entry_id=issue(order).pk)
    # then one refund exists at Stripe, and one entry, succeeded, names it
    assert len(fake_stripe.refunds) == 1 and len(fake_stripe.posts()) == 2
    assert {c["idempotency_key"] for c in fake_stripe.posts()} == {"approval-key-1"}
    assert entry.status == "succeeded" and entry.provider_ref == next(iter(fake_stripe.refunds))
    assert RefundEntry.objects.filter(order=order).count() == 1


def test_a_lost_response_after_the_sdks_retries_is_transient_and_the_next_attempt_pays_nothing_twice(
    fake_stripe, make_order, settings
):
    # given no SDK retries, and the answer of the create is lost
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    order = make_order("100.00", payment_ref="pi_lost")
    entry = issue(order)
    fake_stripe.fail_next("drop")
    # when the payout runs, it raises a transient error and the entry stays pending (still counting)
    with pytest.raises(PaymentProviderUnavailable):
        ledger_refund_payout(entry_id=entry.pk)
    entry.refresh_from_db()
    assert entry.status == "pending" and order_refund_position(order).refundable == Decimal("70.00")
    # and the caller's retry gets the same refund back
    entry = ledger_refund_payout(entry_id=entry.pk)
    assert len(fake_stripe.refunds) == 1
    assert entry.status == "succeeded" and entry.provider_ref == next(iter(fake_stripe.refunds))


def test_a_500_then_success_makes_one_refund(fake_stripe, make_order):
    order = make_order("100.00", payment_ref="pi_500")
    fake_stripe.fail_next("500")
    entry = ledger_refund_payout(entry_id=issue(order).pk)
    assert len(fake_stripe.posts()) == 2 and len(fake_stripe.refunds) == 1
    assert entry.status == "succeeded"


def test_5xx_after_every_retry_is_transient(fake_stripe, make_order, settings):
    settings.STRIPE_MAX_NETWORK_RETRIES = 1
    order = make_order("100.00", payment_ref="pi_down")
    entry = issue(order)
    fake_stripe.fail_next("500", "500")
    with pytest.raises(PaymentProviderUnavailable):
        ledger_refund_payout(entry_id=entry.pk)
    entry.refresh_from_db()
    assert entry.status == "pending" and not fake_stripe.refunds


@pytest.mark.parametrize(("fault", "reason"), [("402", "card_declined"), ("400", "charge_already_refunded")])
def test_a_refused_refund_fails_with_the_providers_reason_and_is_refundable_again(
    fake_stripe, make_order, fault, reason
):
    # given Stripe refuses the refund
    order = make_order("100.00", payment_ref="pi_no")
    fake_stripe.fail_next(fault)
    changes = []
    refund_entry_status_changed.connect(
        lambda **kw: changes.append((kw["from_status"], kw["to_status"])), weak=False, dispatch_uid="test-changes"
    )
    try:
        # when it is paid out
        entry = ledger_refund_payout(entry_id=issue(order, "100.00").pk)
    finally:
        refund_entry_status_changed.disconnect(dispatch_uid="test-changes")
    # then the entry failed with the reason, nothing was retried, and the layer above was told
    assert entry.status == "failed" and len(fake_stripe.posts()) == 1
    assert reason in entry.events.last().reason
    assert changes == [("pending", "failed")]
    # and the amount is refundable again: a new approval can pay it
    assert order_refund_position(order).refundable == Decimal("100.00")
    again = ledger_refund_payout(entry_id=issue(order, "100.00", key="approval-key-2", approval="8").pk)
    assert again.status == "succeeded" and len(fake_stripe.refunds) == 1


def test_jpy_is_sent_without_decimals(fake_stripe, make_order):
    order = make_order("5000", currency="JPY", payment_ref="pi_jpy")
    ledger_refund_payout(entry_id=issue(order, "1200").pk)
    assert fake_stripe.posts()[0]["params"]["amount"] == "1200"


def test_bhd_is_sent_in_fils(fake_stripe, make_order):
    order = make_order("40.00", currency="BHD", payment_ref="pi_bhd")
    ledger_refund_payout(entry_id=issue(order, "12.50").pk)
    assert fake_stripe.posts()[0]["params"]["amount"] == "12500"


def test_a_gift_card_refund_is_store_credit_with_no_provider_call(fake_stripe, make_order, customer):
    # given a customer's gift card with 10.00 on it
    gift = PaymentMethod.objects.create(
        customer=customer, external_id="gc_1", kind="gift_card", balance=Decimal("10.00")
    )
    order = make_order("100.00", payment_ref="pi_gift")
    # when an approved refund goes to the gift card
    entry = issue(order, "25.00", destination=gift, destination_kind="gift_card")
    # then the balance grew at once, the entry succeeded, and Stripe was not called (not even by a payout)
    gift.refresh_from_db()
    assert gift.balance == Decimal("35.00")
    assert (entry.status, entry.gateway) == ("succeeded", "store_credit")
    assert ledger_refund_payout(entry_id=entry.pk).status == "succeeded"
    assert fake_stripe.calls == []
    # and replaying the same key credits nothing twice
    issue(order, "25.00", destination=gift, destination_kind="gift_card")
    gift.refresh_from_db()
    assert gift.balance == Decimal("35.00")


def test_the_manual_gateway_waits_for_a_person_to_record_the_payout(make_order, settings):
    # Finance pays by hand: the payout calls nobody and the entry stays pending (it counts) until a
    # person records the payment (ledger_refund_record_paid; refundagent/tests/test_manual_payouts.py).
    settings.PAYMENT_GATEWAY = "manual"
    entry = issue(make_order("100.00"))
    assert (entry.status, entry.gateway) == ("pending", "manual")
    assert ledger_refund_payout(entry_id=entry.pk).status == "pending"
    assert list(entry.events.values_list("to_status", flat=True)) == ["pending"]


def test_past_the_idempotency_window_the_refund_is_looked_up_before_one_is_made(fake_stripe, make_order):
    # given an entry paid 25 hours ago whose answer was lost (the refund exists at Stripe)
    order = make_order("100.00", payment_ref="pi_old")
    entry = issue(order)
    fake_stripe.add_refund(
        payment_intent="pi_old", amount=3000, metadata={"ledger_entry": str(entry.pk), "approval": "7"}
    )
    later = timezone.now() + timedelta(hours=25)
    # when it is retried past Stripe's 24 h window (Stripe has forgotten the key)
    with mock.patch("ledger.payouts.timezone.now", return_value=later):
        entry = ledger_refund_payout(entry_id=entry.pk)
    # then no new refund was created: the one found by metadata is recorded
    assert fake_stripe.posts() == [] and len(fake_stripe.refunds) == 1
    assert entry.status == "succeeded" and entry.provider_ref == next(iter(fake_stripe.refunds))


def test_the_database_refuses_a_status_that_is_not_the_newest_event(make_order, fake_stripe):
    entry = issue(make_order("100.00", payment_ref="pi_db"))
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_refundentry SET status = 'succeeded' WHERE id = %s", [entry.pk])
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        RefundEntryEvent.objects.create(entry=entry, from_status="pending", to_status="succeeded", source="gateway")
        cursor.execute("UPDATE ledger_refundentry SET status = 'succeeded', amount = 1 WHERE id = %s", [entry.pk])
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        RefundEntryEvent.objects.create(entry=entry, from_status="pending", to_status="failed", source="gateway")
        cursor.execute("UPDATE ledger_refundentry SET status = 'failed' WHERE id = %s", [entry.pk])
        RefundEntryEvent.objects.create(entry=entry, from_status="failed", to_status="succeeded", source="gateway")
        cursor.execute("UPDATE ledger_refundentry SET status = 'succeeded' WHERE id = %s", [entry.pk])
    with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_refundentryevent SET to_status = 'failed' WHERE entry_id = %s", [entry.pk])
    entry.refresh_from_db()
    assert entry.status == "pending"


def test_the_providers_record_of_a_paid_refund_is_readable_for_the_evaluator(fake_stripe, make_order, settings):
    # given a refund paid through Stripe, and one paid by hand
    paid = ledger_refund_payout(entry_id=issue(make_order("100.00", payment_ref="pi_rec")).pk)
    settings.PAYMENT_GATEWAY = "manual"
    by_hand = issue(make_order("100.00"), key="approval-key-hand")
    # when the evaluator asks the provider
    record = refund_entry_provider_record(entry_id=paid.pk)
    # then Stripe's record matches the ledger, and a refund paid by hand has no provider record
    assert (record.provider_ref, record.status, record.amount, record.currency) == (
        paid.provider_ref,
        "succeeded",
        Decimal("30.00"),
        "USD",
    )
    assert record.metadata["ledger_entry"] == str(paid.pk)
    assert refund_entry_provider_record(entry_id=by_hand.pk) is None
    fake_stripe.refunds.clear()
    assert refund_entry_provider_record(entry_id=paid.pk) is None


def test_a_failed_item_refund_frees_the_item_and_cannot_be_corrected(fake_stripe, make_order):
    # given an item refund that Stripe declined
    order = make_order("100.00", items=[("ITEM-1", "60.00", 1), ("ITEM-2", "40.00", 1)], payment_ref="pi_items")
    fake_stripe.fail_next("402")
    failed = ledger_refund_payout(entry_id=issue(order, "60.00", item_ids=["ITEM-1"]).pk)
    assert failed.status == "failed"
    # then the item is refundable again (in Python and in the database's cap trigger)
    again = issue(order, "60.00", key="approval-key-2", approval="8", item_ids=["ITEM-1"])
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert ledger_refund_payout(entry_id=again.pk).status == "succeeded"
    # and the failed entry cannot be corrected: it moved no money
    with pytest.raises(RefundRefused, match="failed"):
        ledger_refund_correct(entry=failed, new_amount="10.00", reason="fee")
