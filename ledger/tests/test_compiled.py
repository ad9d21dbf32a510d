"""CompiledQuery: the SQL is compiled once, the answers are always the database's current ones."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

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


def test_two_arguments_of_one_kind_each_land_where_they_belong(tenant, make_order):
    # given a query with two int and two str arguments, and values that tell them apart
    first, second = make_order(), make_order()
    compiled = CompiledQuery(
        lambda low, high, name, currency: Order.objects.filter(
            pk__gte=low, pk__lte=high, external_id=name, currency=currency
        ).values("external_id"),
        low=int,
        high=int,
        name=str,
        currency=str,
    )
    # then each argument filters its own column: swapping them finds nothing
    assert compiled.rows(low=first.pk, high=second.pk, name=second.external_id, currency="USD") == [
        {"external_id": second.external_id}
    ]
    assert compiled.rows(low=second.pk, high=first.pk, name=second.external_id, currency="USD") == []
    assert compiled.rows(low=first.pk, high=second.pk, name="USD", currency=second.external_id) == []


def test_the_position_follows_the_ledger_between_two_reads(tenant, make_order):
    # given an order read once (the SQL is now compiled)
    order = make_order()
    before = order_refund_position(order)
    assert before.refunded_total == Decimal("0.00")
    # when a refund is written
    ledger_refund_issue(order=order, amount="10.00", currency=order.currency, idempotency_key="compiled-1")
    # then the next read sees it: only the SQL was kept, never an answer
    assert order_refund_position(order).refunded_total == Decimal("10.00")


def test_the_position_is_one_query(tenant, make_order):
    order = make_order("100.00", items=[("ITEM-1", "40.00", 1), ("ITEM-2", "60.00", 1)])
    order_refund_position(order)
    with CaptureQueriesContext(connection) as queries:
        position = order_refund_position(order)
    assert len(queries) == 1 and [line.item_id for line in position.lines] == ["ITEM-1", "ITEM-2"]


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


def _order_with_customer(order_id):
    from django.db.models import Count

    return Order.objects.select_related("customer", "tenant").annotate(lines=Count("items")).filter(pk=order_id)


def test_a_compiled_model_query_builds_what_the_orm_builds(tenant, make_order):
    from ledger.compiled import CompiledModelQuery

    # given a select_related, annotated model queryset compiled once, and two orders
    compiled = CompiledModelQuery(_order_with_customer, order_id=int)
    first = make_order("100.00", items=[("ITEM-1", "40.00", 1), ("ITEM-2", "60.00", 1)])
    second = make_order("30.00")
    for order in (first, second, first):
        # when it is run for each
        with CaptureQueriesContext(connection) as queries:
            found = compiled.get(order_id=order.pk)
        expected = _order_with_customer(order.pk).get()

        # then it is one query, and the instance, its related objects and annotation are the ORM's
        assert len(queries) == 1
        fields = [f.attname for f in Order._meta.concrete_fields]
        assert [getattr(found, f) for f in fields] == [getattr(expected, f) for f in fields]
        assert isinstance(found.total, Decimal) and found._state.adding is False
        assert found.customer == expected.customer and found.customer.email == expected.customer.email
        assert found.tenant.slug == expected.tenant.slug
        assert found.lines == expected.lines
    assert first.items.count() == compiled.get(order_id=first.pk).lines == 2


def test_a_compiled_model_query_raises_does_not_exist(tenant):
    from ledger.compiled import CompiledModelQuery

    compiled = CompiledModelQuery(_order_with_customer, order_id=int)
    with pytest.raises(Order.DoesNotExist):
        compiled.get(order_id=-1)
    with pytest.raises(TypeError):
        compiled.get(order_id="1")


def test_a_compiled_model_query_refuses_a_values_queryset(tenant):
    from ledger.compiled import CompiledModelQuery

    compiled = CompiledModelQuery(lambda order_id: Order.objects.filter(pk=order_id).values("id"), order_id=int)
    with pytest.raises(ValueError):
        compiled.get(order_id=1)


def test_a_compiled_model_query_runs_the_querysets_prefetches(tenant, make_order):
    from ledger.compiled import CompiledModelQuery

    # given a queryset that prefetches the order's lines
    compiled = CompiledModelQuery(
        lambda order_id: Order.objects.filter(pk=order_id).prefetch_related("items"), order_id=int
    )
    order = make_order("100.00", items=[("ITEM-1", "40.00", 1), ("ITEM-2", "60.00", 1)])
    compiled.get(order_id=order.pk)

    # when it is run, then the lines come with it: two queries, none when they are read
    with CaptureQueriesContext(connection) as queries:
        found = compiled.get(order_id=order.pk)
    with CaptureQueriesContext(connection) as reading:
        item_ids = [item.item_id for item in found.items.all()]
    assert (len(queries), len(reading)) == (2, 0)
    assert item_ids == ["ITEM-1", "ITEM-2"]


@pytest.mark.parametrize("impossible", [2**63, 28167181019273453568, -(2**63) - 1])
def test_an_int_wider_than_any_column_matches_nothing_as_in_the_orm(tenant, make_order, impossible):
    from ledger.compiled import CompiledModelQuery

    # given an order, and an id no integer column can hold (SQLite refused to bind it: a 500)
    order = make_order()
    assert not Order.objects.filter(pk=impossible).exists()  # the ORM's answer: nothing
    values = CompiledQuery(lambda order_id: Order.objects.filter(pk=order_id).values("external_id"), order_id=int)
    model = CompiledModelQuery(_order_with_customer, order_id=int)
    # then every compiled read answers as for an id that is not there, without a query
    with CaptureQueriesContext(connection) as queries:
        assert values.rows(order_id=impossible) == []
        assert model.first(order_id=impossible) is None
        with pytest.raises(Order.DoesNotExist):
            model.get(order_id=impossible)
    assert len(queries) == 0
    # and in one statement with a read that can match, only that one is read
    found, missing = CompiledQuery.first_rows((values, {"order_id": order.pk}), (values, {"order_id": impossible}))
    assert (found, missing) == ({"external_id": order.external_id}, None)
    assert CompiledQuery.first_rows((values, {"order_id": impossible})) == [None]
    # the edges of the range are still read
    assert values.rows(order_id=2**63 - 1) == [] and values.rows(order_id=-(2**63)) == []
