"""The money log's payout lines (docs/operations.md, "Logs"): the result of paying a refund out at the
provider, and every later change the provider reports, one JSON line each, with the ticket."""

import json
from datetime import timedelta
from unittest import mock

import pytest
from django.test import Client
from django.utils import timezone

from approvals.models import ApprovalRequest
from ledger.exceptions import PaymentProviderUnavailable
from ledger.models import RefundEntry
from ledger.payouts import ledger_refund_payout
from ledger.services import ledger_refund_issue
from ledger.sweep import refund_entries_poll
from ledger.tests.fake_stripe import sign_webhook

# What every payout line carries besides the context (ticket, trace): enough to find the money.
PAYOUT_FIELDS = {"tenant", "order", "ledger_entry", "amount", "currency", "gateway", "provider_ref", "status"}


def _approve(api_client, ticket):
    approval = ApprovalRequest.objects.get(ticket_ref=ticket.pk)
    response = api_client("acme-finance").post(
        f"/api/approvals/{approval.pk}/decision",
        {"decision": "approve", "args_hash": approval.args_hash},
        content_type="application/json",
        HTTP_X_REQUEST_ID="req-payout-1",
    )
    assert response.status_code == 200, response.content
    return approval


def _payout_lines(json_log, event="payout.result"):
    return [line for line in json_log() if line.get("event") == event]


@pytest.mark.django_db(transaction=True)
def test_a_refund_paid_out_logs_one_info_line_with_the_ticket_and_the_providers_id(
    demo, fake_stripe, json_log, file_ticket, api_client
):
    # given a ticket whose refund waits for finance, and Stripe as the gateway
    ticket = file_ticket()
    # when finance approves it and the execution pays it out (eager tasks: in the same request)
    approval = _approve(api_client, ticket)

    # then the money log says approval, ledger write, payout, verification, in that order (the
    # succeeded payout also enqueues the execution again, approvals.ledger_events; eager, it runs at once
    # and replays the ledger write: that line says `replayed`)
    assert [line["event"] for line in json_log() if "event" in line and not line.get("replayed")] == [
        "approval.decided",
        "refund.executed",
        "payout.result",
        "refund.verified",
    ]
    # and the payout line is INFO, with the money, where it went and the provider's refund id
    [line] = _payout_lines(json_log)
    entry = RefundEntry.objects.get(approval_ref=str(approval.pk))
    [refund_id] = fake_stripe.refunds
    assert line["logger"] == "money" and line["level"] == "INFO"
    assert PAYOUT_FIELDS <= set(line)
    assert (line["tenant"], line["order"], line["ledger_entry"]) == (ticket.tenant_id, "ORD-5001", entry.pk)
    assert (line["amount"], line["currency"], line["gateway"]) == ("120.00", "USD", "stripe")
    assert (line["provider_ref"], line["status"]) == (refund_id, "succeeded") == (entry.provider_ref, entry.status)
    assert line["approval"] == str(approval.pk) and "reason" not in line
    # and the ticket, its trace and the task that paid it, though the ledger never saw the ticket
    assert (line["ticket"], line["ticket_trace_id"]) == (ticket.pk, ticket.trace_id.hex)
    assert line["trace_id"] == ticket.trace_id.hex  # the execution joins the ticket's trace
    assert line["task_id"] and line["request_id"] == "req-payout-1"


@pytest.mark.django_db(transaction=True)
def test_a_refund_the_provider_declines_logs_one_error_line_with_its_reason(
    demo, fake_stripe, json_log, file_ticket, api_client
):
    # given Stripe will decline the refund
    ticket = file_ticket()
    fake_stripe.fail_next("402")
    # when finance approves it
    approval = _approve(api_client, ticket)

    # then the payout result is an ERROR line with Stripe's reason, and nothing is verified
    events = [line["event"] for line in json_log() if "event" in line]
    assert events == ["approval.decided", "refund.executed", "payout.result"]
    [line] = _payout_lines(json_log)
    assert (line["level"], line["status"], line["gateway"]) == ("ERROR", "failed", "stripe")
    assert "card_declined" in line["reason"] and "Your card was declined." in line["reason"]
    assert (line["order"], line["amount"], line["currency"]) == ("ORD-5001", "120.00", "USD")
    assert line["ledger_entry"] == RefundEntry.objects.get(approval_ref=str(approval.pk)).pk
    assert line["ticket"] == ticket.pk and line["ticket_trace_id"] == ticket.trace_id.hex
    assert line["provider_ref"] == ""  # the provider made no refund


# --- later changes: webhooks, the sweep's poll; and an unreachable provider ----------------------


def _pending_payout(make_order, fake_stripe, key="log-key-1", approval="7"):
    """An entry the provider answered `pending` (a bank refund that takes days)."""
    order = make_order("100.00", external_id="ORD-LOG", payment_ref="pi_log")
    fake_stripe.refund_status = "pending"
    entry = ledger_refund_issue(
        order=order, amount="30.00", currency="USD", idempotency_key=key, source="approval", approval_ref=approval
    )
    entry = ledger_refund_payout(entry_id=entry.pk)
    assert entry.status == "pending" and entry.provider_ref
    return entry


def _webhook(fake_stripe, type_, refund, django_capture_on_commit_callbacks):
    body = json.dumps(
        {
            "id": f"evt_{type_}_{refund['id']}",
            "object": "event",
            "type": type_,
            "data": {"object": refund},
            "api_version": "2025-01-01",
            "created": 1_700_000_000,
        }
    ).encode()
    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/webhooks/stripe",
            data=body,
            content_type="application/json",
            HTTP_STRIPE_SIGNATURE=sign_webhook(body, "whsec_test_secret"),
        )
    assert response.status_code == 200, response.content


def test_a_pending_payout_is_info_and_a_failure_reported_later_by_webhook_is_an_error(
    db, make_order, fake_stripe, json_log, django_capture_on_commit_callbacks
):
    # given a payout the provider answered pending
    entry = _pending_payout(make_order, fake_stripe)
    [result] = _payout_lines(json_log)
    assert (result["level"], result["status"], result["provider_ref"]) == ("INFO", "pending", entry.provider_ref)
    # when Stripe's webhook says the refund failed (the card was closed)
    refund = dict(fake_stripe.public(fake_stripe.refunds[entry.provider_ref]))
    refund.update(status="failed", failure_reason="expired_or_canceled_card")
    _webhook(fake_stripe, "refund.failed", refund, django_capture_on_commit_callbacks)

    # then one ERROR line says the status changed, from what, by which source, and why
    [change] = _payout_lines(json_log, "payout.status_changed")
    assert (change["level"], change["from_status"], change["status"]) == ("ERROR", "pending", "failed")
    assert change["source"] == "webhook" and change["event_ref"] == f"evt_refund.failed_{entry.provider_ref}"
    assert "expired_or_canceled_card" in change["reason"]
    assert PAYOUT_FIELDS <= set(change)
    assert (change["order"], change["ledger_entry"], change["amount"]) == ("ORD-LOG", entry.pk, "30.00")
    assert change["approval"] == "7"
    # and the same webhook again logs nothing (nothing changed)
    _webhook(fake_stripe, "refund.failed", refund, django_capture_on_commit_callbacks)
    assert len(_payout_lines(json_log, "payout.status_changed")) == 1


def test_a_pending_payout_that_succeeds_when_the_sweep_polls_is_one_info_line(db, make_order, fake_stripe, json_log):
    # given a pending payout that the provider has since completed (its webhook lost)
    entry = _pending_payout(make_order, fake_stripe)
    fake_stripe.refunds[entry.provider_ref]["status"] = "succeeded"
    # when the sweep polls the provider
    with mock.patch("django.utils.timezone.now", return_value=timezone.now() + timedelta(minutes=5)):
        assert refund_entries_poll(older_than=timedelta(minutes=1)) == 1
    # then one INFO line says pending -> succeeded, from the provider's answer
    [change] = _payout_lines(json_log, "payout.status_changed")
    assert (change["level"], change["from_status"], change["status"], change["source"]) == (
        "INFO",
        "pending",
        "succeeded",
        "gateway",
    )
    assert change["provider_ref"] == entry.provider_ref and "reason" not in change


def test_an_unreachable_provider_is_a_warning_and_no_result(db, make_order, fake_stripe, json_log, settings):
    # given Stripe answers 500 to every attempt
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    order = make_order("100.00", external_id="ORD-DOWN", payment_ref="pi_down")
    entry = ledger_refund_issue(
        order=order, amount="30.00", currency="USD", idempotency_key="log-down", source="approval", approval_ref="9"
    )
    fake_stripe.fail_next("500")
    # when the payout runs, it raises (the caller retries)
    with pytest.raises(PaymentProviderUnavailable):
        ledger_refund_payout(entry_id=entry.pk)
    # then a WARNING line says the provider was unavailable and the entry stays pending; no result yet
    [line] = _payout_lines(json_log, "payout.unavailable")
    assert (line["level"], line["status"], line["order"]) == ("WARNING", "pending", "ORD-DOWN")
    assert "unavailable" in line["reason"]
    assert _payout_lines(json_log) == []


def test_a_refund_made_at_the_provider_by_hand_is_a_warning(
    db, make_order, fake_stripe, json_log, django_capture_on_commit_callbacks
):
    # given a 40.00 refund someone made by hand in Stripe's dashboard
    order = make_order("100.00", external_id="ORD-HAND", payment_ref="pi_hand")
    refund = fake_stripe.public(fake_stripe.add_refund(payment_intent="pi_hand", amount=4000))
    # when Stripe's webhook tells us
    _webhook(fake_stripe, "refund.created", refund, django_capture_on_commit_callbacks)
    # then one WARNING line says money left outside the product, for finance to review
    [line] = _payout_lines(json_log, "payout.external")
    entry = RefundEntry.objects.get(order=order)
    assert (line["level"], line["status"], line["order"], line["amount"]) == (
        "WARNING",
        "external",
        "ORD-HAND",
        "40.00",
    )
    assert (line["ledger_entry"], line["provider_ref"], line["gateway"]) == (entry.pk, refund["id"], "stripe")
    assert line["tenant"] == order.tenant_id
