"""Migration operations shared by the apps' migrations."""

from django.db import migrations


def drop_like_index(table: str, column: str) -> migrations.RunPython:
    """Drop (reversibly) the `varchar_pattern_ops` index Django makes on PostgreSQL for a unique or
    indexed CharField, for LIKE queries. Paired with moving the field's `unique=True` to a
    UniqueConstraint of the constraint's own name, in the state only (ledger/0008,
    approvals/0012): the unique index stays, and nothing is rebuilt."""

    def name(schema_editor) -> str:
        # The name Django gave it when it made the field: `<table>_<column>_<hash>_like`.
        return schema_editor.quote_name(schema_editor._create_index_name(table, [column], suffix="_like"))

    def forward(apps, schema_editor):
        schema_editor.execute(f"DROP INDEX IF EXISTS {name(schema_editor)}")

    def backward(apps, schema_editor):
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name(schema_editor)} ON {table} ({column} varchar_pattern_ops)"
        )

    return migrations.RunPython(forward, backward)
