"""Refunds for named items: capped by the items' price and by what is left on the order."""

from decimal import Decimal

import pytest

from ledger.exceptions import RefundRefused
from ledger.models import RefundEntryItem
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_issue


@pytest.fixture
def order(make_order):
    # τ-bench style: the same item id on two lines, one unit each
    return make_order(
        "150.00",
        items=[("BOTTLE", "47.84", 1), ("CHAIR", "80.00", 1), ("SOCKS", "11.08", 1), ("SOCKS", "11.08", 1)],
    )


def refund(order, amount, items, key):
    return ledger_refund_issue(order=order, amount=amount, currency="USD", idempotency_key=key, item_ids=items)


def test_an_item_refund_is_capped_at_the_price_of_the_items(order):
    with pytest.raises(RefundRefused) as refused:
        refund(order, "47.85", ["BOTTLE"], "k1")
    assert refused.value.code == "refund_exceeds_items"

    entry = refund(order, "47.84", ["BOTTLE"], "k2")

    [line] = RefundEntryItem.objects.filter(entry=entry)
    assert (line.order_item.item_id, line.quantity, line.amount) == ("BOTTLE", 1, Decimal("47.84"))


def test_an_item_refund_is_capped_at_what_is_left_on_the_order(order):
    # given 100.00 of 150.00 already refunded without items
    refund(order, "100.00", [], "k1")

    # when the 80.00 chair is refunded, then only the 50.00 left can be
    with pytest.raises(RefundRefused) as refused:
        refund(order, "80.00", ["CHAIR"], "k2")
    assert refused.value.code == "refund_exceeds_refundable"
    refund(order, "50.00", ["CHAIR"], "k3")
    assert order_refund_position(order).refundable == Decimal("0.00")


def test_the_same_item_cannot_be_refunded_twice(order):
    refund(order, "10.00", ["BOTTLE"], "k1")

    with pytest.raises(RefundRefused) as refused:
        refund(order, "10.00", ["BOTTLE"], "k2")

    assert refused.value.code == "item_not_refundable"
    assert RefundEntryItem.objects.filter(order_item__item_id="BOTTLE").count() == 1


def test_an_item_on_two_lines_is_refunded_once_per_unit(order):
    # when SOCKS (on two lines) is refunded one unit at a time
    first = refund(order, "11.08", ["SOCKS"], "k1")
    second = refund(order, "11.08", ["SOCKS"], "k2")

    # then each refund took a different line, and a third is refused
    lines = {RefundEntryItem.objects.get(entry=e).order_item.line_no for e in (first, second)}
    assert lines == {3, 4}
    with pytest.raises(RefundRefused):
        refund(order, "11.08", ["SOCKS"], "k3")


def test_both_units_of_a_repeated_item_in_one_refund(order):
    entry = refund(order, "22.16", ["SOCKS", "SOCKS"], "k1")

    assert RefundEntryItem.objects.filter(entry=entry).count() == 2
    with pytest.raises(RefundRefused):
        refund(order, "1.00", ["SOCKS"], "k2")


def test_a_line_with_quantity_two_is_refunded_unit_by_unit(make_order):
    order = make_order("50.00", items=[("MUG", "25.00", 2)])

    entry = refund(order, "50.00", ["MUG", "MUG"], "k1")

    [line] = RefundEntryItem.objects.filter(entry=entry)
    assert (line.quantity, line.amount) == (2, Decimal("50.00"))


def test_an_item_not_on_the_order_is_refused(order):
    with pytest.raises(RefundRefused) as refused:
        refund(order, "1.00", ["NOPE"], "k1")

    assert "NOPE" in refused.value.message
    assert not RefundEntryItem.objects.exists()
