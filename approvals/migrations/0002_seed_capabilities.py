"""The tool manifest: every capability the runtime knows, with its side-effect class."""

from django.db import migrations

CAPABILITIES = [
    ("orders.lookup_order", "read", "none", 10, "Look up an order of the ticket's tenant: status, items, totals, refunds so far."),
    ("payments.get_summary", "read", "none", 10, "The order's payments, with payment identifiers redacted."),
    ("refund_policy.retrieve", "read", "none", 10, "The tenant's current refund policy version and text."),
    ("refunds.create_draft", "write_draft", "gate", 10, "Record the agent's recommendation and a customer reply draft (never sent)."),
    ("refunds.issue_refund", "money_movement", "finance", 30, "Write a refund into the ledger. Runtime only, after finance approval."),
    ("email.send_customer_message", "outbound", "forbidden", 10, "Send a message to the customer. People only."),
]


def seed(apps, schema_editor):
    Capability = apps.get_model("approvals", "Capability")
    for name, side_effect, rule, timeout, description in CAPABILITIES:
        Capability.objects.update_or_create(
            name=name,
            defaults={"side_effect": side_effect, "approval_rule": rule, "timeout_seconds": timeout, "description": description},
        )


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
