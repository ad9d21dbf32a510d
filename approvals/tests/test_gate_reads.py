"""The gate's hot reads (the current policy, the order's original method): the tenant's current
rows, one query each, always the database's answer of the moment."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.gate import order_original_method, policy_current
from approvals.models import RefundPolicy

pytestmark = pytest.mark.django_db


def test_instances_are_the_models_the_orm_would_give(tenant, policy, make_order):
    assert policy_current(tenant) == RefundPolicy.objects.current_for(tenant)
    current = policy_current(tenant)
    assert current.window_days == policy.window_days and current.version == policy.version
    order = make_order()
    payment = order.payments.filter(payment_method__isnull=False).order_by("id").first()
    assert order_original_method(order) == (payment.payment_method if payment else None)


def test_the_current_policy_is_one_query(tenant, policy):
    policy_current(tenant)
    with CaptureQueriesContext(connection) as queries:
        assert policy_current(tenant).version == policy.version
    assert len(queries) == 1


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}


def test_the_decision_reads_the_policy_and_the_original_method_one_query_each(tenant, policy, make_order):
    # given an order paid with a card, under a tenant with a current policy
    from approvals.gate import decision_facts

    order = make_order()

    # when the decision reads its facts
    with CaptureQueriesContext(connection) as queries:
        found_policy, found_method = decision_facts(tenant=tenant, order=order)

    # then each is exactly what its own read gives, every field converted
    assert len(queries) == 2
    assert found_method is not None
    assert _fields(found_policy) == _fields(policy_current(tenant))
    assert _fields(found_method) == _fields(order_original_method(order))


def test_a_policy_published_between_two_reads_is_the_one_read_next(tenant, policy):
    # given the current policy, read once
    assert policy_current(tenant).version == policy.version

    # when a newer version is published
    newer = RefundPolicy.objects.get(pk=policy.pk)
    newer.pk, newer.version = None, f"{policy.version}-next"
    newer.save()

    # then the next read answers with it: a query is kept, never an answer
    assert policy_current(tenant).version == newer.version


def test_without_a_policy_or_a_payment_each_read_is_none_on_its_own(tenant, policy, make_order):
    from approvals.gate import decision_facts
    from ledger.models import Payment

    # given an order with no recorded payment
    order = make_order()
    Payment.objects.filter(order=order).delete()
    policy_now, method = decision_facts(tenant=tenant, order=order)
    assert method is None and _fields(policy_now) == _fields(policy)

    # and a tenant whose policy was retired: no current policy, while the method is still read
    paid = make_order()
    RefundPolicy.objects.filter(tenant=tenant).update(status=RefundPolicy.Status.RETIRED)
    policy_now, method = decision_facts(tenant=tenant, order=paid)
    assert policy_now is None
    assert _fields(method) == _fields(order_original_method(paid))


def test_the_agents_decision_reads_policy_and_payments_in_two_queries(tenant, customer, card, policy, make_order):
    # given an order whose first payment names no method, paid later with a gift card, then the card
    from approvals.gate import decision_reads
    from ledger.models import Payment, PaymentMethod
    from ledger.selectors import order_payments_returnable

    order = make_order()
    Payment.objects.filter(order=order).update(payment_method=None)
    gift = PaymentMethod.objects.create(customer=customer, external_id="gift_reads", kind=PaymentMethod.Kind.GIFT_CARD)
    Payment.objects.create(order=order, payment_method=gift, method="gift_card", amount="5.00", currency="USD")
    Payment.objects.create(order=order, payment_method=card, method="card", amount="5.00", currency="USD")
    order_payments_returnable(order)  # built once

    # when the decision reads its facts
    with CaptureQueriesContext(connection) as queries:
        reads = decision_reads(tenant=tenant, order=order)

    # then two queries: the policy, and the payments whose first method is the original one
    assert len(queries) == 2
    assert _fields(reads.policy) == _fields(policy_current(tenant))
    assert _fields(reads.original_method) == _fields(order_original_method(order)) == _fields(gift)
    assert reads.payments == order_payments_returnable(order)


def test_the_decision_reads_without_a_payment_or_a_policy(tenant, policy, make_order):
    from approvals.gate import decision_reads
    from ledger.models import Payment

    # given an order with no recorded payment, and no current policy
    order = make_order()
    Payment.objects.filter(order=order).delete()
    RefundPolicy.objects.filter(tenant=tenant).update(status=RefundPolicy.Status.RETIRED)

    # then each read is empty on its own
    reads = decision_reads(tenant=tenant, order=order)
    assert (reads.policy, reads.original_method, reads.payments) == (None, None, [])
