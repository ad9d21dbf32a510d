"""An order with more line items, transactions or refunds than a page reads of each is read
again whole, never cut short without a word; one too large to read whole is refused by name.
Against the fake Shopify over HTTP."""

from decimal import Decimal

import pytest

from ledger.models import Order, RefundEntry
from ledger.shopify import queries
from ledger.shopify.sync import shopify_order_refresh, shopify_sync

from .shopify_helpers import connect

pytestmark = pytest.mark.django_db
DOMAIN = "acme.myshopify.com"


def large_order(fake_shopify, email="big@example.com"):
    """25 line items of 4.00, paid by 7 sales (6 x 14.00 by card, 16.00 by gift card), with 4
    refunds made in Shopify's admin, 1.00 each on the first four sales."""
    lines = [{"title": f"Part {n}", "sku": f"PART-{n:02d}", "quantity": 1, "price": "4.00"} for n in range(25)]
    sales = [{"kind": "SALE", "gateway": "shopify_payments", "amount": "14.00"}] * 6
    sales.append({"kind": "SALE", "gateway": "gift_card", "amount": "16.00"})
    placed = fake_shopify.add_order(DOMAIN, email=email, line_items=lines, transactions=sales)
    for txn in placed.txns[:4]:
        fake_shopify.refund_in_admin(placed, "1.00", transaction=txn)
    return placed


def assert_whole(order, placed):
    items = list(order.items.order_by("line_no"))
    assert [i.item_id for i in items] == [f"PART-{n:02d}" for n in range(25)]
    assert sorted(p.payment_ref for p in order.payments.all()) == sorted(t.id for t in placed.txns[:7])
    assert sum(p.amount for p in order.payments.all()) == Decimal("100.00")
    externals = RefundEntry.objects.filter(order=order, status="external")
    assert externals.count() == 4
    assert {e.payment.payment_ref for e in externals} == {t.id for t in placed.txns[:4]}


def test_a_sync_reads_an_order_of_25_lines_7_transactions_and_4_refunds_whole(fake_shopify, tenant):
    # given more than a page reads of each nested list, beside a small order
    assert queries.LINE_ITEMS_FIRST < 25 and queries.TRANSACTIONS_FIRST < 7 and queries.REFUNDS_FIRST < 4
    conn = connect(fake_shopify, tenant)
    placed = large_order(fake_shopify)
    fake_shopify.add_order(DOMAIN, email="small@example.com")

    # when the store is synced
    result = shopify_sync(connection_id=conn.pk)

    # then every line, payment and admin refund of the large order is there, without a warning
    assert (result.created, result.skipped, result.warnings) == (2, 0, [])
    assert_whole(Order.objects.get(tenant=tenant, external_id=placed.name), placed)
    # and the rest was read with the nested documents, for that order only
    bodies = [c["body"].decode() for c in fake_shopify.graphql_calls()]
    assert sum("OrderLineItems" in b for b in bodies) == 1  # lines 11 to 110 asked for: 15 came
    assert sum("OrderTransactions" in b and placed.id in b for b in bodies) == 1
    assert sum("OrderRefundList" in b and placed.id in b for b in bodies) == 1
    assert fake_shopify.throttled == 0


def test_line_items_page_on_their_connection_until_the_last(fake_shopify, tenant):
    # given an order of 215 line items: the page's 10, then two nested pages of 100, then 5
    conn = connect(fake_shopify, tenant)
    lines = [{"title": "Bolt", "sku": f"BOLT-{n:03d}", "quantity": 1, "price": "1.00"} for n in range(215)]
    placed = fake_shopify.add_order(DOMAIN, email="bolts@example.com", line_items=lines)

    # when the store is synced
    shopify_sync(connection_id=conn.pk)

    # then every line is there once, in Shopify's order
    order = Order.objects.get(tenant=tenant, external_id=placed.name)
    assert list(order.items.order_by("line_no").values_list("item_id", flat=True)) == [line["sku"] for line in lines]
    bodies = [c["body"].decode() for c in fake_shopify.graphql_calls()]
    assert sum("OrderLineItems" in b for b in bodies) == 3


def test_a_webhook_reads_the_large_order_whole_too(fake_shopify, tenant):
    conn = connect(fake_shopify, tenant)
    placed = large_order(fake_shopify)
    counts = shopify_order_refresh(connection_id=conn.pk, order_gid=placed.id)
    assert (counts.created, counts.skipped) == (1, 0)
    assert_whole(Order.objects.get(tenant=tenant, external_id=placed.name), placed)


def test_an_order_with_more_transactions_than_can_be_read_is_refused_by_name(fake_shopify, tenant):
    # given an order with as many transactions as the whole read takes, and a normal one
    conn = connect(fake_shopify, tenant)
    many = [{"kind": "SALE", "amount": "1.00"}] * queries.ORDER_TRANSACTIONS_FIRST
    huge = fake_shopify.add_order(DOMAIN, email="huge@example.com", transactions=many)
    fake_shopify.add_order(DOMAIN, email="ok@example.com")

    # when the store is synced
    result = shopify_sync(connection_id=conn.pk)

    # then the other order is stored, the huge one refused with the reason, nothing of it stored
    assert (result.created, result.skipped) == (1, 1)
    [warning] = result.warnings
    assert huge.id in warning and "transactions" in warning and "read in part" in warning
    assert not Order.objects.filter(tenant=tenant, external_id=huge.name).exists()
