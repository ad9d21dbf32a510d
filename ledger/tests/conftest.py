"""Fixtures that build ledger data: a tenant, a customer with a card, and orders made to measure."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from ledger.models import Customer, Order, OrderItem, Payment, PaymentMethod, Tenant


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

    def make(total="100.00", *, items=(), currency="USD", external_id=None, days_old=5):
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
            payment_ref="pi_test", amount=Decimal(total), currency=currency,
        )
        return order

    return make
