"""The database itself refuses what the service would never write (migration 0002).

Each test goes around the service with raw SQL, as a bug or a hand-typed query would.
The cap trigger is deferred to commit; `SET CONSTRAINTS ALL IMMEDIATE` makes it fire inside
the test's transaction, and one test commits for real to show the deferred path.
"""

from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from ledger.models import RefundEntry, RefundEntryItem, RefundRevision
from ledger.selectors import order_refunded_total
from ledger.services import ledger_refund_correct, ledger_refund_issue


def _insert_entry(order, amount, key, currency=None):
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO ledger_refundentry
               (tenant_id, order_id, amount, currency, destination_kind, idempotency_key, request_hash,
                source, approval_ref, reason, created_at)
               VALUES (%s, %s, %s, %s, 'original', %s, 'raw', 'manual', '', 'raw sql', now())
               RETURNING id""",
            [order.tenant_id, order.pk, amount, currency or order.currency, key],
        )
        return cursor.fetchone()[0]


def _immediate():
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@pytest.fixture
def refunded_order(make_order):
    order = make_order("100.00", items=[("ITEM-1", "60.00", 1), ("ITEM-2", "40.00", 1)])
    entry = ledger_refund_issue(order=order, amount="60.00", currency="USD", idempotency_key="k1", item_ids=["ITEM-1"])
    revision = ledger_refund_correct(entry=entry, new_amount="50.00", reason="partial return")
    return order, entry, revision


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE ledger_refundentry SET amount = 1",
        "DELETE FROM ledger_refundentry",
        "UPDATE ledger_refundentryitem SET quantity = 2",
        "DELETE FROM ledger_refundentryitem",
        "UPDATE ledger_refundrevision SET new_amount = 1",
        "DELETE FROM ledger_refundrevision",
    ],
)
def test_raw_update_and_delete_of_ledger_history_are_refused(refunded_order, sql):
    # given an order with a refund, its item and a correction
    order, entry, revision = refunded_order

    # when raw SQL tries to rewrite or erase that history
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql)

    # then every row is still there, unchanged
    entry = RefundEntry.objects.get(pk=entry.pk)
    assert entry.amount == Decimal("60.00")
    assert RefundEntryItem.objects.get(entry=entry).quantity == 1
    assert RefundRevision.objects.get(pk=revision.pk).new_amount == Decimal("50.00")


def test_raw_insert_above_the_order_total_is_refused(refunded_order):
    # given 50.00 of 100.00 refunded (60.00 corrected down to 50.00)
    order, _, _ = refunded_order

    # when raw SQL inserts a refund of 50.01
    with pytest.raises(IntegrityError, match="above the order total"), transaction.atomic():
        _immediate()
        _insert_entry(order, "50.01", "raw-1")

    # then nothing was written, and exactly what is left still fits
    assert order_refunded_total(order) == Decimal("50.00")
    with transaction.atomic():
        _immediate()
        _insert_entry(order, "50.00", "raw-2")
    assert order_refunded_total(order) == Decimal("100.00")


def test_raw_revision_raising_an_amount_above_the_total_is_refused(refunded_order):
    # given a 50.00 (effective) refund on a 100.00 order
    _, entry, _ = refunded_order

    # when raw SQL appends a revision that makes it 100.01
    with pytest.raises(IntegrityError, match="above the order total"), transaction.atomic():
        _immediate()
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_refundrevision (entry_id, old_amount, new_amount, reason, created_at) "
                "VALUES (%s, 50, 100.01, 'raw', now())",
                [entry.pk],
            )

    # then the newest revision is still the service's
    assert entry.revisions.order_by("-id").first().new_amount == Decimal("50.00")


def test_raw_insert_refunding_a_line_twice_is_refused(refunded_order):
    # given ITEM-1 (one unit) already refunded
    order, _, _ = refunded_order
    line = order.items.get(item_id="ITEM-1")

    # when raw SQL adds a second refund of that unit
    with pytest.raises(IntegrityError, match="units"), transaction.atomic():
        _immediate()
        entry_id = _insert_entry(order, "1.00", "raw-3")
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO ledger_refundentryitem (entry_id, order_item_id, quantity, amount) VALUES (%s, %s, 1, 1)",
                [entry_id, line.pk],
            )

    # then the line is refunded once
    assert RefundEntryItem.objects.filter(order_item=line).count() == 1


def test_raw_insert_in_another_currency_is_refused(refunded_order):
    order, _, _ = refunded_order

    with pytest.raises(IntegrityError, match="currency or tenant"), transaction.atomic():
        _immediate()
        _insert_entry(order, "1.00", "raw-4", currency="EUR")

    assert not RefundEntry.objects.filter(idempotency_key="raw-4").exists()


def test_lowering_an_order_total_below_its_refunds_is_refused(refunded_order):
    order, _, _ = refunded_order

    with pytest.raises(IntegrityError, match="above the order total"), transaction.atomic():
        _immediate()
        with connection.cursor() as cursor:
            cursor.execute("UPDATE ledger_order SET total = 49.99 WHERE id = %s", [order.pk])

    order.refresh_from_db()
    assert order.total == Decimal("100.00")


@pytest.mark.django_db(transaction=True)
def test_the_cap_trigger_fires_at_commit(make_order):
    # given a 100.00 order, outside any test transaction
    order = make_order("100.00")

    # when one raw transaction inserts two refunds that only together exceed the total
    with pytest.raises(IntegrityError, match="above the order total"):
        with transaction.atomic():
            _insert_entry(order, "70.00", "raw-5")
            _insert_entry(order, "70.00", "raw-6")

    # then the commit was refused as a whole
    assert not RefundEntry.objects.filter(order=order).exists()


def test_a_key_is_refused_twice_by_its_one_index(tenant, make_order):
    # the idempotency key is unique through one index only: no `_like` index beside it (0008)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'ledger_refundentry' "
            "AND indexdef LIKE '%%(idempotency_key%%'"
        )
        indexes = cursor.fetchall()
    assert [name for name, _ in indexes] == ["ledger_refundentry_idempotency_key_key"]
    assert "UNIQUE" in indexes[0][1]
    # and a raw INSERT that reuses a key is refused by it
    order = make_order()
    _insert_entry(order, "1.00", "backstop-key-once")
    with pytest.raises(IntegrityError, match="ledger_refundentry_idempotency_key_key"), transaction.atomic():
        _insert_entry(order, "1.00", "backstop-key-once")
