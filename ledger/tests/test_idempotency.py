"""One idempotency key, one entry: replays return it, a different request under the key is refused."""

import threading
import time
from decimal import Decimal

import pytest
from django.db import IntegrityError, connection, transaction

from ledger.exceptions import IdempotencyConflict
from ledger.models import RefundEntry
from ledger.selectors import order_refunded_total
from ledger.services import ledger_refund_issue


def test_the_same_key_delivered_many_times_writes_one_entry(make_order):
    # given an order
    order = make_order("100.00")

    # when the same refund is delivered five times
    entries = [
        ledger_refund_issue(order=order, amount="30.00", currency="USD", idempotency_key="approval:7") for _ in range(5)
    ]

    # then it is one entry, returned each time, and 30.00 was refunded once
    assert {e.pk for e in entries} == {entries[0].pk}
    assert RefundEntry.objects.filter(idempotency_key="approval:7").count() == 1
    assert order_refunded_total(order) == Decimal("30.00")


@pytest.mark.parametrize(
    "change",
    [{"amount": "31.00"}, {"item_ids": ["ITEM-1"]}, {"approval_ref": "8"}, {"destination_kind": "gift_card"}],
)
def test_the_same_key_with_other_arguments_is_refused(make_order, change):
    # given a refund recorded under a key
    order = make_order("100.00", items=[("ITEM-1", "100.00", 1)])
    args = {"order": order, "amount": "30.00", "currency": "USD", "idempotency_key": "approval:7", "approval_ref": "7"}
    first = ledger_refund_issue(**args)

    # when the key comes back with different arguments
    with pytest.raises(IdempotencyConflict) as refused:
        ledger_refund_issue(**{**args, **change})

    # then it is refused, names the entry, and nothing more was written
    assert refused.value.details == {"refund_id": first.pk}
    assert refused.value.status_code == 409
    assert RefundEntry.objects.filter(order=order).count() == 1
    assert order_refunded_total(order) == Decimal("30.00")


def test_the_same_key_on_another_order_is_refused(make_order):
    first, second = make_order("100.00"), make_order("100.00")
    ledger_refund_issue(order=first, amount="10.00", currency="USD", idempotency_key="k")

    with pytest.raises(IdempotencyConflict):
        ledger_refund_issue(order=second, amount="10.00", currency="USD", idempotency_key="k")

    assert not RefundEntry.objects.filter(order=second).exists()


def test_the_database_refuses_a_duplicate_key_written_around_the_service(make_order):
    order = make_order("100.00")
    ledger_refund_issue(order=order, amount="10.00", currency="USD", idempotency_key="dup")

    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO ledger_refundentry (tenant_id, order_id, amount, currency, destination_kind,
               idempotency_key, request_hash, source, approval_ref, reason, created_at)
               VALUES (%s, %s, 1, 'USD', '', 'dup', 'x', 'manual', '', '', now())""",
            [order.tenant_id, order.pk],
        )
    assert RefundEntry.objects.filter(idempotency_key="dup").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_same_key_delivered_concurrently_writes_one_entry(make_order, run_concurrently):
    # given an order
    order = make_order("100.00")

    # when ten workers deliver the same refund at the same moment
    results = run_concurrently(
        lambda: ledger_refund_issue(order=order, amount="40.00", currency="USD", idempotency_key="approval:9"),
        [()] * 10,
    )

    # then all got the same entry back and the ledger holds it once
    assert all(isinstance(r, RefundEntry) for r in results), results
    assert len({r.pk for r in results}) == 1
    assert RefundEntry.objects.filter(idempotency_key="approval:9").count() == 1
    assert order_refunded_total(order) == Decimal("40.00")


@pytest.mark.django_db(transaction=True)
def test_the_same_key_concurrently_on_two_orders_writes_one_entry(make_order, run_concurrently):
    # given two orders (so the two order locks do not serialise the workers)
    first, second = make_order("100.00"), make_order("100.00")

    # when both orders get a refund under one key at the same moment, many times over
    results = run_concurrently(
        lambda o: ledger_refund_issue(order=o, amount="10.00", currency="USD", idempotency_key="shared"),
        [(first,), (second,)] * 4,
    )

    # then one order got it and every other delivery was a replay or a conflict, never a second entry
    assert RefundEntry.objects.filter(idempotency_key="shared").count() == 1
    winner = RefundEntry.objects.get(idempotency_key="shared")
    for r in results:
        assert (isinstance(r, RefundEntry) and r.pk == winner.pk) or isinstance(r, IdempotencyConflict), r


@pytest.mark.django_db(transaction=True)
def test_a_key_raced_in_from_another_order_is_replayed_as_a_conflict_not_an_error(make_order):
    # given a refund under key K on one order, written but not yet committed
    first, second = make_order("100.00"), make_order("100.00")
    started, result = threading.Event(), {}

    def other_order():
        started.wait(10)
        begun = time.monotonic()
        try:
            result["value"] = ledger_refund_issue(order=second, amount="10.00", currency="USD", idempotency_key="K")
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            result["value"] = exc
        finally:
            result["waited"] = time.monotonic() - begun
            connection.close()

    worker = threading.Thread(target=other_order)
    worker.start()
    with transaction.atomic():
        mine = ledger_refund_issue(order=first, amount="10.00", currency="USD", idempotency_key="K")
        # when another order's writer (not held up by this order's lock) uses K before the commit
        started.set()
        time.sleep(0.5)
    worker.join(30)

    # then its insert waited for this transaction on the key's unique index, and the
    # IntegrityError it got was replayed against the stored entry: a conflict naming it, no error
    assert result["waited"] >= 0.3
    assert isinstance(result["value"], IdempotencyConflict), result["value"]
    assert result["value"].details == {"refund_id": mine.pk}
    assert list(RefundEntry.objects.filter(idempotency_key="K").values_list("order_id", flat=True)) == [first.pk]
    assert not RefundEntry.objects.filter(order=second).exists()
