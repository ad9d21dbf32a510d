from django.apps import AppConfig


class RefundagentConfig(AppConfig):
    name = "refundagent"
    verbose_name = "Refund agent"

    def ready(self):
        # Receivers for the approvals layer's signals (approval decided, refund executed, verified).
        from . import receivers  # noqa: F401
