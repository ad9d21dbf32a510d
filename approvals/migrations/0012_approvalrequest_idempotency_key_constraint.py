"""The approval request's idempotency key stays unique, without the index nothing uses.

As ledger/0008 for the refund's key: `unique=True` gave it a second, `_like` index on
PostgreSQL (for LIKE; the admin searches keys by exact match), which every request written paid
for. The model declares the same unique constraint, by the same name, as a UniqueConstraint; in
the database only the `_like` index goes.
"""

from django.db import migrations, models

from ledger.migration_ops import drop_like_index


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0011_approval_payment_failed_idx"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="approvalrequest",
                    name="idempotency_key",
                    field=models.CharField(max_length=200),
                ),
                migrations.AddConstraint(
                    model_name="approvalrequest",
                    constraint=models.UniqueConstraint(
                        fields=("idempotency_key",), name="approvals_approvalrequest_idempotency_key_key"
                    ),
                ),
            ],
            database_operations=[drop_like_index("approvals_approvalrequest", "idempotency_key")],
        ),
    ]
