from django.apps import AppConfig
from django.core import checks


class RefundagentConfig(AppConfig):
    name = "refundagent"
    verbose_name = "Refund agent"
    # What each role may do with the agent's models (see ledger/tenancy.py, roles_sync).
    role_permissions = {
        "support": ["refundagent.view_ticket", "refundagent.view_escalatedticket", "refundagent.view_ticketmessage"],
        "finance": [
            "refundagent.view_ticket",
            "refundagent.view_escalatedticket",
            "refundagent.view_ticketmessage",
            "refundagent.view_traceevent",
            "refundagent.view_refunddraft",
        ],
        "operator": [
            "refundagent.view_ticket",
            "refundagent.view_escalatedticket",
            "refundagent.view_ticketmessage",
            "refundagent.view_agentrun",
            "refundagent.view_traceevent",
            "refundagent.view_refunddraft",
            # Model replays in shadow (docs/replay.md): start one, read its result.
            "refundagent.view_modelreplay",
            "refundagent.add_modelreplay",
        ],
    }

    def ready(self):
        # Receivers for the approvals layer's signals (approval decided, refund executed, verified),
        # one log line per money decision from the same signals (docs/operations.md), and the
        # outbox sweep's task, so every worker and beat process knows it; and the support inbox's
        # receiver of anymail's inbound email signal.
        from . import (
            money_log,  # noqa: F401
            receivers,  # noqa: F401
            sweep,  # noqa: F401
        )
        from .agent.providers.anthropic import model_retirement_check
        from .agent.providers.caching import prompt_cache_check
        from .inbox import email_inbound  # noqa: F401

        # Warns at start (manage.py commands, the web, the workers) when the configured model
        # would not cache the prompt prefix.
        checks.register(prompt_cache_check, checks.Tags.compatibility)
        # And when a configured model is on the SDK's list of retiring models.
        checks.register(model_retirement_check, checks.Tags.compatibility)
