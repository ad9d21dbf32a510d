"""Two writes that belong together, in one statement on PostgreSQL.

The agent's claim moves the ticket from queued to running (a compare-and-set UPDATE) and inserts
the run it starts. As two statements in a transaction that is four round trips (BEGIN, UPDATE,
INSERT, COMMIT); as one data-modifying CTE it is one, and the insert still happens only if the
UPDATE matched (issue 12, docs/performance.md). SQLite keeps the transaction: it serialises
writers and answers in-process. Django has no way to say "insert this row if that update
matched" in one statement, hence this small composition of its compiled SQL.
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
    meta = instance._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    quote = connection.ops.quote_name
    # In INSERT ... SELECT, PostgreSQL types bare parameters (NULLs above all) as text: cast them.
    placeholders = ", ".join(f"%s::{f.db_type(connection)}" for f in fields)
    insert_params = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    statement = (
        f"WITH r AS ({update_sql} RETURNING 1) "
        f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"SELECT {placeholders} WHERE EXISTS (SELECT 1 FROM r) RETURNING {quote(meta.pk.column)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [*update_params, *insert_params])
        row = cursor.fetchone()
    if row is None:
        return False
    instance.pk = row[0]
    instance._state.adding = False
    instance._state.db = rows.db
    return True


def update_statement(rows: QuerySet, values: dict) -> tuple[str, list]:
    """The SQL and parameters of `rows.update(**values)`, unrun: to write it inside a larger
    statement (here, and the agent's persist with its trace events in refundagent.tracing)."""
    query = rows.query.chain(sql.UpdateQuery)
    query.add_update_values(values)
    return query.get_compiler(rows.db).as_sql()
