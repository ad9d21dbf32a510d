"""Approved refunds paid through Shopify's refundCreate (the fake over HTTP): exactly once, on
exactly the approved legs, read back before the ticket is refunded; and an order changed in
Shopify between approval and payout is caught."""

from decimal import Decimal

import pytest

from approvals.models import ApprovalRequest
from ledger.models import Order, PaymentMethod, RefundEntry
from ledger.shopify.sync import shopify_sync
from ledger.tests.shopify_helpers import connect
from refundagent.models import Ticket
from refundagent.tests.payments_support import approve, ticket_awaiting_approval, ticket_gated

pytestmark = pytest.mark.django_db
DOMAIN = "acme.myshopify.com"


@pytest.fixture
def store(fake_shopify, tenant, policy, make_user):
    """A connected store; `store.order(...)` places an order in it and syncs it in."""

    class Store:
        connection = connect(fake_shopify, tenant)
        support = make_user("support", "support")
        finance = make_user("finance", "finance")

        def order(self, **kwargs):
            placed = fake_shopify.add_order(DOMAIN, email="ada@example.com", **kwargs)
            shopify_sync(connection_id=self.connection.pk)
            return placed, Order.objects.get(tenant=tenant, external_id=placed.name)

    return Store()


def approved(store, order, amount, key="approval-key-1", capture=None, refund_to=None):
    if refund_to is None:
        ticket, request = ticket_awaiting_approval(order=order, filer=store.support, amount=amount, key=key)
    else:
        ticket, _, request = ticket_gated(order=order, filer=store.support, amount=amount, key=key, refund_to=refund_to)
    with capture(execute=True):
        approve(request, store.finance)
    ticket.refresh_from_db()
    request.refresh_from_db()
    return ticket, request


def test_an_approved_refund_is_one_refund_create_read_back_before_refunded(
    fake_shopify, store, django_capture_on_commit_callbacks
):
    # given a synced order paid 100.00 by card
    placed, order = store.order(transactions=[{"kind": "SALE", "gateway": "shopify_payments", "amount": "100.00"}])

    # when finance approves 30.00
    ticket, request = approved(store, order, "30.00", capture=django_capture_on_commit_callbacks)

    # then Shopify got exactly one refundCreate: the approval's key, the card sale, 30.00, no notification
    [call] = fake_shopify.refund_creates
    assert call["key"] == request.idempotency_key == "approval-key-1"
    refund_input = call["input"]
    assert refund_input["notify"] is False and refund_input["orderId"] == placed.id
    assert [(t["parentId"], t["gateway"], Decimal(t["amount"])) for t in refund_input["transactions"]] == [
        (placed.txns[0].id, "shopify_payments", Decimal("30.00"))
    ]
    # and the ledger names Shopify's refund, the evaluator read it back, the ticket is refunded
    [entry] = RefundEntry.objects.filter(order=order)
    assert (entry.gateway, entry.status, entry.amount) == ("shopify", "succeeded", Decimal("30.00"))
    assert entry.provider_ref.startswith("gid://shopify/Refund/")
    checks = {c["name"]: c["ok"] for c in request.verification["checks"]}
    assert checks["provider_refund_id"] and checks["provider_amount"] and checks["provider_metadata_approval"]
    assert request.status == ApprovalRequest.Status.EXECUTED and ticket.status == Ticket.Status.REFUNDED
    # and Shopify holds 30.00 refunded on the order
    assert placed.txns[0].remaining == Decimal("70.00")


def test_split_tender_the_gift_card_leg_only_on_the_gift_card_transaction(
    fake_shopify, store, django_capture_on_commit_callbacks
):
    # given an order paid 100.00 by card and 20.00 by gift card
    placed, order = store.order(
        transactions=[
            {"kind": "SALE", "gateway": "shopify_payments", "amount": "100.00"},
            {"kind": "SALE", "gateway": "gift_card", "amount": "20.00"},
        ]
    )
    gift_card = PaymentMethod.objects.get(customer=order.customer, kind="gift_card")

    # when 20.00 is approved back to the gift card
    ticket, request = approved(store, order, "20.00", capture=django_capture_on_commit_callbacks, refund_to=gift_card)

    # then the one refundCreate returns 20.00 on the gift card transaction and nothing on the card
    [call] = fake_shopify.refund_creates
    assert [(t["parentId"], t["gateway"], t["amount"]) for t in call["input"]["transactions"]] == [
        (placed.txns[1].id, "gift_card", "20.00")
    ]
    assert placed.txns[0].remaining == Decimal("100.00") and placed.txns[1].remaining == Decimal("0.00")
    assert ticket.status == Ticket.Status.REFUNDED


def test_a_lost_response_then_a_retry_with_the_same_key_makes_one_refund(
    fake_shopify, store, django_capture_on_commit_callbacks
):
    # given an order, and Shopify doing the refund but dropping the connection before answering
    placed, order = store.order()
    fake_shopify.fail_next(1, status="drop", on="mutation")

    # when finance approves (the client retries with the same key)
    ticket, request = approved(store, order, "25.00", capture=django_capture_on_commit_callbacks)

    # then two refundCreate calls carried the one key, and Shopify made one refund
    assert [c["key"] for c in fake_shopify.refund_creates] == ["approval-key-1", "approval-key-1"]
    assert len(placed.refund_list) == 1 and placed.txns[0].remaining == Decimal("75.00")
    assert ticket.status == Ticket.Status.REFUNDED


@pytest.mark.parametrize("fault", [500, 503, "slow"])
def test_a_5xx_or_slow_answer_retries_with_the_same_key_and_pays_once(
    fake_shopify, store, settings, django_capture_on_commit_callbacks, fault
):
    settings.SHOPIFY_TIMEOUT_SECONDS = 1
    placed, order = store.order()
    fake_shopify.fail_next(1, status=fault, seconds=2, on="mutation")
    ticket, _ = approved(store, order, "10.00", capture=django_capture_on_commit_callbacks)
    assert {c["key"] for c in fake_shopify.refund_creates} == {"approval-key-1"}
    assert len(placed.refund_list) == 1 and ticket.status == Ticket.Status.REFUNDED


def test_shopify_down_leaves_the_refund_pending_then_a_retry_pays_it_once(
    fake_shopify, store, settings, django_capture_on_commit_callbacks
):
    from approvals.services.execution import approval_execute

    # given Shopify failing every refundCreate attempt
    settings.SHOPIFY_MAX_ATTEMPTS = 2
    placed, order = store.order()
    fake_shopify.fail_next(2, status=502, on="mutation")
    ticket, request = approved(store, order, "10.00", capture=django_capture_on_commit_callbacks)
    [entry] = RefundEntry.objects.filter(order=order)
    assert entry.status == "pending" and ticket.status == Ticket.Status.APPROVED
    assert placed.refund_list == []

    # when the execution runs again (the sweep does this)
    approval_execute(request_id=request.pk)

    # then one refund, under the same key, and the ticket is refunded
    entry.refresh_from_db()
    ticket.refresh_from_db()
    assert entry.status == "succeeded" and len(placed.refund_list) == 1
    assert {c["key"] for c in fake_shopify.refund_creates} == {"approval-key-1"}
    assert ticket.status == Ticket.Status.REFUNDED


def test_user_errors_are_payment_failed_with_shopifys_message(fake_shopify, store, django_capture_on_commit_callbacks):
    # given an order whose card sale was voided in Shopify after it was synced
    placed, order = store.order()
    fake_shopify.void_transaction(placed.txns[0])

    # when finance approves a refund of it
    ticket, request = approved(store, order, "10.00", capture=django_capture_on_commit_callbacks)

    # then no refund was made, and the ticket is back with finance with the reason
    assert placed.refund_list == []
    [entry] = RefundEntry.objects.filter(order=order)
    assert entry.status == "failed"
    assert ticket.status == Ticket.Status.PAYMENT_FAILED


# --- an order changed in Shopify between approval and payout ------------------------------------


def webhook(fake_shopify, topic, payload, capture):
    """Deliver a signed webhook as Shopify would, its work run after commit."""
    import json
    import uuid
    from datetime import UTC, datetime

    from django.test import Client

    from ledger.tests.shopify_helpers import SECRET

    body = json.dumps(payload).encode()
    with capture(execute=True):
        response = Client().post(
            "/webhooks/shopify",
            data=body,
            content_type="application/json",
            HTTP_X_SHOPIFY_TOPIC=topic,
            HTTP_X_SHOPIFY_SHOP_DOMAIN=DOMAIN,
            HTTP_X_SHOPIFY_EVENT_ID=str(uuid.uuid4()),
            HTTP_X_SHOPIFY_TRIGGERED_AT=datetime.now(UTC).isoformat(),
            HTTP_X_SHOPIFY_HMAC_SHA256=fake_shopify.sign(body, SECRET),
        )
    assert response.status_code == 200


@pytest.mark.parametrize("change", ["cancelled", "refunded_in_admin"])
def test_an_order_changed_in_shopify_before_the_decision_is_caught_by_the_re_check(
    fake_shopify, store, django_capture_on_commit_callbacks, change
):
    from approvals.exceptions import ApprovalConflict

    # given a pending request for 80.00 of a 100.00 order
    placed, order = store.order()
    ticket, request = ticket_awaiting_approval(order=order, filer=store.support, amount="80.00", key="k-change")
    # and the order changed in Shopify's admin, its webhook delivered
    if change == "cancelled":
        fake_shopify.cancel_order(placed)
        webhook(
            fake_shopify,
            "orders/cancelled",
            fake_shopify.order_webhook_payload(placed),
            django_capture_on_commit_callbacks,
        )
    else:
        refund = fake_shopify.refund_in_admin(placed, "50.00")
        webhook(
            fake_shopify,
            "refunds/create",
            fake_shopify.refund_webhook_payload(refund),
            django_capture_on_commit_callbacks,
        )

    # when finance approves
    with pytest.raises(ApprovalConflict) as raised:
        approve(request, store.finance)

    # then 409, the request invalidated, and no refundCreate at Shopify
    assert raised.value.code == "approval_invalidated"
    request.refresh_from_db()
    assert request.status == ApprovalRequest.Status.INVALIDATED
    assert fake_shopify.refund_creates == []


def test_a_transaction_voided_after_approval_is_caught_before_any_refund(
    fake_shopify, store, django_capture_on_commit_callbacks
):
    # given an approved request whose execution has not run yet
    placed, order = store.order()
    ticket, request = ticket_awaiting_approval(order=order, filer=store.support, amount="40.00", key="k-void")
    with django_capture_on_commit_callbacks(execute=False):
        approve(request, store.finance)
    # and the sale voided in Shopify meanwhile
    fake_shopify.void_transaction(placed.txns[0])

    # when the execution runs
    from approvals.services.execution import approval_execute

    approval_execute(request_id=request.pk)

    # then nothing was sent to refundCreate, and finance has it back with Shopify's word
    assert fake_shopify.refund_creates == []
    [entry] = RefundEntry.objects.filter(order=order)
    ticket.refresh_from_db()
    assert entry.status == "failed"
    assert "can return only 0" in entry.events.order_by("id").last().reason
    assert ticket.status == Ticket.Status.PAYMENT_FAILED


# --- reconciliation against the store ------------------------------------------------------------


def test_reconciliation_compares_each_order_with_shopifys_refunds_and_total(
    fake_shopify, store, django_capture_on_commit_callbacks
):
    from django.core.management import call_command

    from ledger.models import ReconciliationFinding
    from ledger.reconciliation import payments_reconcile

    # given an order refunded 30.00 through the product
    placed, order = store.order()
    approved(store, order, "30.00", capture=django_capture_on_commit_callbacks)

    # when reconciled: Shopify and the ledger agree, nothing found
    run = payments_reconcile()
    assert run.findings_count == 0 and run.provider_refunds == 1
    call_command("reconcile_payments")  # exits 0

    # when someone refunds 10.00 more in Shopify's admin and no webhook or sync told the ledger
    fake_shopify.refund_in_admin(placed, "10.00", transaction=placed.txns[0])
    run = payments_reconcile()

    # then it is recorded as an external entry, with a finding for finance, and the totals agree again
    [finding] = ReconciliationFinding.objects.filter(run=run)
    assert finding.kind == "missing_in_ledger" and finding.entry.status == "external"
    assert finding.entry.amount == Decimal("10.00") and finding.entry.payment.payment_ref == placed.txns[0].id
    assert payments_reconcile().findings_count == 0


def test_reconciliation_finds_a_ledger_amount_shopify_does_not_have(
    fake_shopify, store, django_capture_on_commit_callbacks
):
    from ledger.reconciliation import payments_reconcile
    from ledger.services import ledger_refund_correct

    # given a refund of 30.00 through Shopify, corrected by hand in the ledger to 25.00
    placed, order = store.order()
    approved(store, order, "30.00", capture=django_capture_on_commit_callbacks)
    entry = RefundEntry.objects.get(order=order)
    ledger_refund_correct(entry=entry, new_amount="25.00", reason="typo")

    # when reconciled
    run = payments_reconcile()

    # then the refund's amount and the order's total both differ from Shopify's
    kinds = sorted(run.findings.values_list("kind", flat=True))
    assert kinds == ["amount_differs", "amount_differs"]
    assert {f.provider_amount for f in run.findings.all()} == {Decimal("30.00")}
