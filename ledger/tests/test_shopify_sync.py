"""Orders from Shopify, mapped onto the product's records by the import's own service, and the
resumable sync (against the fake Shopify over HTTP)."""

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection as db
from django.test.utils import CaptureQueriesContext

from ledger.models import Customer, Order, Payment, RefundEntry, ShopifyConnection, ShopifyOrder, Tenant
from ledger.selectors import order_refund_position
from ledger.shopify import queries
from ledger.shopify.connection import shopify_client_for
from ledger.shopify.mapping import shopify_orders_apply
from ledger.shopify.sync import shopify_sync

from .shopify_helpers import connect

DOMAIN = "acme.myshopify.com"
SPLIT = [
    {"kind": "SALE", "gateway": "shopify_payments", "amount": "100.00"},
    {"kind": "SALE", "gateway": "gift_card", "amount": "20.00"},
]


class Killed(BaseException):
    """The process dies mid-run (not an Exception: nothing catches it)."""


def sync_lines(tenant, **options):
    from io import StringIO

    out = StringIO()
    call_command("shopify_sync", tenant=tenant.slug, stdout=out, **options)
    return out.getvalue().strip().splitlines()


def test_an_order_maps_to_its_name_customer_payments_items_and_admin_refunds(fake_shopify, tenant):
    # given a split-tender order with two lines, one of them refunded in Shopify's admin
    conn = connect(fake_shopify, tenant)
    placed = fake_shopify.add_order(
        DOMAIN,
        email="Ada@Example.com",
        customer={"email": "ada@example.com", "first_name": "Ada", "last_name": "Lovelace"},
        line_items=[
            {"title": "Water bottle", "sku": "BOTTLE-1", "quantity": 2, "price": "40.00"},
            {"title": "Cap", "sku": "CAP-1", "quantity": 1, "price": "40.00"},
        ],
        transactions=SPLIT,
    )
    card_sale = placed.txns[0]
    fake_shopify.refund_in_admin(placed, "15.00", transaction=card_sale)

    # when the store is synced
    lines = sync_lines(tenant)

    # then the order is #1001, its customer found by email, paid by a card and a gift card
    assert lines[-1] == "shopify_sync orders=1 created=1 updated=0"
    order = Order.objects.get(tenant=tenant, external_id="#1001")
    assert order.total == Decimal("120.00") and order.currency == "USD" and order.status == "processed"
    assert order.customer.external_id == "ada@example.com" and order.customer.email == "ada@example.com"
    payments = {p.method: p for p in order.payments.all()}
    assert set(payments) == {"card", "gift_card"}
    assert payments["card"].amount == Decimal("100.00") and payments["gift_card"].amount == Decimal("20.00")
    assert payments["card"].payment_ref == card_sale.id == f"gid://shopify/OrderTransaction/{card_sale.num}"
    assert payments["gift_card"].payment_ref == placed.txns[1].id
    items = list(order.items.order_by("line_no"))
    assert [(i.item_id, i.quantity, i.price) for i in items] == [
        ("BOTTLE-1", 2, Decimal("40.00")),
        ("CAP-1", 1, Decimal("40.00")),
    ]
    assert items[0].options["shopify_line_item"].startswith("gid://shopify/LineItem/")
    # and the admin's refund is an external entry on the card payment, counting against the order
    external = RefundEntry.objects.get(order=order)
    assert (external.status, external.gateway, external.amount) == ("external", "shopify", Decimal("15.00"))
    assert external.payment == payments["card"] and external.needs_review
    assert order_refund_position(order).refundable == Decimal("105.00")
    assert ShopifyOrder.objects.get(order=order).connection == conn


def test_a_resync_duplicates_nothing_and_follows_a_cancellation(fake_shopify, tenant):
    # given a synced order
    connect(fake_shopify, tenant)
    placed = fake_shopify.add_order(DOMAIN, email="bo@example.com")
    fake_shopify.refund_in_admin(placed, "10.00")
    sync_lines(tenant)

    # when nothing changed: twice changes nothing
    assert sync_lines(tenant, since="2020-01-01")[-1] == "shopify_sync orders=1 created=0 updated=0"

    # when it is cancelled in Shopify and its total edited
    fake_shopify.cancel_order(placed)
    sync_lines(tenant, since="2020-01-01")

    # then it is cancelled, nothing duplicated, and its total (a refund depends on it) is kept
    order = Order.objects.get(tenant=tenant)
    assert order.status == "cancelled"
    assert Order.objects.count() == 1 and Customer.objects.count() == 1 and Payment.objects.count() == 1
    assert RefundEntry.objects.filter(order=order).count() == 1


def test_a_sync_killed_after_two_pages_resumes_with_nothing_missing_or_doubled(fake_shopify, tenant):
    # given 30 orders, and a run that dies while asking for its third page
    conn = connect(fake_shopify, tenant)
    for n in range(30):
        fake_shopify.add_order(DOMAIN, email=f"c{n}@example.com", updated_at=f"2026-01-01T00:{n:02d}:00Z")
    client = shopify_client_for(conn)
    real = client.graphql
    pages = []

    def dies_on_page_three(query, variables=None):
        if query == queries.ORDERS_PAGE:
            pages.append(variables)
            if len(pages) == 3:
                raise Killed()
        return real(query, variables)

    client.graphql = dies_on_page_three
    with pytest.raises(Killed):
        shopify_sync(connection_id=conn.pk, client=client)
    stored_before = Order.objects.count()
    assert 0 < stored_before < 30
    assert ShopifyConnection.objects.get(pk=conn.pk).sync_cursor  # the checkpoint

    # when it is run again
    lines = sync_lines(tenant)

    # then it resumed after the last stored page: every order once, none twice
    assert "resumed" in lines[-2]
    assert Order.objects.count() == 30 and ShopifyOrder.objects.count() == 30
    assert lines[-1] == f"shopify_sync orders={30 - stored_before} created={30 - stored_before} updated=0"
    conn.refresh_from_db()
    assert conn.sync_cursor == "" and conn.last_synced_at is not None


def test_shopify_down_or_throttled_during_a_sync_loses_nothing(fake_shopify, tenant, settings):
    # given 40 orders, a store answering 500 then 503 at first, then dropping a connection
    connect(fake_shopify, tenant)
    for n in range(40):
        fake_shopify.add_order(DOMAIN, email=f"d{n}@example.com")
    fake_shopify.fail_next(1, status=500, on="query")
    fake_shopify.fail_next(1, status=503, on="query")
    fake_shopify.fail_next(1, status="drop", on="query")

    # when the store is synced
    lines = sync_lines(tenant)

    # then every order is there once, and the sync waited on the bucket instead of being throttled
    assert lines[-1] == "shopify_sync orders=40 created=40 updated=0"
    assert Order.objects.count() == 40
    assert fake_shopify.throttled == 0


def test_a_sync_that_keeps_failing_exits_1_and_the_next_run_resumes(fake_shopify, tenant, settings):
    settings.SHOPIFY_MAX_ATTEMPTS = 2
    connect(fake_shopify, tenant)
    for n in range(3):
        fake_shopify.add_order(DOMAIN, email=f"e{n}@example.com")
    fake_shopify.fail_next(2, status=502, on="query")
    with pytest.raises(CommandError, match="run again to resume"):
        sync_lines(tenant)
    assert Order.objects.count() == 0
    assert sync_lines(tenant)[-1] == "shopify_sync orders=3 created=3 updated=0"


@pytest.mark.parametrize(
    "options,reason",
    [({"tenant": "nope"}, "no Shopify connection"), ({"tenant": "shop", "since": "2026-13-01"}, "YYYY-MM-DD")],
)
def test_bad_arguments_exit_1_with_the_reason(fake_shopify, tenant, options, reason):
    connect(fake_shopify, tenant)
    with pytest.raises(CommandError, match=reason):
        call_command("shopify_sync", **options)
    assert Order.objects.count() == 0


def test_a_page_is_applied_with_the_same_number_of_queries_whatever_its_size(fake_shopify, tenant):
    # given a store of 10 orders, each with its own customer, read as a page of 2 and a page of 8
    # (the most a query of this document may ask for under Shopify's 1,000-point cap)
    conn = connect(fake_shopify, tenant)
    for n in range(10):
        fake_shopify.add_order(DOMAIN, email=f"q{n}@example.com", transactions=SPLIT)
    client = shopify_client_for(conn)
    small = client.graphql(queries.ORDERS_PAGE, {"first": 2})["orders"]
    large = client.graphql(queries.ORDERS_PAGE, {"first": 8, "after": small["pageInfo"]["endCursor"]})["orders"]

    # when each is applied
    with CaptureQueriesContext(db) as two:
        shopify_orders_apply(connection=conn, nodes=small["nodes"])
    with CaptureQueriesContext(db) as eight:
        shopify_orders_apply(connection=conn, nodes=large["nodes"])

    # then four times the orders cost no more queries
    assert Order.objects.count() == 10
    assert len(eight.captured_queries) <= len(two.captured_queries)


def test_two_tenants_with_the_same_order_names_never_see_each_others_orders(fake_shopify, tenant):
    # given two stores, both with an order #1001, connected to two tenants
    other = Tenant.objects.create(slug="other", name="Other")
    connect(fake_shopify, tenant)
    connect(fake_shopify, other, "globex.myshopify.com", client_id="client-2", secret="shpss_other")
    fake_shopify.add_order(DOMAIN, email="same@example.com", transactions=[{"kind": "SALE", "amount": "10.00"}])
    fake_shopify.add_order(
        "globex.myshopify.com", email="same@example.com", transactions=[{"kind": "SALE", "amount": "99.00"}]
    )

    # when both are synced
    sync_lines(tenant)
    sync_lines(other)

    # then each tenant has its own #1001, with its own store's amount and customer
    mine, theirs = Order.objects.get(tenant=tenant), Order.objects.get(tenant=other)
    assert mine.external_id == theirs.external_id == "#1001"
    assert (mine.total, theirs.total) == (Decimal("10.00"), Decimal("99.00"))
    assert mine.customer.tenant == tenant and theirs.customer.tenant == other
    assert ShopifyOrder.objects.get(order=mine).connection.tenant == tenant


def test_every_graphql_document_is_valid_against_the_schema(fake_shopify):
    from graphql import parse, validate

    for name, document in queries.ALL.items():
        assert validate(fake_shopify.schema, parse(document)) == [], name


def test_a_slow_answer_during_a_sync_is_retried_and_nothing_is_lost(fake_shopify, tenant, settings):
    settings.SHOPIFY_TIMEOUT_SECONDS = 1
    connect(fake_shopify, tenant)
    for n in range(6):
        fake_shopify.add_order(DOMAIN, email=f"s{n}@example.com")
    fake_shopify.fail_next(1, status="slow", seconds=2, on="query")
    assert sync_lines(tenant)[-1] == "shopify_sync orders=6 created=6 updated=0"
    assert Order.objects.count() == 6
