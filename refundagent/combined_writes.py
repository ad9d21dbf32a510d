"""Writes that belong together, in one statement on PostgreSQL.

The agent's claim moves the ticket from queued to running (a compare-and-set UPDATE) and inserts
the run it starts; filing inserts the ticket and its first trace event (refundagent.tracing).
As two statements in a transaction that is four round trips (BEGIN, two writes, COMMIT); as one
data-modifying CTE it is one, and the second write still depends on the first (the run is
inserted only if the UPDATE matched; the event gets the new ticket's id) (issue 12,
docs/performance.md). SQLite keeps the transaction: it serialises writers and answers
in-process. Django has no way to say "insert this row if that update matched" in one
statement, hence this small composition of its compiled SQL.
"""

from django.db import connections, transaction
from django.db.models import Model, QuerySet, sql


def update_then_insert(rows: QuerySet, values: dict, instance: Model) -> bool:
    """`rows.update(**values)` and, only if it matched a row, `instance` inserted; True if it
    did (`instance` then has its pk). One statement on PostgreSQL, one transaction elsewhere."""
    connection = connections[rows.db]
    if connection.vendor != "postgresql":
        with transaction.atomic(using=rows.db):
            if not rows.update(**values):
                return False
            instance.save(force_insert=True, using=rows.db)
            return True
    update_sql, update_params = update_statement(rows, values)
    insert_sql, insert_params = insert_statement(instance, using=rows.db, where="EXISTS (SELECT 1 FROM r)")
    with connections[rows.db].cursor() as cursor:
        cursor.execute(f"WITH r AS ({update_sql} RETURNING 1) {insert_sql}", [*update_params, *insert_params])
        row = cursor.fetchone()
    if row is None:
        return False
    inserted(instance, pk=row[0], using=rows.db)
    return True


def update_statement(rows: QuerySet, values: dict) -> tuple[str, list]:
    """The SQL and parameters of `rows.update(**values)`, unrun: to write it inside a larger
    statement (here, and the agent's persist with its trace events in refundagent.tracing)."""
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
