from django.apps import AppConfig


class RefundagentConfig(AppConfig):
    name = "refundagent"
    verbose_name = "Refund agent"
    # What each role may do with the agent's models (see ledger/tenancy.py, roles_sync).
    role_permissions = {
        "support": ["refundagent.view_ticket", "refundagent.view_escalatedticket"],
        "finance": ["refundagent.view_ticket", "refundagent.view_escalatedticket", "refundagent.view_traceevent",
                    "refundagent.view_refunddraft"],
        "operator": [
            "refundagent.view_ticket",
            "refundagent.view_escalatedticket",
            "refundagent.view_agentrun",
            "refundagent.view_traceevent",
            "refundagent.view_refunddraft",
        ],
    }

    def ready(self):
        # Receivers for the approvals layer's signals (approval decided, refund executed, verified).
        # One log line per money decision, from the same signals (docs/operations.md).
        from . import (
            money_log,  # noqa: F401
            receivers,  # noqa: F401
        )
