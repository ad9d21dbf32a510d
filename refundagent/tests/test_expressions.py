"""CompiledOnce: an expression compiled once and its SQL reused, which must still read the
database as it is at each use (the SQL is kept, never the result)."""

import pytest
from django.contrib.auth.models import Group
from django.db.models import F, Func, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

from refundagent.expressions import CompiledOnce

pytestmark = pytest.mark.django_db


class CountingCompiles(Value):
    """A constant that counts how often the ORM compiles it."""

    compiled = 0

    def as_sql(self, compiler, connection):
        CountingCompiles.compiled += 1
        return super().as_sql(compiler, connection)


def _count(queryset):
    """COUNT over all of `queryset`'s rows, one row whatever matches (no GROUP BY)."""
    return Subquery(queryset.order_by().values(total=Func(F("pk"), function="COUNT")), output_field=IntegerField())


def _groups_named_like(name: str):
    return Coalesce(_count(Group.objects.filter(name__startswith=name)), 0)


def test_a_reused_expression_reads_the_rows_there_are_now():
    seen = CompiledOnce(_groups_named_like("compiled-once-"))
    queryset = Group.objects.annotate(seen=seen).filter(name="anchor")
    Group.objects.create(name="anchor")

    before = queryset.values_list("seen", flat=True).get()
    Group.objects.create(name="compiled-once-1")
    Group.objects.create(name="compiled-once-2")
    after = queryset.all().values_list("seen", flat=True).get()

    assert (before, after) == (0, 2)


def test_a_reused_expression_is_compiled_once_however_often_it_runs():
    CountingCompiles.compiled = 0
    constant = CompiledOnce(CountingCompiles(7, output_field=IntegerField()))
    queryset = Group.objects.annotate(constant=constant).filter(name__in=["a", "b"])
    Group.objects.create(name="a")
    Group.objects.create(name="b")

    for _ in range(3):
        assert list(queryset.values_list("constant", flat=True)) == [7, 7]

    assert CountingCompiles.compiled == 1


def test_an_expression_of_the_outer_row_gives_each_row_its_own_value():
    # The run's ticket read keeps subqueries on OuterRef("pk") compiled: the SQL names the
    # outer row, so one compiled text serves every row and every run.
    own_name_count = CompiledOnce(Coalesce(_count(Group.objects.filter(name=OuterRef("name"))), 0))
    Group.objects.create(name="one")
    Group.objects.create(name="two")
    queryset = Group.objects.annotate(same=own_name_count).filter(name__in=["one", "two"]).order_by("name")

    assert list(queryset.values_list("name", "same")) == [("one", 1), ("two", 1)]
    assert list(queryset.filter(name="two").values_list("name", "same")) == [("two", 1)]
