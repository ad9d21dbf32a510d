"""CompiledQuery: the SQL is compiled once, the answers are always the database's current ones."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.gate import order_original_method, policy_current
from approvals.models import RefundPolicy
from ledger.compiled import CompiledQuery
from ledger.models import Order
from ledger.selectors import order_refund_position
from ledger.services import ledger_refund_issue

pytestmark = pytest.mark.django_db


def test_rows_are_those_of_the_queryset_for_every_argument(tenant, make_order):
    orders = [make_order(), make_order(), make_order()]
    compiled = CompiledQuery(
        lambda order_id: Order.objects.filter(pk=order_id).values("external_id", "total", "currency"), order_id=int
    )
    for order in orders:
        expected = list(Order.objects.filter(pk=order.pk).values("external_id", "total", "currency"))
        assert compiled.rows(order_id=order.pk) == expected
        assert isinstance(compiled.rows(order_id=order.pk)[0]["total"], Decimal)
    assert compiled.rows(order_id=-1) == []


def test_the_position_follows_the_ledger_between_two_reads(tenant, make_order):
    # given an order read once (the SQL is now compiled)
    order = make_order()
    before = order_refund_position(order)
    assert before.refunded_total == Decimal("0.00")
    # when a refund is written
    ledger_refund_issue(order=order, amount="10.00", currency=order.currency, idempotency_key="compiled-1")
    # then the next read sees it: only the SQL was kept, never an answer
    assert order_refund_position(order).refunded_total == Decimal("10.00")


def test_instances_are_the_models_the_orm_would_give(tenant, policy, make_order):
    assert policy_current(tenant) == RefundPolicy.objects.current_for(tenant)
    current = policy_current(tenant)
    assert current.window_days == policy.window_days and current.version == policy.version
    assert current._state.adding is False
    order = make_order()
    payment = order.payments.filter(payment_method__isnull=False).order_by("id").first()
    assert order_original_method(order) == (payment.payment_method if payment else None)


def test_each_read_is_one_query(tenant, policy, make_order):
    order = make_order("100.00", items=[("ITEM-1", "40.00", 1), ("ITEM-2", "60.00", 1)])
    order_refund_position(order)
    with CaptureQueriesContext(connection) as queries:
        order_refund_position(order)
        policy_current(tenant)
    assert len(queries) == 2


def test_an_argument_of_the_wrong_type_is_refused(tenant):
    compiled = CompiledQuery(lambda order_id: Order.objects.filter(pk=order_id).values("id"), order_id=int)
    with pytest.raises(TypeError):
        compiled.rows(order_id="1 OR 1=1")


def test_an_argument_that_is_not_a_parameter_is_refused(tenant):
    compiled = CompiledQuery(lambda order_id: Order.objects.values("id"), order_id=int)
    with pytest.raises(ValueError):
        compiled.rows(order_id=1)


def test_only_a_values_queryset_can_be_compiled(tenant):
    compiled = CompiledQuery(lambda order_id: Order.objects.filter(pk=order_id), order_id=int)
    with pytest.raises(ValueError):
        compiled.rows(order_id=1)
