"""The refund's idempotency key stays unique, without the index nothing uses.

`unique=True` on a CharField makes Django create two indexes on PostgreSQL: the unique
constraint `ledger_refundentry_idempotency_key_key` and a `..._like` index (varchar_pattern_ops)
for LIKE queries. Nothing searches keys by prefix, and every refund paid for the second index:
about 5% of the ledger's write, measured in 2026-11 (docs/performance.md in git history).

The model now declares the same unique constraint, by the same name, as a UniqueConstraint, for
which Django makes no `_like` index. In the database only the `_like` index goes: the constraint
that already exists is the one the state now names, so nothing is rebuilt or locked for long.
"""

from django.db import migrations, models

from ledger.migration_ops import drop_like_index

class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0007_ledger_refund_issue_function"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="refundentry",
                    name="idempotency_key",
                    field=models.CharField(max_length=200),
                ),
                migrations.AddConstraint(
                    model_name="refundentry",
                    constraint=models.UniqueConstraint(
                        fields=("idempotency_key",), name="ledger_refundentry_idempotency_key_key"
                    ),
                ),
            ],
            database_operations=[drop_like_index("ledger_refundentry", "idempotency_key")],
        ),
    ]
