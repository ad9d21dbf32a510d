"""A read capability for customer-level tickets: the ticket's customer's orders."""

from django.db import migrations

CAPABILITIES = [
    ("orders.list_customer_orders", "read", "none", 10,
     "List the ticket's customer's orders in the ticket's tenant (ids, status, totals, items, refundable)."),
]


def seed(apps, schema_editor):
    Capability = apps.get_model("approvals", "Capability")
    for name, side_effect, rule, timeout, description in CAPABILITIES:
        Capability.objects.update_or_create(
            name=name,
            defaults={"side_effect": side_effect, "approval_rule": rule, "timeout_seconds": timeout, "description": description},
        )


def unseed(apps, schema_editor):
    apps.get_model("approvals", "Capability").objects.filter(name__in=[c[0] for c in CAPABILITIES]).delete()


class Migration(migrations.Migration):
    dependencies = [("approvals", "0003_expire_periodic_task")]
    operations = [migrations.RunPython(seed, unseed)]
