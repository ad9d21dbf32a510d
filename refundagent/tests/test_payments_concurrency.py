"""16 finance approvals of 16 different requests on one order at once, with the provider slow
(1 s per call): the order is never refunded above its total, pending entries included."""

import threading
import time
from decimal import Decimal

import pytest
from django.db import connection

from approvals.exceptions import ApprovalConflict
from ledger.models import RefundEntry
from ledger.selectors import order_refund_position
from ledger.tests.fake_stripe import FakeStripe, payments_follow_ledger
from refundagent.tests.payments_support import approve, ticket_awaiting_approval

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slow_stripe(settings):
    server = FakeStripe().start()
    stop_following = payments_follow_ledger(server)
    server.delay = 1.0
    settings.PAYMENT_GATEWAY, settings.STRIPE_API_KEY, settings.STRIPE_API_BASE = "stripe", "sk_test_fake", server.url
    settings.STRIPE_TIMEOUT_SECONDS = 20
    yield server
    stop_following()
    server.stop()


def test_sixteen_concurrent_approvals_never_take_the_order_above_its_total(slow_stripe, policy, make_order, make_user):
    # given a 100.00 order and 16 requests of 10.00 each on it, from 16 tickets
    order = make_order("100.00", external_id="ORD-RACE", payment_ref="pi_race")
    support = make_user("support", "support")
    approvers = [make_user(f"finance-{i}", "finance") for i in range(16)]
    requests = [
        ticket_awaiting_approval(order=order, filer=support, amount="10.00", key=f"race-{i}")[1] for i in range(16)
    ]
    # and a watcher that reads what counts against the order while the provider calls are in flight
    seen, done = [], threading.Event()

    def watch():
        try:
            while not done.is_set():
                seen.append(order_refund_position(order).refunded_total)
                time.sleep(0.05)
        finally:
            connection.close()

    watcher = threading.Thread(target=watch)
    watcher.start()

    # when 16 finance users approve at once (each execution pays out eagerly after its commit)
    barrier = threading.Barrier(16)
    outcomes = [None] * 16

    def decide(i):
        try:
            barrier.wait()
            approve(requests[i], approvers[i])
            outcomes[i] = "approved"
        except ApprovalConflict as exc:
            outcomes[i] = exc.code
        except Exception as exc:  # noqa: BLE001 - the test inspects what each thread got
            outcomes[i] = repr(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    watcher.join(timeout=10)
    assert not any(t.is_alive() for t in threads), "a decision hung (deadlock?)"

    # then every decision was answered (approved, or refused because the facts changed)
    assert set(outcomes) <= {"approved", "approval_invalidated", "already_decided"}, outcomes
    assert "approved" in outcomes
    # and what counts against the order never went above its total, in flight or after
    assert seen and max(seen) <= Decimal("100.00")
    position = order_refund_position(order)
    assert position.refunded_total <= Decimal("100.00")
    # and every counting entry was paid exactly once at the provider, none left pending
    entries = list(RefundEntry.objects.filter(order=order))
    assert all(e.status == "succeeded" for e in entries)
    assert sum(e.amount for e in entries) == position.refunded_total
    assert len(slow_stripe.refunds) == len(entries)
    assert sum(r["amount"] for r in slow_stripe.refunds.values()) == int(position.refunded_total * 100)
    assert len({e.provider_ref for e in entries}) == len(entries)
