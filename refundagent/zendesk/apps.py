from django.apps import AppConfig


class ZendeskConfig(AppConfig):
    name = "refundagent.zendesk"
    label = "zendesk"
    verbose_name = "Zendesk"
    # No role permissions of its own: superusers see the connection and the outboxes in the admin;
    # support sees the write-back on the ticket page.
    role_permissions: dict = {}

    def ready(self):
        # The tasks, so every worker and beat process knows them.
        from . import tasks  # noqa: F401
