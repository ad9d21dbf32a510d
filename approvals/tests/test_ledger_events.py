"""The ledger's events reach the approvals layer durably (approvals.ledger_events): a follow-up
that raises is rolled back alone, kept with the ledger's record, and delivered again by the sweep;
its effect happens exactly once. Every test builds its own shop (not the demo's)."""

from datetime import timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.utils import timezone

from approvals import ledger_events
from approvals.followups import approval_followups_deliver
from approvals.models import ApprovalFollowUp, ApprovalRequest
from approvals.services.decisions import approval_request_decide
from approvals.services.execution import approval_execute
from approvals.signals import refund_payment_failed
from ledger.disputes import dispute_record
from ledger.gateways.base import ProviderDispute
from ledger.models import RefundEntry, RefundStatus
from ledger.services import ledger_refund_record_outcome

pytestmark = pytest.mark.django_db


@pytest.fixture
def approve(people, django_capture_on_commit_callbacks):
    def run(request):
        with django_capture_on_commit_callbacks(execute=False):
            approval_request_decide(
                request_id=request.pk, user=people["finance"], decision="approve", args_hash=request.args_hash
            )
        request.refresh_from_db()
        return request

    return run


@pytest.fixture
def announced():
    """The refund_payment_failed announcements the layers above hear, as (request id, entry id)."""
    heard = []

    def listen(sender, request, entry, **kwargs):
        heard.append((request.pk, entry.pk))

    refund_payment_failed.connect(listen, dispatch_uid="test-ledger-events-listen")
    yield heard
    refund_payment_failed.disconnect(dispatch_uid="test-ledger-events-listen")


def _once_failing(real):
    calls = {"n": 0}

    def call(**kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("receiver bug, once")
        return real(**kwargs)

    return call


def _sweep_later():
    with mock.patch("django.utils.timezone.now", return_value=timezone.now() + timedelta(hours=2)):
        return approval_followups_deliver()


def test_a_refusal_whose_follow_up_raises_once_is_delivered_later_exactly_once(file_request, approve, announced):
    # given an approved request written to the ledger, waiting to be paid by hand
    request = approve(file_request("120.00"))
    approval_execute(request_id=request.pk)
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)
    assert entry.status == RefundStatus.PENDING

    # when the refund fails and the approvals layer's follow-up raises the first time
    real = ledger_events.approval_follow_refund_status
    with mock.patch.object(ledger_events, "approval_follow_refund_status", side_effect=_once_failing(real)):
        ledger_refund_record_outcome(entry_id=entry.pk, status=RefundStatus.FAILED, reason="account closed")

        # then the ledger's record stands, the request has not moved, and the event is kept
        entry.refresh_from_db()
        request.refresh_from_db()
        assert entry.status == RefundStatus.FAILED
        assert request.status == ApprovalRequest.Status.APPROVED and announced == []
        [kept] = ApprovalFollowUp.objects.filter(request=request)
        assert (kept.event, kept.receiver, kept.attempts) == (
            "approval_refund_answered",
            "approvals.approval_follow_refund_status",
            1,
        )
        assert "receiver bug, once" in kept.last_error and kept.delivered_at is None

        # when the sweep delivers it after its backoff, and again later
        delivered = _sweep_later()
        again = _sweep_later()

    # then the request became payment_failed once, with the provider's reason, announced once
    request.refresh_from_db()
    kept.refresh_from_db()
    assert (delivered, again) == (1, 0)
    assert kept.delivered_at is not None and kept.attempts == 2
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    assert request.verification["detail"] == "account closed" and request.ledger_entry_id == entry.pk
    assert announced == [(request.pk, entry.pk)]


def test_a_follow_up_that_works_the_first_time_keeps_nothing(file_request, approve, announced):
    request = approve(file_request("120.00"))
    approval_execute(request_id=request.pk)
    entry = RefundEntry.objects.get(idempotency_key=request.idempotency_key)

    ledger_refund_record_outcome(entry_id=entry.pk, status=RefundStatus.CANCELED, reason="")

    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.PAYMENT_FAILED
    assert announced == [(request.pk, entry.pk)]
    assert not ApprovalFollowUp.objects.filter(request=request).exists()


def _dispute(ref="dp_1", status="needs_response"):
    return ProviderDispute(
        provider_ref=ref,
        status=status,
        amount=Decimal("120.00"),
        currency="USD",
        payment_intent="pi_disputed",
        reason="fraudulent",
    )


def test_a_dispute_hold_that_raises_once_holds_the_request_later_exactly_once(
    make_order, approval_request_make, people
):
    # given a pending request on an order paid with its own payment reference
    order = make_order("120.00", external_id="ORD-DISPUTED", items=[("ITEM-1", "120.00", 1)], payment_ref="pi_disputed")
    request = approval_request_make(order=order, filer=people["support"])

    # when a dispute opens on it and the hold raises the first time
    real = ledger_events.approval_request_hold_for_dispute
    with mock.patch.object(ledger_events, "approval_request_hold_for_dispute", side_effect=_once_failing(real)):
        stored, what = dispute_record(dispute=_dispute())

        # then the dispute is recorded, the request still waits, and the hold is kept
        request.refresh_from_db()
        assert (what, stored.is_open) == ("created", True)
        assert request.status == ApprovalRequest.Status.PENDING
        [kept] = ApprovalFollowUp.objects.filter(request=request, delivered_at=None)
        assert kept.event == "approval_order_disputed"

        # when the sweep delivers it later, twice
        delivered, again = _sweep_later(), _sweep_later()

    # then the request is held once, with the dispute as the reason
    request.refresh_from_db()
    assert (delivered, again) == (1, 0)
    assert request.status == ApprovalRequest.Status.INVALIDATED
    assert "disputed (dp_1: needs_response)" in request.decision_note


def test_a_hold_delivered_after_the_dispute_closed_leaves_the_request_alone(make_order, approval_request_make, people):
    order = make_order("120.00", external_id="ORD-WON", items=[("ITEM-1", "120.00", 1)], payment_ref="pi_disputed")
    request = approval_request_make(order=order, filer=people["support"])
    real = ledger_events.approval_request_hold_for_dispute
    with mock.patch.object(ledger_events, "approval_request_hold_for_dispute", side_effect=_once_failing(real)):
        dispute_record(dispute=_dispute())
        # the shop wins the dispute before the kept hold is delivered
        dispute_record(dispute=_dispute(status="won"))
        delivered = _sweep_later()

    request.refresh_from_db()
    assert delivered == 1
    assert request.status == ApprovalRequest.Status.PENDING
