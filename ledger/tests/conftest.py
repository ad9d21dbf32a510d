"""Fixtures that build ledger data: a tenant, a customer with a card, and orders made to measure."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from ledger.models import Customer, Order, OrderItem, Payment, PaymentMethod, Tenant
from ledger.tests.fake_stripe import FakeStripe


@pytest.fixture
def tenant(db):
    return Tenant.objects.create(slug="shop", name="Shop")


@pytest.fixture
def customer(tenant):
    return Customer.objects.create(tenant=tenant, external_id="CUST-1", name="Ada", email="ada@example.com")


@pytest.fixture
def card(customer):
    return PaymentMethod.objects.create(
        customer=customer, external_id="card_1", kind=PaymentMethod.Kind.CARD, brand="visa", last4="4242"
    )


@pytest.fixture
def make_order(tenant, customer, card):
    """make_order("100.00", items=[("ITEM-1", "40.00", 1), ...]) -> a paid order in USD."""
    counter = iter(range(1, 10_000))

    def make(total="100.00", *, items=(), currency="USD", external_id=None, days_old=5, payment_ref="pi_test"):
        order = Order.objects.create(
            tenant=tenant,
            customer=customer,
            external_id=external_id or f"ORD-{next(counter)}",
            total=Decimal(total),
            currency=currency,
            placed_at=timezone.now() - timedelta(days=days_old),
        )
        for line_no, (item_id, price, quantity) in enumerate(items, start=1):
            OrderItem.objects.create(
                order=order, line_no=line_no, item_id=item_id, name=item_id.title(), price=Decimal(price), quantity=quantity
            )
        Payment.objects.create(
            order=order, payment_method=card, method="card", card_brand="visa", card_last4="4242",
            payment_ref=payment_ref, amount=Decimal(total), currency=currency,
        )
        return order

    return make


def _run_concurrently(fn, args_list):
    """Run fn(*args) in one thread each, released together; returns the results (or exceptions)."""
    barrier = threading.Barrier(len(args_list))
    results = [None] * len(args_list)

    def worker(i, args):
        try:
            barrier.wait()
            results[i] = fn(*args)
        except Exception as exc:  # noqa: BLE001 - the test inspects what each worker got
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung (deadlock?)"
    return results


@pytest.fixture
def run_concurrently():
    """run_concurrently(fn, [args, ...]): one thread per args, released together; results or exceptions."""
    return _run_concurrently


@pytest.fixture
def fake_stripe(settings):
    """A local Stripe-compatible server, and the settings that point the `stripe` gateway at it."""
    server = FakeStripe().start()
    settings.PAYMENT_GATEWAY = "stripe"
    settings.STRIPE_API_KEY = "sk_test_fake"
    settings.STRIPE_API_BASE = server.url
    settings.STRIPE_MAX_NETWORK_RETRIES = 2
    settings.STRIPE_TIMEOUT_SECONDS = 10
    settings.STRIPE_WEBHOOK_SECRET = "whsec_test_secret"
    yield server
    server.stop()
