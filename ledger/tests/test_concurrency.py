"""Many workers refunding one order at the same moment, on real PostgreSQL row locks."""

import random
from decimal import Decimal

import pytest

from ledger.exceptions import RefundRefused
from ledger.models import RefundEntry
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_issue

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 12


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_refunds_never_exceed_the_order_total(make_order, run_concurrently, seed):
    # given a 100.00 order and 12 workers each wanting a random 5.00..30.00 refund of it
    order = make_order("100.00")
    rng = random.Random(seed)
    wanted = {f"c{seed}-{i}": Decimal(rng.randint(500, 3000)) / 100 for i in range(THREADS)}

    def refund(key, amount):
        return ledger_refund_issue(order=order, amount=amount, currency="USD", idempotency_key=key)

    # when they all refund at once
    results = dict(zip(wanted, run_concurrently(refund, list(wanted.items())), strict=True))

    # then only domain refusals happened, and no more than the total was refunded
    unexpected = [r for r in results.values() if isinstance(r, Exception) and not isinstance(r, RefundRefused)]
    assert unexpected == []
    accepted = {k: r for k, r in results.items() if isinstance(r, RefundEntry)}
    refused = {k for k, r in results.items() if isinstance(r, RefundRefused)}
    assert accepted and len(accepted) + len(refused) == THREADS
    position = order_refund_position(order)
    assert position.refunded_total == sum(wanted[k] for k in accepted) <= Decimal("100.00")
    # every accepted refund is in the ledger exactly once, with its amount; refused ones wrote nothing
    rows = list(RefundEntry.objects.filter(order=order).values_list("idempotency_key", "amount"))
    assert sorted(rows) == sorted((k, wanted[k]) for k in accepted)
    assert {r.pk for r in accepted.values()} == set(
        RefundEntry.objects.filter(order=order).values_list("pk", flat=True)
    )
    # a refusal was right when it happened, and the left-over only shrank since
    assert all(wanted[k] > position.refundable for k in refused)


def test_concurrent_refunds_of_the_same_item_refund_it_once(make_order, run_concurrently):
    # given an order whose one Water Bottle line has a single unit
    order = make_order("100.00", items=[("ITEM-1", "47.84", 1), ("ITEM-2", "52.16", 1)])

    def refund(key):
        return ledger_refund_issue(
            order=order, amount="47.84", currency="USD", idempotency_key=key, item_ids=["ITEM-1"]
        )

    # when 8 workers refund that item at once
    results = run_concurrently(refund, [(f"item-{i}",) for i in range(8)])

    # then exactly one succeeds
    assert sum(isinstance(r, RefundEntry) for r in results) == 1
    assert all(isinstance(r, RefundEntry | RefundRefused) for r in results)
    assert order_refund_position(order).refunded_total == Decimal("47.84")


def test_two_refunds_racing_past_the_total_one_wins_and_the_other_is_refused_on_what_is_left(
    make_order, run_concurrently
):
    # given orders of 100.00, and for each two workers wanting 60.00 and 50.00 at the same moment
    orders = [make_order("100.00") for _ in range(4)]

    def refund(order, amount, key):
        return ledger_refund_issue(order=order, amount=amount, currency="USD", idempotency_key=key)

    for n, order in enumerate(orders):
        results = run_concurrently(refund, [(order, "60.00", f"{n}-a"), (order, "50.00", f"{n}-b")])

        # then exactly one was written, the other refused on what was left after it
        won = [r for r in results if isinstance(r, RefundEntry)]
        lost = [r for r in results if isinstance(r, RefundRefused)]
        assert len(won) == 1 and len(lost) == 1, results
        assert lost[0].code == "refund_exceeds_refundable"
        assert lost[0].details == {"refundable": str(Decimal("100.00") - won[0].amount)}
        assert order_refund_position(order).refunded_total == won[0].amount
        assert list(RefundEntry.objects.filter(order=order).values_list("pk", flat=True)) == [won[0].pk]
