"""Read-only views of the Zendesk connection and its two outboxes. The API token and the
webhook secret are never shown: only whether they are set (connect again to change them)."""

from django.contrib import admin

from ledger.admin import ReadOnlyAdminMixin, TenantScopedAdminMixin

from .models import ZendeskConnection, ZendeskInbound, ZendeskWrite


def _set(value) -> str:
    return "set" if value else "not set"


@admin.register(ZendeskConnection)
class ZendeskConnectionAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("subdomain", "tenant", "account_id", "agent_email", "api_token_state", "webhook_secret_state")
    # `fields` names every column shown: the encrypted ones are never among them.
    fields = (
        "tenant",
        "subdomain",
        "account_id",
        "agent_email",
        "agent_user_id",
        "api_token_state",
        "webhook_secret_state",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields

    @admin.display(description="API token")
    def api_token_state(self, obj):
        return _set(obj.api_token)

    @admin.display(description="webhook secret")
    def webhook_secret_state(self, obj):
        return _set(obj.webhook_secret)


@admin.register(ZendeskInbound)
class ZendeskInboundAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("zendesk_ticket_id", "connection", "ticket", "requester_verified", "processed_at", "attempts")
    exclude = ("description",)


@admin.register(ZendeskWrite)
class ZendeskWriteAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("ticket", "zendesk_ticket_id", "kind", "outcome", "status", "attempts", "sent_at", "last_error")
    list_filter = ("status", "kind")
