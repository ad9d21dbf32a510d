"""One order the mapping refuses (hostile data, amounts in another currency than the ledger
recorded) is skipped with a warning for the operator, never the whole sync: the other orders
are stored, the cursor moves past it, a re-run meets it again without looping, and it stays
named on the connection (its admin) until Shopify's data is fixed. Against the fake over HTTP."""

from io import StringIO

import pytest
from django.core.management import call_command

from ledger.models import Order, ShopifyConnection, ShopifyOrder
from ledger.shopify import queries
from ledger.shopify.connection import shopify_client_for
from ledger.shopify.sync import shopify_order_refresh, shopify_sync

from .shopify_helpers import connect

pytestmark = pytest.mark.django_db
DOMAIN = "acme.myshopify.com"
HOSTILE = "#10\x0703"  # a control character: the import refuses it


def test_one_bad_order_among_good_ones_is_skipped_named_and_the_sync_goes_on(fake_shopify, tenant):
    # given 8 orders (two pages: the first holds 5), the third with a name the import refuses
    conn = connect(fake_shopify, tenant)
    placed = [
        fake_shopify.add_order(
            DOMAIN,
            email=f"c{n}@example.com",
            name=HOSTILE if n == 2 else None,
            updated_at=f"2026-01-01T00:0{n}:00Z",
        )
        for n in range(8)
    ]
    bad = placed[2]
    client = shopify_client_for(conn)
    cursors = []
    real = client.graphql

    def recording(query, variables=None):
        if query == queries.ORDERS_PAGE:
            cursors.append((variables or {}).get("after"))
        return real(query, variables)

    client.graphql = recording

    # when the store is synced
    result = shopify_sync(connection_id=conn.pk, client=client)

    # then the 7 good orders are stored, the bad one is not, and the warning names it and why
    assert (result.orders, result.created, result.skipped) == (8, 7, 1)
    assert Order.objects.filter(tenant=tenant).count() == 7 and ShopifyOrder.objects.count() == 7
    assert not ShopifyOrder.objects.filter(shopify_id=bad.id).exists()
    [warning] = result.warnings
    assert bad.id in warning and "skipped" in warning and "control character" in warning
    # and the run went on past the bad order's page to the end: two pages, the second after a cursor
    assert result.pages == 2 and cursors[0] is None and cursors[1]
    conn.refresh_from_db()
    assert conn.sync_cursor == "" and conn.last_synced_at is not None and conn.sync_started_at is None
    # and the connection names it for the operator
    assert set(conn.refused_orders) == {bad.id}
    assert "control character" in conn.refused_orders[bad.id]["reason"]

    # when the command runs again over the same orders
    out, err = StringIO(), StringIO()
    call_command("shopify_sync", tenant=tenant.slug, since="2020-01-01", stdout=out, stderr=err)

    # then it ends (no loop), stores nothing twice, and warns again about the same order
    assert out.getvalue().strip().splitlines()[-1] == "shopify_sync orders=8 created=0 updated=0"
    assert bad.id in err.getvalue() and "skipped=1" in out.getvalue()
    assert Order.objects.filter(tenant=tenant).count() == 7

    # when it is renamed in Shopify to the name of another of the shop's orders
    fake_shopify.update_order(bad, name="#1003")
    result = shopify_sync(connection_id=conn.pk, since=None)

    # then the two are never merged into one record: still skipped, the other order untouched
    [warning] = result.warnings
    assert "#1003 is already" in warning and result.skipped == 1
    assert ShopifyOrder.objects.get(order__external_id="#1003").shopify_id == placed[3].id

    # when it is given a name of its own and synced again
    fake_shopify.update_order(bad, name="#1099")
    result = shopify_sync(connection_id=conn.pk, since=None)

    # then it is stored, and no longer named on the connection
    assert (result.created, result.skipped) == (1, 0)
    assert ShopifyOrder.objects.get(order__external_id="#1099").shopify_id == bad.id
    conn.refresh_from_db()
    assert conn.refused_orders == {}


def test_an_order_now_in_another_currency_than_recorded_is_skipped_the_rest_stored(fake_shopify, tenant):
    # given an order synced in USD
    conn = connect(fake_shopify, tenant)
    first = fake_shopify.add_order(DOMAIN, email="a@example.com")
    shopify_sync(connection_id=conn.pk)

    # when the shop moves to EUR: the old order's amounts are now in EUR, a new order is placed
    fake_shopify.shop(DOMAIN).currency = "EUR"
    fake_shopify.update_order(first, note="edited")
    fake_shopify.add_order(DOMAIN, email="b@example.com")
    result = shopify_sync(connection_id=conn.pk)

    # then the new order is stored in EUR; the old one is skipped, kept in USD, and named
    assert (result.created, result.skipped) == (1, 1)
    assert Order.objects.get(tenant=tenant, external_id="#1002").currency == "EUR"
    old = Order.objects.get(tenant=tenant, external_id="#1001")
    assert (old.currency, old.note) == ("USD", "")
    [warning] = result.warnings
    assert "#1001" in warning and "EUR" in warning and "USD" in warning
    assert set(ShopifyConnection.objects.get(pk=conn.pk).refused_orders) == {first.id}


def test_a_webhook_whose_order_is_refused_is_processed_and_the_refusal_recorded(fake_shopify, tenant):
    # given a connected store and an order with a hostile name
    conn = connect(fake_shopify, tenant)
    bad = fake_shopify.add_order(DOMAIN, email="a@example.com", name=HOSTILE)

    # when a webhook's work reads it again
    counts = shopify_order_refresh(connection_id=conn.pk, order_gid=bad.id)

    # then nothing is stored, no exception escapes (no endless task retries), and it is named
    assert (counts.created, counts.skipped) == (0, 1)
    assert Order.objects.count() == 0
    assert set(ShopifyConnection.objects.get(pk=conn.pk).refused_orders) == {bad.id}


def test_the_admin_of_the_connection_shows_its_refused_orders(fake_shopify, tenant, admin_client):
    # given a connection with a refused order
    conn = connect(fake_shopify, tenant)
    bad = fake_shopify.add_order(DOMAIN, email="a@example.com", name=HOSTILE)
    shopify_sync(connection_id=conn.pk)

    # when an operator opens it in the admin
    response = admin_client.get(f"/admin/ledger/shopifyconnection/{conn.pk}/change/")

    # then the order and the reason are on the page (escaped shop text)
    assert response.status_code == 200
    page = response.content.decode()
    assert bad.id in page and "control character" in page and "\x07" not in page
