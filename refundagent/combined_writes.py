"""Writes that belong together, in one statement on PostgreSQL.

Filing inserts the ticket and its first trace event, and the agent's persist updates its run and
inserts the step's trace events (refundagent.tracing): as one data-modifying CTE each is one round
trip, and the second write still depends on the first (the events are inserted only if the
update matched; they get the new ticket's id). Django has no way to say "insert this row if
that update matched" in one statement, hence this small composition of its compiled SQL.
"""

from django.db import connections
from django.db.models import Model, QuerySet, sql


def update_statement(rows: QuerySet, values: dict) -> tuple[str, list]:
    """The SQL and parameters of `rows.update(**values)`, unrun: to write it inside a larger
    statement (the agent's persist with its trace events in refundagent.tracing)."""
    query = rows.query.chain(sql.UpdateQuery)
    query.add_update_values(values)
    return query.get_compiler(rows.db).as_sql()


def insert_statement(instance: Model, *, using: str, where: str = "true") -> tuple[str, list]:
    """The SQL and parameters of inserting `instance` (PostgreSQL), unrun, returning its pk:
    INSERT ... SELECT <its values> WHERE <where>, to write it inside a larger statement."""
    connection = connections[using]
    meta = instance._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    # In INSERT ... SELECT, PostgreSQL types bare parameters (NULLs above all) as text: cast them.
    placeholders = ", ".join(f"%s::{f.db_type(connection)}" for f in fields)
    params = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    sql_ = (
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"SELECT {placeholders} WHERE {where} RETURNING {quote(meta.pk.column)}"
    )
    return sql_, params


def inserted(instance: Model, *, pk, using: str) -> None:
    """Mark `instance` as saved with `pk`, as Model.save leaves it."""
    instance.pk = pk
    instance._state.adding = False
    instance._state.db = using
