"""The gate's hot reads (the current policy, the order's original method) through CompiledQuery:
the same models the ORM gives, one query each."""

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
    assert current._state.adding is False
    order = make_order()
    payment = order.payments.filter(payment_method__isnull=False).order_by("id").first()
    assert order_original_method(order) == (payment.payment_method if payment else None)


def test_the_current_policy_is_one_query(tenant, policy):
    policy_current(tenant)
    with CaptureQueriesContext(connection) as queries:
        assert policy_current(tenant).version == policy.version
    assert len(queries) == 1
