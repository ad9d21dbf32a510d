"""Querysets compiled to SQL once and run many times: the hot path's reads.

Django compiles a queryset to SQL every time it is evaluated. For the reads the agent makes at
every ticket (the order's refund position, the current policy: each read at a tool call and
again at the decision) compiling costs several times what PostgreSQL needs to answer: about
1.5 ms of Python against 0.1 ms of query (benchmarks/side_by_side.py, docs/performance.md).

A `CompiledQuery` builds its `values()` queryset once per database with sentinel arguments,
keeps the SQL, where the sentinels landed among the parameters, and the field converters; a
call swaps its arguments in and runs the SQL. The queryset stays the one definition of the
query: no SQL is written by hand. Django has no such cache (its compiler is rebuilt per
evaluation), hence this small piece of our own.

Only for querysets whose SQL does not depend on the arguments' values: each argument must be
a parameter of a filter (an id, a string; it may appear more than once), which `_compile`
checks.
"""

from collections.abc import Callable

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import QuerySet
from django.db.models.query import ModelIterable, get_related_populators, prefetch_related_objects

# Argument values that mark where each argument lands in the parameters (only compiled, never
# run). The int is inside the range of every integer column, positive ones included: Django
# refuses a lookup outside a field's range at compile time (EmptyResultSet).
_SENTINEL_INT = 2_147_480_000
_SENTINEL_STR = "\x1fcompiled-query-sentinel\x1f"


class CompiledQuery:
    def __init__(self, build: Callable[..., QuerySet], **kinds: type):
        """`build(**arguments)` returns a `values()` queryset; `kinds` names each argument's
        type (int or str)."""
        self._build = build
        self._kinds = kinds
        self._compiled: dict[str, tuple] = {}

    def rows(self, *, using: str = DEFAULT_DB_ALIAS, **arguments) -> list[dict]:
        """The rows, as `values()` would give them (converted by the fields' converters)."""
        try:
            sql, params = self._bound(using, arguments)
        except _NoRows:
            return []
        connection = connections[using]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return [self._converted(list(row), connection) for row in rows]

    @staticmethod
    def first_rows(*calls: tuple["CompiledQuery", dict], using: str = DEFAULT_DB_ALIAS) -> list[dict | None]:
        """The first row of each query (None where it has none) in ONE statement, for reads of
        at most one row each that are needed together (the agent's decision reads the current
        policy and the order's original payment method). The queries stay independent
        subqueries: `SELECT q0.*, q1.* FROM (SELECT 1) LEFT JOIN (q0 LIMIT 1) ON true ...`."""
        parts, params, widths = [], [], []
        for n, (query, arguments) in enumerate(calls):
            try:
                sql, bound = query._bound(using, arguments)
            except _NoRows:
                widths.append(0)  # nothing to read: its result is None
                continue
            parts.append(f"LEFT JOIN (SELECT * FROM ({sql}) AS s{n} LIMIT 1) AS q{n} ON 1 = 1")
            params.extend(bound)
            widths.append(len(query._compiled[using][3]))
        connection = connections[using]
        row = []
        if parts:
            columns = ", ".join(f"q{n}.*" for n, width in enumerate(widths) if width)
            statement = f"SELECT {columns} FROM (SELECT 1 AS one) AS one {' '.join(parts)}"
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                row = list(cursor.fetchone())
        result, start = [], 0
        for (query, _), width in zip(calls, widths, strict=True):
            values = row[start : start + width]
            start += width
            # A LEFT JOIN without a match gives NULLs only: no row (a real row has its pk).
            result.append(None if all(v is None for v in values) else query._converted(values, connection))
        return result

    def _bound(self, using: str, arguments: dict) -> tuple[str, list]:
        sql, params, slots, _, _ = self._compiled.get(using) or self._compile(using)
        return sql, _bind(params, slots, self._kinds, arguments, using=using)

    def _converted(self, row: list, connection) -> dict:
        _, _, _, names, converters = self._compiled[connection.alias]
        for position, (functions, expression) in converters:
            for function in functions:
                row[position] = function(row[position], expression, connection)
        return dict(zip(names, row, strict=True))

    def instances(self, model, *, using: str = DEFAULT_DB_ALIAS, **arguments) -> list:
        """The rows as instances of `model` (the queryset must select its concrete fields by attname)."""
        return [self.instance(model, row, using=using) for row in self.rows(using=using, **arguments)]

    @staticmethod
    def instance(model, row: dict, *, using: str = DEFAULT_DB_ALIAS):
        """One row (of `rows` or `first_rows`) as an instance of `model`, as loaded from the database."""
        return model.from_db(using, list(row), list(row.values()))

    def _compile(self, using: str) -> tuple:
        queryset, compiler, sql, params, slots = _compile(self._build, self._kinds, using)
        query = queryset.query
        names = [*query.extra_select, *query.values_select, *query.annotation_select]
        if len(names) != len(compiler.select):
            raise ValueError("a CompiledQuery needs a values() queryset")
        converters = list(compiler.get_converters([column for column, _, _ in compiler.select]).items())
        compiled = (sql, tuple(params), slots, names, converters)
        self._compiled[using] = compiled
        return compiled


class CompiledModelQuery:
    """A model queryset (with its select_related, annotations and prefetch_related) compiled once;
    a call runs the SQL with new arguments and builds the instances as Django's ModelIterable
    does, related objects and annotations included, then runs the prefetches. The agent's run
    loads its ticket this way: a seven-table select_related whose compiling cost more than the
    query (docs/performance.md)."""

    def __init__(self, build: Callable[..., QuerySet], **kinds: type):
        """`build(**arguments)` returns a model queryset; `kinds` names each argument's type."""
        self._build = build
        self._kinds = kinds
        self._compiled: dict[str, tuple] = {}

    def get(self, *, using: str = DEFAULT_DB_ALIAS, **arguments):
        """The one instance, as `queryset.get()` would give it; DoesNotExist when there is none."""
        found = self.instances(using=using, **arguments)
        if len(found) != 1:
            model = self._compiled[using][1].query.model
            if not found:
                raise model.DoesNotExist(f"{model.__name__} matching {arguments} does not exist.")
            raise model.MultipleObjectsReturned(f"{len(found)} {model.__name__} rows match {arguments}.")
        return found[0]

    def first(self, *, using: str = DEFAULT_DB_ALIAS, **arguments):
        """The first instance, or None, as `queryset.first()` would give it (slice the queryset to
        one row in its definition: this runs it whole)."""
        found = self.instances(using=using, **arguments)
        return found[0] if found else None

    def instances(self, *, using: str = DEFAULT_DB_ALIAS, **arguments) -> list:
        compiled = self._compiled.get(using) or self._compile(using)
        sql, compiler, params, slots, init_list, fields, populators, lookups = compiled
        try:
            params = _bind(params, slots, self._kinds, arguments, using=using)
        except _NoRows:
            return []
        with connections[using].cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        model, start, end = compiler.klass_info["model"], fields[0], fields[1]
        found = []
        for row in compiler.results_iter(results=[rows]):
            instance = model.from_db(using, init_list, row[start:end])
            for populator in populators:
                populator.populate(row, instance)
            for name, position in compiler.annotation_col_map.items():
                setattr(instance, name, row[position])
            found.append(instance)
        if found and lookups:
            prefetch_related_objects(found, *lookups)
        return found

    def _compile(self, using: str) -> tuple:
        queryset, compiler, sql, params, slots = _compile(self._build, self._kinds, using)
        if queryset._iterable_class is not ModelIterable:
            raise ValueError("a CompiledModelQuery needs a model queryset, not values()")
        select_fields = compiler.klass_info["select_fields"]
        start, end = select_fields[0], select_fields[-1] + 1
        init_list = [column[0].target.attname for column in compiler.select[start:end]]
        populators = get_related_populators(compiler.klass_info, compiler.select, using)
        # Its prefetch_related lookups run after, as QuerySet._fetch_all runs them.
        lookups = queryset._prefetch_related_lookups
        compiled = (sql, compiler, tuple(params), slots, init_list, (start, end), populators, lookups)
        self._compiled[using] = compiled
        return compiled


def _compile(build: Callable[..., QuerySet], kinds: dict[str, type], using: str) -> tuple:
    """The queryset built with sentinel arguments, compiled: (queryset, compiler, sql, params, slots)."""
    # One sentinel per argument: two arguments of one kind must not be told apart by luck.
    sentinels = {
        name: _SENTINEL_INT - n if kind is int else f"{_SENTINEL_STR}{n}" if kind is str else None
        for n, (name, kind) in enumerate(kinds.items())
    }
    if None in sentinels.values():
        raise TypeError("CompiledQuery arguments are int or str")
    queryset = build(**sentinels).using(using)
    compiler = queryset.query.get_compiler(using)
    sql, params = compiler.as_sql()
    # A parameter may come wrapped for its column (psycopg's Int8 for a bigint, an int subclass):
    # the argument is wrapped the same way when it takes the sentinel's place.
    slots = [
        (index, name, type(param))
        for index, param in enumerate(params)
        for name, sentinel in sentinels.items()
        if isinstance(param, type(sentinel)) and param == sentinel
    ]
    if {name for _, name, _ in slots} != set(sentinels):
        raise ValueError("each argument of a CompiledQuery must appear among the parameters")
    return queryset, compiler, sql, params, slots


class _NoRows(Exception):
    """An argument no row can match: the query is not run, its answer is empty."""


def _bind(params: tuple, slots: list, kinds: dict[str, type], arguments: dict, *, using: str) -> list:
    params = list(params)
    for index, name, wrapper in slots:
        value = arguments[name]
        if not isinstance(value, kinds[name]) or isinstance(value, bool):
            raise TypeError(f"{name} must be {kinds[name].__name__}, not {type(value).__name__}")
        if kinds[name] is int:
            # As the ORM does (EmptyResultSet): an int wider than any integer column matches
            # nothing. Bound, it would raise on SQLite (OverflowError: /api/tickets/<2**64> was a 500).
            low, high = connections[using].ops.integer_field_range("BigIntegerField")
            if not low <= value <= high:
                raise _NoRows(name)
        params[index] = value if wrapper is kinds[name] else wrapper(value)
    return params
