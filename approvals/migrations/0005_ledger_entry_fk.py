"""ApprovalRequest.ledger_entry_ref (an integer) becomes a real foreign key to the ledger entry
it wrote. The column keeps its values (renamed to ledger_entry_id, typed and constrained)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0004_seed_list_customer_orders"),
        ("ledger", "0002_ledger_integrity_triggers"),
    ]

    operations = [
        migrations.RenameField(model_name="approvalrequest", old_name="ledger_entry_ref", new_name="ledger_entry"),
        migrations.AlterField(
            model_name="approvalrequest",
            name="ledger_entry",
            field=models.ForeignKey(
                blank=True,
                help_text="The refund entry written.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="approval_requests",
                to="ledger.refundentry",
            ),
        ),
    ]
