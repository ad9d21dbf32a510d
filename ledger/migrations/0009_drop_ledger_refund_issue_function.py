"""Drop the PL/pgSQL twin of `ledger_refund_issue` (migration 0007).

The refund write has one implementation: the ORM under the order's row lock
(`ledger.services.ledger_refund_issue`), with the append-only triggers, the deferred cap
trigger and the unique idempotency key of migrations 0002, 0004 and 0008 as the database's
backstop. Nothing calls the function any more. The reverse recreates it from 0007's SQL, so a
rollback to code that still calls it finds it.
"""

import importlib

from django.db import migrations

FUNCTION = importlib.import_module("ledger.migrations.0007_ledger_refund_issue_function")


def forward(apps, schema_editor):
    schema_editor.execute(FUNCTION.REVERSE, params=None)


def reverse(apps, schema_editor):
    schema_editor.execute(FUNCTION.FORWARD, params=None)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0008_refundentry_idempotency_key_constraint")]

    operations = [migrations.RunPython(forward, reverse, elidable=False)]
