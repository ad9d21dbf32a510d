from django.apps import AppConfig
from django.db.models.signals import post_migrate


class LedgerConfig(AppConfig):
    name = "ledger"
    # What each role may do with the ledger's models (see ledger/tenancy.py, roles_sync).
    # Nobody edits the ledger by hand: the roles only read it.
    role_permissions = {
        "support": ["ledger.view_order", "ledger.view_customer", "ledger.view_refundentry"],
        "finance": [
            "ledger.view_order",
            "ledger.view_customer",
            "ledger.view_payment",
            "ledger.view_refundentry",
            "ledger.view_refundrevision",
        ],
    }

    def ready(self):
        from .tenancy import roles_sync_after_migrate

        # Every deployment gets the role groups after `migrate`, not only the demo.
        post_migrate.connect(roles_sync_after_migrate, dispatch_uid="ledger.roles_sync")
