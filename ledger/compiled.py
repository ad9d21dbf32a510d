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

# Argument values that no real row has; they mark where each argument lands in the parameters.
_SENTINEL_INT = -7_305_919_237
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
        sql, params = self._bound(using, arguments)
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
            sql, bound = query._bound(using, arguments)
            parts.append(f"LEFT JOIN (SELECT * FROM ({sql}) AS s{n} LIMIT 1) AS q{n} ON 1 = 1")
            params.extend(bound)
            widths.append(len(query._compiled[using][3]))
        columns = ", ".join(f"q{n}.*" for n in range(len(calls)))
        statement = f"SELECT {columns} FROM (SELECT 1 AS one) AS one {' '.join(parts)}"
        connection = connections[using]
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
        params = list(params)
        for index, name in slots:
            value = arguments[name]
            if not isinstance(value, self._kinds[name]):
                raise TypeError(f"{name} must be {self._kinds[name].__name__}, not {type(value).__name__}")
            params[index] = value
        return sql, params

    def _converted(self, row: list, connection) -> dict:
        _, _, _, names, converters = self._compiled[connection.alias]
        for position, (functions, expression) in converters:
            for function in functions:
                row[position] = function(row[position], expression, connection)
        return dict(zip(names, row, strict=True))

    def instances(self, model, *, using: str = DEFAULT_DB_ALIAS, **arguments) -> list:
        """The rows as instances of `model` (the queryset must select its concrete fields by attname)."""
        return [model.from_db(using, list(row), list(row.values())) for row in self.rows(using=using, **arguments)]

    def _compile(self, using: str) -> tuple:
        # One sentinel per argument: two arguments of one kind must not be told apart by luck.
        sentinels = {
            name: _SENTINEL_INT - n if kind is int else f"{_SENTINEL_STR}{n}" if kind is str else None
            for n, (name, kind) in enumerate(self._kinds.items())
        }
        if None in sentinels.values():
            raise TypeError("CompiledQuery arguments are int or str")
        queryset = self._build(**sentinels).using(using)
        query = queryset.query
        compiler = query.get_compiler(using)
        sql, params = compiler.as_sql()
        slots = [
            (index, name)
            for index, param in enumerate(params)
            for name, sentinel in sentinels.items()
            if type(param) is type(sentinel) and param == sentinel
        ]
        if {name for _, name in slots} != set(sentinels):
            raise ValueError("each argument of a CompiledQuery must appear among the parameters")
        names = [*query.extra_select, *query.values_select, *query.annotation_select]
        if len(names) != len(compiler.select):
            raise ValueError("a CompiledQuery needs a values() queryset")
        converters = list(compiler.get_converters([column for column, _, _ in compiler.select]).items())
        compiled = (sql, tuple(params), slots, names, converters)
        self._compiled[using] = compiled
        return compiled
