"""Payments an order gains in Shopify after it was first stored (a capture after the
authorisation, a second capture, a later sale) are added to it, by a webhook or a re-sync; the
payments already stored stay exactly as they were (refunds depend on them), and a voided
transaction is never a payment. Against the fake Shopify over HTTP."""

from decimal import Decimal

import pytest

from ledger.models import Order, Payment, RefundEntry
from ledger.selectors import order_refund_position
from ledger.shopify.sync import shopify_order_refresh, shopify_sync

from .shopify_helpers import connect

pytestmark = pytest.mark.django_db
DOMAIN = "acme.myshopify.com"
LINES = [{"title": "Tent", "sku": "TENT-1", "quantity": 1, "price": "100.00"}]


def payments(order):
    return sorted((p.payment_ref, p.method, p.amount) for p in order.payments.all())


def test_captures_after_the_authorisation_become_payments_once(fake_shopify, tenant):
    # given an order only authorised when it was first synced: no payment yet
    conn = connect(fake_shopify, tenant)
    placed = fake_shopify.add_order(
        DOMAIN, email="ada@example.com", line_items=LINES, transactions=[{"kind": "AUTHORIZATION", "amount": "100.00"}]
    )
    shopify_sync(connection_id=conn.pk)
    order = Order.objects.get(tenant=tenant, external_id=placed.name)
    assert payments(order) == []

    # when 60.00 is captured, and the order read again (what the orders/updated webhook does)
    auth = placed.txns[0]
    first = fake_shopify.add_transaction(placed, kind="CAPTURE", amount="60.00", parent=auth)
    counts = shopify_order_refresh(connection_id=conn.pk, order_gid=placed.id)

    # then the capture is the order's payment, on the customer's card method
    assert (counts.payments_added, counts.updated, counts.skipped) == (1, 1, 0)
    assert payments(order) == [(first.id, "card", Decimal("60.00"))]
    assert order.payments.get().payment_method.external_id == "shopify_payments"

    # when the rest is captured later and the store synced (twice)
    second = fake_shopify.add_transaction(placed, kind="CAPTURE", amount="40.00", parent=auth)
    result = shopify_sync(connection_id=conn.pk)
    again = shopify_sync(connection_id=conn.pk, since=None)

    # then the second capture is added once; a repeat adds nothing
    assert (result.payments_added, result.updated) == (1, 1)
    assert (again.payments_added, again.updated) == (0, 0)
    assert payments(order) == sorted([(first.id, "card", Decimal("60.00")), (second.id, "card", Decimal("40.00"))])
    assert result.warnings == [] and again.warnings == []


def test_a_later_payment_never_rewrites_the_refunded_one_and_a_void_is_no_payment(fake_shopify, tenant):
    # given an order paid 100.00 by card, 30.00 of it refunded in Shopify's admin, all synced
    conn = connect(fake_shopify, tenant)
    placed = fake_shopify.add_order(DOMAIN, email="bo@example.com", line_items=LINES)
    sale = placed.txns[0]
    fake_shopify.refund_in_admin(placed, "30.00", transaction=sale)
    shopify_sync(connection_id=conn.pk)
    order = Order.objects.get(tenant=tenant, external_id=placed.name)
    [stored] = order.payments.all()
    external = RefundEntry.objects.get(order=order)

    # when the sale is voided in Shopify, a gift card sale of 20.00 is added, and one more that is voided too
    fake_shopify.void_transaction(sale)
    gift = fake_shopify.add_transaction(placed, kind="SALE", gateway="gift_card", amount="20.00")
    voided = fake_shopify.add_transaction(placed, kind="SALE", amount="5.00")
    fake_shopify.void_transaction(voided)
    result = shopify_sync(connection_id=conn.pk)

    # then the gift card sale is a new payment; the refunded card payment is kept as it was,
    # with a warning that Shopify's payments now differ; the voided sale is no payment
    assert result.payments_added == 1 and result.skipped == 0
    assert payments(order) == sorted([(sale.id, "card", Decimal("100.00")), (gift.id, "gift_card", Decimal("20.00"))])
    stored_again = Payment.objects.get(pk=stored.pk)
    assert (stored_again.amount, stored_again.payment_ref) == (stored.amount, stored.payment_ref)
    assert RefundEntry.objects.get(order=order) == external and external.payment_id == stored.pk
    assert any("kept its recorded payments" in w for w in result.warnings)
    assert order_refund_position(order).refunded_total == Decimal("30.00")


def test_an_order_of_the_same_name_imported_another_way_gets_no_payments_from_shopify(fake_shopify, tenant):
    from ledger.importing import orders_import

    # given #1001 imported from a file, with its own payment (no Shopify transaction id)
    orders_import(
        data={
            "tenant": tenant.slug,
            "customers": [{"id": "c@example.com", "name": "C", "email": "c@example.com"}],
            "orders": [
                {
                    "id": "#1001",
                    "customer": "c@example.com",
                    "total": "100.00",
                    "currency": "USD",
                    "placed_at": "2026-01-01",
                    "payment": {"method": "card", "amount": "100.00", "payment_ref": "pi_1"},
                }
            ],
        }
    )
    conn = connect(fake_shopify, tenant)
    fake_shopify.add_order(DOMAIN, email="c@example.com", line_items=LINES)

    # when the store is synced twice
    shopify_sync(connection_id=conn.pk)
    shopify_sync(connection_id=conn.pk, since=None)

    # then the order keeps the one payment it was imported with
    assert payments(Order.objects.get(tenant=tenant, external_id="#1001")) == [("pi_1", "card", Decimal("100.00"))]


@pytest.mark.django_db(transaction=True)
def test_a_webhook_and_a_sync_adding_the_same_capture_at_once_add_it_once(fake_shopify, tenant):
    import threading

    from django.db import connection as db

    # given an authorised order, synced, then captured in Shopify
    conn = connect(fake_shopify, tenant)
    placed = fake_shopify.add_order(
        DOMAIN, email="ada@example.com", line_items=LINES, transactions=[{"kind": "AUTHORIZATION", "amount": "100.00"}]
    )
    shopify_sync(connection_id=conn.pk)
    capture = fake_shopify.add_transaction(placed, kind="CAPTURE", amount="100.00", parent=placed.txns[0])
    barrier = threading.Barrier(4)
    errors = []

    def run(work):
        try:
            barrier.wait()
            work()
        except Exception as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)
        finally:
            db.close()

    # when two webhooks' work and two syncs apply it at the same moment
    works = [lambda: shopify_order_refresh(connection_id=conn.pk, order_gid=placed.id)] * 2
    works += [lambda: shopify_sync(connection_id=conn.pk, since=None)] * 2
    threads = [threading.Thread(target=run, args=(w,)) for w in works]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    # then the capture is one payment
    assert errors == []
    order = Order.objects.get(tenant=tenant, external_id=placed.name)
    assert payments(order) == [(capture.id, "card", Decimal("100.00"))]
