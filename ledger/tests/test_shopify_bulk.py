"""The backfill through a Shopify bulk operation (ledger/shopify/bulk.py), against the fake over
HTTP: the file re-assembled into orders, a killed run resumed with the same operation, failures
surfaced with a consistent checkpoint, hostile lines as warnings."""

import json
from contextlib import contextmanager
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection as db
from django.test.utils import CaptureQueriesContext

from ledger.models import Order, Payment, RefundEntry, ShopifyConnection, ShopifyOrder, Tenant
from ledger.selectors import order_refund_position
from ledger.shopify import bulk
from ledger.shopify.bulk import shopify_backfill

from .shopify_helpers import connect

DOMAIN = "acme.myshopify.com"
OTHER = "globex.myshopify.com"


class Killed(BaseException):
    """The process dies mid-run (not an Exception: nothing catches it)."""


@pytest.fixture
def fake(fake_shopify):
    fake_shopify.bulk.polls_to_finish = 1  # one poll (half a second), not two
    return fake_shopify


def no_sleep(seconds):
    pass


def sync(tenant, **options) -> tuple[list[str], list[str]]:
    out, err = StringIO(), StringIO()
    call_command("shopify_sync", tenant=tenant.slug, stdout=out, stderr=err, **options)
    return out.getvalue().strip().splitlines(), err.getvalue().strip().splitlines()


def add_orders(fake, domain, count, prefix="c"):
    return [
        fake.add_order(
            domain, email=f"{prefix}{n}@example.com", updated_at=f"2026-01-01T{n // 60:02d}:{n % 60:02d}:00Z"
        )
        for n in range(count)
    ]


@contextmanager
def dies_on_batch(number: int, monkeypatch):
    """The process dies applying its `number`th batch (the batches before it stored)."""
    real = bulk.shopify_orders_apply
    batches = []

    def apply(*, connection, nodes, **options):
        batches.append(len(nodes))
        if len(batches) == number:
            raise Killed()
        return real(connection=connection, nodes=nodes, **options)

    with monkeypatch.context() as patch:
        patch.setattr(bulk, "shopify_orders_apply", apply)
        yield


def bulk_runs(fake, domain=DOMAIN):
    return [r for r in fake.bulk.runs if r["shop"] == domain]


def test_a_full_sync_reads_every_order_through_one_bulk_operation_with_nested_lines(fake, tenant):
    # given a split-tender order with two lines and a refund in the admin, an order refunded
    # twice (the file cannot say which refund returned which transaction), and 300 plain orders
    connect(fake, tenant)
    split = fake.add_order(
        DOMAIN,
        email="ada@example.com",
        line_items=[
            {"title": "Bottle", "sku": "BOTTLE-1", "quantity": 2, "price": "40.00"},
            {"title": "Cap", "sku": "CAP-1", "quantity": 1, "price": "40.00"},
        ],
        transactions=[
            {"kind": "SALE", "gateway": "shopify_payments", "amount": "100.00"},
            {"kind": "SALE", "gateway": "gift_card", "amount": "20.00"},
        ],
    )
    fake.refund_in_admin(split, "15.00", transaction=split.txns[0])
    twice = fake.add_order(DOMAIN, email="bo@example.com")
    fake.refund_in_admin(twice, "10.00")
    fake.refund_in_admin(twice, "5.00")
    add_orders(fake, DOMAIN, 300)
    graphql_before = len(fake.graphql_calls())

    # when the store is synced for the first time with --full
    lines, _ = sync(tenant, full=True)

    # then one bulk operation, no `first` in it, and a handful of GraphQL calls for 302 orders
    assert lines[-1] == "shopify_sync orders=302 created=302 updated=0"
    assert lines[-2].startswith("bulk_operation=gid://shopify/BulkOperation/") and "reread=1" in lines[-2]
    assert len(bulk_runs(fake)) == 1 and "first" not in bulk_runs(fake)[0]["query"]
    assert len(fake.graphql_calls()) - graphql_before <= 4  # run, poll, the order refunded twice
    # and the nested lines, payments and the admin's refunds are as the paged sync maps them
    order = Order.objects.get(tenant=tenant, external_id="#1001")
    assert [(i.item_id, i.quantity) for i in order.items.order_by("line_no")] == [("BOTTLE-1", 2), ("CAP-1", 1)]
    assert {p.method: p.amount for p in order.payments.all()} == {
        "card": Decimal("100.00"),
        "gift_card": Decimal("20.00"),
    }
    external = RefundEntry.objects.get(order=order)
    assert external.payment.payment_ref == split.txns[0].id and external.amount == Decimal("15.00")
    # and each of the twice-refunded order's refunds is its own entry, on the refund that made it
    refunds = {e.reason: e.amount for e in RefundEntry.objects.filter(order__external_id="#1002")}
    first, second = (r.id for r in twice.refund_list)
    assert {reason.split("(")[-1].rstrip(").") for reason in refunds} == {first, second}
    assert sorted(refunds.values()) == [Decimal("5.00"), Decimal("10.00")]
    assert order_refund_position(Order.objects.get(external_id="#1002")).refundable == Decimal("85.00")
    # and the checkpoint is cleared, the sync's bound set
    conn = ShopifyConnection.objects.get(tenant=tenant)
    assert (conn.bulk_operation_id, conn.bulk_lines_applied) == ("", 0) and conn.last_synced_at is not None


def test_a_batch_is_applied_with_the_same_number_of_queries_whatever_its_size(fake, tenant):
    # given two stores, 20 and 40 orders, backfilled in two batches each
    other = Tenant.objects.create(slug="other", name="Other")
    small, large = connect(fake, tenant), connect(fake, other, OTHER, client_id="client-2", secret="shpss_other")
    add_orders(fake, DOMAIN, 20, "s")
    add_orders(fake, OTHER, 40, "l")

    # when each is backfilled
    with CaptureQueriesContext(db) as twenty:
        shopify_backfill(connection_id=small.pk, sleep=no_sleep, batch=10)
    with CaptureQueriesContext(db) as forty:
        shopify_backfill(connection_id=large.pk, sleep=no_sleep, batch=20)

    # then twice the orders per batch cost no more queries
    assert Order.objects.filter(tenant=other).count() == 40
    assert len(forty.captured_queries) <= len(twenty.captured_queries)


def test_a_backfill_killed_mid_apply_resumes_with_the_same_operation_and_doubles_nothing(fake, tenant, monkeypatch):
    # given 30 orders, and a run that dies applying its third batch of 5
    conn = connect(fake, tenant)
    add_orders(fake, DOMAIN, 30)
    with dies_on_batch(3, monkeypatch), pytest.raises(Killed):
        shopify_backfill(connection_id=conn.pk, sleep=no_sleep, batch=5)
    conn.refresh_from_db()
    assert Order.objects.count() == 10 and conn.bulk_operation_id and conn.bulk_lines_applied == 20
    assert conn.last_synced_at is None

    # when it is run again
    lines, _ = sync(tenant)

    # then it resumed the same operation after line 20: every order once, none twice
    assert "resumed" in lines[-2] and len(bulk_runs(fake)) == 1
    assert lines[-1] == "shopify_sync orders=20 created=20 updated=0"
    assert Order.objects.count() == 30 and ShopifyOrder.objects.count() == 30
    conn.refresh_from_db()
    assert conn.bulk_operation_id == "" and conn.last_synced_at is not None


def test_a_file_that_5xxs_once_then_dies_mid_download_is_read_again_past_what_was_applied(fake, tenant):
    # given 40 orders, a file answering 503 once, then cut halfway
    conn = connect(fake, tenant)
    add_orders(fake, DOMAIN, 40)
    fake.fail_next(1, status=503, on="download")
    fake.fail_next(1, status="cut", on="download")

    # when the store is backfilled
    result = shopify_backfill(connection_id=conn.pk, sleep=no_sleep, batch=7)

    # then after three downloads every order is there once
    assert len([c for c in fake.calls if c["endpoint"] == "download"]) == 3
    assert (result.orders, result.created) == (40, 40)
    assert Order.objects.count() == 40 and Payment.objects.count() == 40


def test_a_failed_operation_is_reported_clears_the_checkpoint_and_the_next_run_starts_again(fake, tenant):
    # given an operation Shopify fails (the app lacks a scope)
    connect(fake, tenant)
    add_orders(fake, DOMAIN, 5)
    fake.bulk.fail_next("ACCESS_DENIED", partial=True)

    # when the store is synced: exit 1 with the reason, nothing half-recorded
    with pytest.raises(CommandError, match="FAILED.*ACCESS_DENIED"):
        sync(tenant, full=True)
    conn = ShopifyConnection.objects.get(tenant=tenant)
    assert (conn.bulk_operation_id, conn.last_synced_at) == ("", None) and Order.objects.count() == 0

    # when it is run again: a new operation, everything in
    lines, _ = sync(tenant, full=True)
    assert len(bulk_runs(fake)) == 2 and lines[-1] == "shopify_sync orders=5 created=5 updated=0"


def test_an_operation_still_running_at_the_timeout_is_resumed_by_the_next_run(fake, tenant, settings):
    # given an operation that takes longer than the backfill waits
    settings.SHOPIFY_BULK_TIMEOUT_SECONDS = 1
    conn = connect(fake, tenant)
    add_orders(fake, DOMAIN, 3)
    fake.bulk.polls_to_finish = 1000

    # when the store is synced: exit 1, the operation kept
    with pytest.raises(CommandError, match="still RUNNING.*run again"):
        sync(tenant, full=True)
    conn.refresh_from_db()
    assert conn.bulk_operation_id == "gid://shopify/BulkOperation/1"

    # when it finishes and the sync runs again: the same operation, not a second one
    fake.bulk.polls_to_finish = 1
    result = shopify_backfill(connection_id=conn.pk, sleep=no_sleep)
    assert result.resumed and result.operation_id == conn.bulk_operation_id and len(bulk_runs(fake)) == 1
    assert Order.objects.count() == 3


def test_a_full_rerun_duplicates_nothing_and_later_syncs_stay_paged(fake, tenant):
    # given a backfilled store with an admin refund
    connect(fake, tenant)
    placed = add_orders(fake, DOMAIN, 12)
    fake.refund_in_admin(placed[0], "10.00")
    sync(tenant, full=True)
    counts = (Order.objects.count(), Payment.objects.count(), RefundEntry.objects.count())

    # when it is backfilled again with --full
    lines, _ = sync(tenant, full=True)

    # then nothing is created or changed
    assert lines[-1] == "shopify_sync orders=12 created=0 updated=0" and len(bulk_runs(fake)) == 2
    assert (Order.objects.count(), Payment.objects.count(), RefundEntry.objects.count()) == counts

    # and the next sync (a window after the last one) reads pages, not a bulk operation
    fake.add_order(DOMAIN, email="late@example.com")
    lines, _ = sync(tenant)
    assert lines[-2].startswith("pages=") and len(bulk_runs(fake)) == 2
    assert Order.objects.count() == 13


def test_two_shops_backfilling_at_once_never_mix(fake, tenant, monkeypatch):
    # given two stores with the same order names, and a backfill of the first killed midway
    other = Tenant.objects.create(slug="other", name="Other")
    mine = connect(fake, tenant)
    theirs = connect(fake, other, OTHER, client_id="client-2", secret="shpss_other")
    for n in range(10):
        fake.add_order(DOMAIN, email=f"m{n}@example.com", transactions=[{"kind": "SALE", "amount": "10.00"}])
        fake.add_order(OTHER, email=f"t{n}@example.com", transactions=[{"kind": "SALE", "amount": "99.00"}])
    with dies_on_batch(2, monkeypatch), pytest.raises(Killed):
        shopify_backfill(connection_id=mine.pk, sleep=no_sleep, batch=4)

    # when the second store backfills, then the first resumes
    shopify_backfill(connection_id=theirs.pk, sleep=no_sleep, batch=4)
    shopify_backfill(connection_id=mine.pk, sleep=no_sleep, batch=4)

    # then each tenant has its own ten orders, at its own store's amount
    assert len(bulk_runs(fake, DOMAIN)) == 1 and len(bulk_runs(fake, OTHER)) == 1
    assert {o.total for o in Order.objects.filter(tenant=tenant)} == {Decimal("10.00")}
    assert {o.total for o in Order.objects.filter(tenant=other)} == {Decimal("99.00")}
    assert Order.objects.filter(tenant=tenant).count() == Order.objects.filter(tenant=other).count() == 10
    assert not ShopifyOrder.objects.filter(connection=theirs, order__tenant=tenant).exists()


def test_another_shops_operation_id_is_not_found(fake, tenant):
    # given a stored checkpoint naming another shop's operation (a copied row, a hostile edit)
    other = Tenant.objects.create(slug="other", name="Other")
    mine = connect(fake, tenant)
    theirs = connect(fake, other, OTHER, client_id="client-2", secret="shpss_other")
    fake.add_order(OTHER, email="t@example.com")
    fake.add_order(DOMAIN, email="m@example.com")
    theirs_operation = shopify_backfill(connection_id=theirs.pk, sleep=no_sleep).operation_id
    ShopifyConnection.objects.filter(pk=mine.pk).update(bulk_operation_id=theirs_operation, bulk_lines_applied=0)

    # when the first shop backfills: its own new operation, never the other's file
    result = shopify_backfill(connection_id=mine.pk, sleep=no_sleep)
    assert not result.resumed and result.operation_id != theirs_operation
    assert [o.customer.email for o in Order.objects.filter(tenant=tenant)] == ["m@example.com"]


def test_hostile_lines_in_the_file_are_warnings_not_a_stopped_backfill(fake, tenant):
    # given a file with a bad money string, an unknown gateway, an orphan line item, a line that
    # is not JSON, besides three good orders
    connect(fake, tenant)
    add_orders(fake, DOMAIN, 3)
    bad = fake.add_order(DOMAIN, email="bad@example.com")
    odd = fake.add_order(
        DOMAIN,
        email="odd@example.com",
        transactions=[{"kind": "SALE", "gateway": "<b>Bitcoin Gate</b>", "amount": "7.00"}],
    )

    def tamper(body: bytes) -> bytes:
        out = []
        for raw in body.splitlines():
            line = json.loads(raw)
            if line.get("id") == bad.id:
                line["totalPriceSet"]["shopMoney"]["amount"] = "12,50.x"
            out.append(json.dumps(line).encode())
        out.insert(2, b'{"id": "gid://shopify/LineItem/999", "__parentId": "gid://shopify/Order/424242"}')
        out.insert(4, b"this is not json")
        return b"\n".join(out) + b"\n"

    fake.bulk.tamper = tamper

    # when the store is synced
    lines, warnings = sync(tenant, full=True)

    # then the good orders and the odd gateway are in, each problem a warning, the sync complete
    assert lines[-1].startswith("shopify_sync orders=5 created=4")
    assert Order.objects.filter(tenant=tenant).count() == 4
    assert not Order.objects.filter(customer__email="bad@example.com").exists()
    assert any(bad.name in w and "skipped" in w for w in warnings)
    assert any("Order/424242" in w and "parent" in w for w in warnings)
    assert any("not a Shopify object" in w for w in warnings)
    payment = Payment.objects.get(order__external_id=odd.name)
    assert payment.method == "card" and payment.amount == Decimal("7.00")
    assert ShopifyConnection.objects.get(tenant=tenant).last_synced_at is not None


def test_full_and_since_together_are_refused(fake, tenant):
    connect(fake, tenant)
    with pytest.raises(CommandError, match="--full or --since"):
        sync(tenant, full=True, since="2026-01-01")


def test_a_file_gone_from_storage_clears_the_checkpoint_and_the_next_run_starts_again(fake, tenant):
    # given a completed operation whose file storage no longer has
    conn = connect(fake, tenant)
    add_orders(fake, DOMAIN, 4)
    first = fake.bulk.run(fake.schema, DOMAIN, "{ orders { nodes { id } } }")["bulkOperation"]["id"]
    fake.bulk.by_id(DOMAIN, first)
    fake.bulk.files.clear()
    ShopifyConnection.objects.filter(pk=conn.pk).update(bulk_operation_id=first, bulk_lines_applied=2)

    # when the backfill resumes it: exit 1 with the reason, the checkpoint cleared
    with pytest.raises(CommandError, match="HTTP 404"):
        sync(tenant, full=True)
    conn.refresh_from_db()
    assert conn.bulk_operation_id == "" and conn.last_synced_at is None

    # and the next run starts a new operation and reads everything
    lines, _ = sync(tenant, full=True)
    assert lines[-1] == "shopify_sync orders=4 created=4 updated=0"
