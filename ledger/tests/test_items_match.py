"""The one rule that matches item ids to order lines (ledger.selectors.items_match): pure, no
database. The ledger, the policy gate, the tools and the offline planner all use it."""

from decimal import Decimal

from ledger.selectors import LinePosition, items_match


def line(line_no, item_id, price, quantity=1, refunded=0):
    return LinePosition(
        line_no=line_no,
        item_id=item_id,
        name=item_id,
        price=Decimal(price),
        quantity=quantity,
        refunded_quantity=refunded,
    )


LINES = [
    line(1, "BOTTLE", "47.84"),
    line(2, "SOCKS", "11.08"),
    line(3, "SOCKS", "11.08", refunded=1),
    line(4, "SOCKS", "11.08"),
    line(5, "MUG", "25.00", quantity=2),
]


def test_a_repeated_id_takes_one_unrefunded_unit_each_in_line_order():
    match = items_match(LINES, ["SOCKS", "SOCKS", "MUG", "MUG"])

    # line 3's unit is already refunded: the second SOCKS comes from line 4
    assert match.units == {2: 1, 4: 1, 5: 2}
    assert match.value == Decimal("72.16")
    assert match.unmatched == [] and match.not_on_order == []


def test_ids_with_no_unit_left_are_unmatched_and_unknown_ids_are_not_on_the_order():
    match = items_match(LINES, ["SOCKS", "SOCKS", "SOCKS", "NOPE", "BOTTLE"])

    assert match.units == {2: 1, 4: 1, 1: 1}
    assert match.value == Decimal("70.00")  # 47.84 + 2 × 11.08
    assert match.unmatched == ["SOCKS", "NOPE"]
    assert match.not_on_order == ["NOPE"]


def test_no_ids_match_nothing():
    assert items_match(LINES, []).value == Decimal("0.00")
    assert items_match([], ["BOTTLE"]).not_on_order == ["BOTTLE"]
