"""ORM expressions of our own, built from Django's public expression API."""

from django.db.models import Expression


class CompiledOnce(Expression):
    """`expression`, resolved once and compiled once per database, its SQL and params then reused
    wherever the same object appears again: in every row of one INSERT, or in every run of a
    queryset kept for the life of the process. The ORM would otherwise compile it anew each
    time, which for a subquery costs far more than running it. Only for an expression whose SQL
    cannot change between uses: no parameter of its own that differs from one use to the next,
    and used in one kind of query only (it is resolved against the first). Threads that race
    to resolve or compile it first compute the same thing."""

    def __init__(self, expression):
        super().__init__(output_field=expression.output_field)
        self.expression = expression
        self.resolved = None
        self.compiled: dict[str, tuple[str, tuple]] = {}

    def resolve_expression(self, *args, **kwargs):
        if self.resolved is None:
            self.resolved = self.expression.resolve_expression(*args, **kwargs)
        return self

    def as_sql(self, compiler, connection):
        if connection.alias not in self.compiled:
            sql, params = compiler.compile(self.resolved)
            self.compiled[connection.alias] = sql, tuple(params)
        return self.compiled[connection.alias]
