from django.apps import AppConfig


class ZendeskConfig(AppConfig):
    name = "refundagent.zendesk"
    label = "zendesk"
    verbose_name = "Zendesk"
    role_permissions = {
        "operator": ["zendesk.view_zendeskconnection", "zendesk.view_zendeskinbound", "zendesk.view_zendeskwrite"],
    }

    def ready(self):
        # The tasks, so every worker and beat process knows them.
        from . import tasks  # noqa: F401
