"""Sixteen payouts of different approvals on one order at once, with a slow provider, on real
PostgreSQL: pending entries count, so the order is never refunded above its total, and the slow
provider calls run side by side (none is made under the order lock)."""

import time
from decimal import Decimal

import pytest

from ledger.exceptions import RefundRefused
from ledger.models import RefundEntry
from ledger.payouts import ledger_refund_payout
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_issue

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 16


@pytest.mark.serial  # a wall-clock bound
def test_concurrent_payouts_never_take_the_order_above_its_total(fake_stripe, make_order, run_concurrently):
    # given a 100.00 order, a provider that takes 1 s per call, and 16 approved refunds of 15.00
    order = make_order("100.00", payment_ref="pi_busy")
    fake_stripe.delay = 1.0

    def approve_and_pay(n):
        entry = ledger_refund_issue(
            order=order,
            amount="15.00",
            currency="USD",
            idempotency_key=f"approval-{n}",
            source=RefundEntry.Source.APPROVAL,
            approval_ref=str(n),
        )
        return ledger_refund_payout(entry_id=entry.pk)

    # when they all run at once
    started = time.monotonic()
    results = run_concurrently(approve_and_pay, [(n,) for n in range(THREADS)])
    elapsed = time.monotonic() - started

    # then six were paid (6 x 15.00 = 90.00) and ten refused by the ledger, never by the provider
    unexpected = [r for r in results if isinstance(r, Exception) and not isinstance(r, RefundRefused)]
    assert unexpected == []
    paid = [r for r in results if isinstance(r, RefundEntry)]
    assert len(paid) == 6 and all(r.status == "succeeded" for r in paid)
    # and neither the ledger (pending included) nor the provider went above the total
    assert order_refund_position(order).refunded_total == Decimal("90.00")
    assert sum(r["amount"] for r in fake_stripe.refunds.values()) == 9000
    assert len(fake_stripe.posts()) == 6
    # and the slow calls overlapped: no provider call waited for another's lock
    assert fake_stripe.max_in_flight > 1
    assert elapsed < 6 * 1.0
