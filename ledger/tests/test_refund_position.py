"""The refund position read: one query, built once per process and always the database's answer
of the moment; the tenant-scoped reads answer an id no column can hold as one that is not there."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.exceptions import NotFound
from ledger.models import Order
from ledger.selectors import order_get, order_refund_position
from ledger.services import ledger_refund_issue

pytestmark = pytest.mark.django_db


def test_the_position_follows_the_ledger_between_two_reads(tenant, make_order):
    # given an order read once (the query is now built)
    order = make_order()
    before = order_refund_position(order)
    assert before.refunded_total == Decimal("0.00")
    # when a refund is written
    ledger_refund_issue(order=order, amount="10.00", currency=order.currency, idempotency_key="position-1")
    # then the next read sees it: only the query was kept, never an answer
    assert order_refund_position(order).refunded_total == Decimal("10.00")


def test_the_position_is_one_query_and_reads_only_its_order(tenant, make_order):
    # given two orders with lines, one of them read once already
    order = make_order("100.00", items=[("ITEM-1", "40.00", 1), ("ITEM-2", "60.00", 1)])
    other = make_order("30.00", items=[("ITEM-9", "30.00", 1)])
    order_refund_position(other)

    # when the other is read
    with CaptureQueriesContext(connection) as queries:
        position = order_refund_position(order)

    # then one query, its own lines only
    assert len(queries) == 1
    assert [line.item_id for line in position.lines] == ["ITEM-1", "ITEM-2"]
    assert (position.total, position.refundable) == (Decimal("100.00"), Decimal("100.00"))


@pytest.mark.parametrize("impossible", [2**63, 28167181019273453568, -(2**63) - 1])
def test_an_id_wider_than_any_column_matches_nothing(tenant, make_order, impossible):
    # given an id no integer column can hold
    order = make_order()
    assert not Order.objects.filter(pk=impossible).exists()  # the ORM's answer: nothing, no query error

    # then a read by it answers as for an order that is not there, and the real one is still read
    fake = Order(pk=impossible, tenant=tenant, total=Decimal("1.00"), currency="USD", external_id="X")
    assert order_refund_position(fake).lines == []
    with pytest.raises(NotFound):
        order_get(tenant=tenant, external_id=str(impossible))
    assert order_get(tenant=tenant, external_id=order.external_id) == order
