"""The ledger in the Django admin: for looking, not for editing.

Money history (refund entries, their items and revisions) and payments are read-only here:
refunds are written by `ledger_refund_issue` only, corrections by `ledger_refund_correct`.
Orders and customers come from the shop (`import_orders`) and are read-only too.

`TenantScopedAdminMixin` is the one place where admin querysets are scoped to the staff
user's tenant; the approvals and refundagent admins reuse it. `StrictChangeListAdminMixin` (which
it includes) is the one place where a changelist's querystring and an action's selection are
checked: every admin of the project has it.
"""

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import BadRequest, ValidationError
from django.db import DataError, transaction
from django.db.models import Q
from django.db.models.constants import LOOKUP_SEP
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from .models import (
    ApiToken,
    Customer,
    Dispute,
    IdempotencyKey,
    Membership,
    Order,
    OrderItem,
    Payment,
    PaymentMethod,
    ReconciliationFinding,
    ReconciliationRun,
    RefundEntry,
    RefundEntryEvent,
    RefundEntryItem,
    RefundRevision,
    ShopifyConnection,
    ShopifyOrder,
    Tenant,
    WebhookEvent,
)
from .reconciliation import reconciliation_findings_resolve
from .tenancy import api_tokens_revoke


def admin_tenant(request):
    """The staff user's tenant, or None (no membership: sees nothing unless superuser)."""
    membership = getattr(request.user, "membership", None) if request.user.is_authenticated else None
    return membership.tenant if membership is not None else None


# Lookups no querystring may use (400): a pattern can keep the database busy, and a range
# needs two bounds a querystring value never gives (it would be split into characters).
REFUSED_LOOKUPS = frozenset({"regex", "iregex", "range"})


class CheckedChangeList(ChangeList):
    """The admin's changelist, where a querystring value that passes the admin's lookup checks
    but fails later gets the admin's answer to bad filters, the `?e=1` redirect: in the date
    hierarchy (a year datetime cannot hold), or when the count first runs the filtered query,
    whether its SQL cannot be written (`created_at__year=0`,
    `expires_at__iso_year=99999999999999999999`) or the database or its driver refuses a value
    (an int too big for a small column, text for a binary one)."""

    def get_filters(self, request):
        try:
            return super().get_filters(request)
        except (ValueError, OverflowError) as exc:  # e.g. placed_at__year=99999999999999999999, or 9999
            raise IncorrectLookupParameters(exc) from exc

    def get_results(self, request):
        if not self.get_filters_params():  # nothing from the querystring to fail: no savepoint
            return super().get_results(request)
        try:
            with transaction.atomic(using=self.root_queryset.db):  # a failed statement ends only this
                super().get_results(request)
        except (DataError, OverflowError, TypeError, ValueError, IndexError) as exc:
            raise IncorrectLookupParameters(exc) from exc


class StrictChangeListAdminMixin:
    """Bad input to a changelist is a 4xx, never a 500: a lookup in the querystring that cannot
    run is the admin's `?e=1` redirect (CheckedChangeList), a refused lookup (REFUSED_LOOKUPS) a
    400, and an action on selected ids that are not ids of the model (`_selected_action=abc`) a
    400 that does nothing."""

    def get_changelist(self, request, **kwargs):
        return CheckedChangeList

    def lookup_allowed(self, lookup, value, request=None):
        if lookup.split(LOOKUP_SEP)[-1] in REFUSED_LOOKUPS:
            return False
        return super().lookup_allowed(lookup, value, request)

    def response_action(self, request, queryset):
        # Checkboxes post ids; anything else failed in `filter(pk__in=...)` with a 500.
        to_python = self.model._meta.pk.to_python
        try:
            for pk in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME):
                to_python(pk)
        except ValidationError:
            raise BadRequest("The selected rows are not rows of this list: nothing was done.") from None
        return super().response_action(request, queryset)


class TenantScopedAdminMixin(StrictChangeListAdminMixin):
    """Scope a ModelAdmin to the staff user's tenant; superusers see every tenant.

    `tenant_field` is the lookup path from the model to its Tenant (e.g. "tenant",
    "order__tenant", "entry__tenant"); "" means the model is Tenant itself. Foreign-key
    choices offered in forms are scoped the same way when the related model has a tenant, and
    the list filter on `tenant_field` is a superuser's only (it names every tenant).
    """

    tenant_field = "tenant"

    def tenant_q(self, request) -> Q | None:
        """A Q that keeps the caller's tenant's rows, or None for superusers (no filter)."""
        if request.user.is_superuser:
            return None
        tenant = admin_tenant(request)
        if tenant is None:
            return Q(pk__in=[])
        return Q(pk=tenant.pk) if self.tenant_field == "" else Q(**{self.tenant_field: tenant})

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        q = self.tenant_q(request)
        return queryset if q is None else queryset.filter(q)

    def get_list_filter(self, request):
        list_filter = super().get_list_filter(request)
        if request.user.is_superuser:
            return list_filter
        # "By tenant" lists every tenant's slug and id; a staff user has one tenant anyway.
        return [f for f in list_filter if (f[0] if isinstance(f, (list, tuple)) else f) != self.tenant_field]

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        related = db_field.related_model
        if not request.user.is_superuser and any(f.name == "tenant" for f in related._meta.get_fields()):
            kwargs["queryset"] = related._default_manager.filter(tenant=admin_tenant(request))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class NoDeleteAdminMixin:
    """Never deleted through the admin: no delete button, no bulk delete action."""

    def has_delete_permission(self, request, obj=None):
        return False

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


class ReadOnlyAdminMixin(NoDeleteAdminMixin):
    """Viewable with the view permission; never added, changed or deleted through the admin."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request, obj=None):
        return self.fields


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    tenant_field = ""
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("created_at",)

    def has_delete_permission(self, request, obj=None):
        return False  # everything of a tenant is PROTECTed; a tenant is never deleted


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ("user", "tenant")
    list_filter = ("tenant",)
    search_fields = ("user__username", "user__email", "tenant__slug")
    list_select_related = ("user", "tenant")
    autocomplete_fields = ("user",)


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Tokens are created by `manage.py create_api_token` (the only time one is shown); the
    admin lists and revokes them. Only the hash is stored, so no view can reveal a token."""

    tenant_field = "user__membership__tenant"
    list_display = ("prefix", "user", "created_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "user__membership__tenant")
    search_fields = ("prefix", "user__username")
    list_select_related = ("user",)
    fields = ("user", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("user", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the row says who had access and when it was last used

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        count = api_tokens_revoke(queryset=queryset)
        self.message_user(request, f"{count} token(s) revoked.")


class PaymentMethodInline(ReadOnlyInline):
    model = PaymentMethod
    fields = ("external_id", "kind", "brand", "last4", "balance", "opening_balance")


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The API's Idempotency-Keys: written by the middleware only; expired ones go with
    `manage.py purge_idempotency_keys`. The stored response body is not shown."""

    tenant_field = "user__membership__tenant"
    list_display = ("key", "user", "status_code", "created_at", "expires_at")
    list_filter = ("status_code",)
    search_fields = ("key", "user__username")
    list_select_related = ("user",)
    fields = ("user", "key", "request_hash", "status_code", "content_type", "created_at", "expires_at")


@admin.register(Customer)
class CustomerAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("external_id", "name", "email", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("external_id", "name", "email")
    list_select_related = ("tenant",)
    inlines = (PaymentMethodInline,)


@admin.register(PaymentMethod)
class PaymentMethodAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "customer__tenant"
    list_display = ("external_id", "kind", "brand", "last4", "balance", "opening_balance", "customer")
    list_filter = ("kind", "customer__tenant")
    search_fields = ("external_id", "customer__external_id", "last4")
    list_select_related = ("customer",)


class OrderItemInline(ReadOnlyInline):
    model = OrderItem
    fields = ("line_no", "item_id", "name", "price", "quantity", "product_id", "options")


class PaymentInline(ReadOnlyInline):
    model = Payment
    fields = ("method", "payment_method", "card_brand", "card_last4", "payment_ref", "amount", "currency")


class RefundEntryInline(ReadOnlyInline):
    model = RefundEntry
    fields = ("id", "amount", "currency", "source", "idempotency_key", "approval_ref", "created_at")
    show_change_link = True


@admin.register(Order)
class OrderAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("external_id", "customer", "total", "currency", "status", "placed_at", "tenant")
    list_filter = ("status", "currency", "tenant")
    search_fields = ("external_id", "customer__external_id", "customer__email")
    list_select_related = ("customer", "tenant")
    date_hierarchy = "placed_at"
    inlines = (OrderItemInline, PaymentInline, RefundEntryInline)


@admin.register(OrderItem)
class OrderItemAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "order__tenant"
    list_display = ("order", "line_no", "item_id", "name", "price", "quantity")
    search_fields = ("item_id", "name", "order__external_id", "product_id")
    list_filter = ("order__tenant",)
    list_select_related = ("order",)


@admin.register(Payment)
class PaymentAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "order__tenant"
    list_display = ("order", "method", "amount", "currency", "card_brand", "card_last4", "created_at")
    list_filter = ("method", "currency", "order__tenant")
    search_fields = ("order__external_id", "payment_ref")
    list_select_related = ("order",)


class RefundEntryItemInline(ReadOnlyInline):
    model = RefundEntryItem
    fields = ("order_item", "quantity", "amount")


class RefundRevisionInline(ReadOnlyInline):
    model = RefundRevision
    fields = ("old_amount", "new_amount", "reason", "created_by", "created_at")


class RefundEntryEventInline(ReadOnlyInline):
    model = RefundEntryEvent
    fields = ("from_status", "to_status", "provider_ref", "reason", "source", "event_ref", "created_at")


@admin.register(RefundEntry)
class RefundEntryAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "order",
        "amount",
        "currency",
        "status",
        "gateway",
        "source",
        "destination_kind",
        "approval_ref",
        "needs_review",
        "created_at",
    )
    list_filter = ("status", "gateway", "needs_review", "source", "currency", "tenant")
    search_fields = ("=id", "order__external_id", "idempotency_key", "approval_ref", "provider_ref")
    list_select_related = ("order",)
    date_hierarchy = "created_at"
    inlines = (RefundEntryItemInline, RefundRevisionInline, RefundEntryEventInline)


@admin.register(RefundEntryEvent)
class RefundEntryEventAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "entry__tenant"
    list_display = ("entry", "from_status", "to_status", "provider_ref", "source", "reason", "created_at")
    list_filter = ("to_status", "source", "entry__tenant")
    search_fields = ("entry__order__external_id", "provider_ref", "event_ref")
    list_select_related = ("entry",)


@admin.register(WebhookEvent)
class WebhookEventAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ("event_id", "type", "provider", "account", "tenant", "received_at", "processed_at", "result")
    list_filter = ("provider", "type", ("processed_at", admin.EmptyFieldListFilter), "tenant")
    search_fields = ("event_id", "type", "result")


@admin.register(Dispute)
class DisputeAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Disputes as the provider reported them (webhooks, reconciliation): read-only, the provider's facts."""

    list_display = ("provider_ref", "order", "status", "reason", "amount", "currency", "is_charge_refundable", "tenant")
    list_filter = ("status", "is_charge_refundable", "tenant")
    search_fields = ("provider_ref", "order__external_id")


@admin.register(ReconciliationRun)
class ReconciliationRunAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = (
        "id",
        "gateway",
        "tenant",
        "since",
        "started_at",
        "finished_at",
        "provider_refunds",
        "ledger_entries",
        "findings_count",
    )
    list_filter = ("gateway", "tenant")
    search_fields = ("note",)


@admin.register(ReconciliationFinding)
class ReconciliationFindingAdmin(TenantScopedAdminMixin, NoDeleteAdminMixin, admin.ModelAdmin):
    """Finance reviews differences here. Read-only, except marking them resolved (who and when kept)."""

    list_display = (
        "id",
        "kind",
        "tenant",
        "entry",
        "provider_ref",
        "ledger_amount",
        "provider_amount",
        "currency",
        "ledger_status",
        "provider_status",
        "created_at",
        "resolved_at",
        "resolved_by",
    )
    list_filter = ("kind", ("resolved_at", admin.EmptyFieldListFilter), "tenant")
    search_fields = ("provider_ref", "entry__order__external_id", "detail")
    list_select_related = ("tenant", "entry", "resolved_by")
    actions = ("resolve",)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Mark the selected findings resolved", permissions=["change"])
    def resolve(self, request, queryset):
        count = reconciliation_findings_resolve(
            queryset=queryset, user=request.user, note=f"Resolved in the admin by {request.user.get_username()}."
        )
        self.message_user(request, f"{count} finding(s) resolved.")


@admin.register(RefundEntryItem)
class RefundEntryItemAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "entry__tenant"
    list_display = ("entry", "order_item", "quantity", "amount")
    search_fields = ("entry__order__external_id", "order_item__item_id")
    list_filter = ("entry__tenant",)
    list_select_related = ("entry", "order_item")


@admin.register(RefundRevision)
class RefundRevisionAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    tenant_field = "entry__tenant"
    list_display = ("entry", "old_amount", "new_amount", "reason", "created_by", "created_at")
    search_fields = ("entry__order__external_id", "reason")
    list_filter = ("entry__tenant",)
    list_select_related = ("entry", "created_by")


@admin.register(ShopifyConnection)
class ShopifyConnectionAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read-only: connecting is `manage.py shopify_connect`, which checks the credentials first.
    The secret and the token are never shown, only whether they are set."""

    list_display = ("shop_domain", "tenant", "shop_name", "secret", "token", "last_synced_at", "refused_count")
    fields = (
        "tenant",
        "shop_domain",
        "shop_name",
        "currency",
        "client_id",
        "secret",
        "token",
        "token_expires_at",
        "last_synced_at",
        "sync_started_at",
        "refused",
        "bulk_operation_id",
        "bulk_started_at",
        "bulk_lines_applied",
    )
    readonly_fields = fields

    @admin.display(description="orders refused")
    def refused_count(self, obj):
        return len(obj.refused_orders or {})

    @admin.display(description="orders refused (skipped by the sync or a webhook, until applied again)")
    def refused(self, obj):
        refusals = sorted((obj.refused_orders or {}).values(), key=lambda r: r.get("at") or "", reverse=True)
        if not refusals:
            return "none"
        return format_html_join(
            mark_safe("<br>"), "{} ({}): {}", ((r.get("order"), r.get("at"), r.get("reason")) for r in refusals)
        )

    @admin.display(description="client secret")
    def secret(self, obj):
        return "set" if obj.client_secret else "not set"

    @admin.display(description="access token")
    def token(self, obj):
        return "set" if obj.access_token else "not set"


@admin.register(ShopifyOrder)
class ShopifyOrderAdmin(TenantScopedAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Which product order each Shopify order is (written by the sync and the webhooks only)."""

    tenant_field = "connection__tenant"
    list_display = ("order", "shopify_id", "connection", "shopify_updated_at")
    list_select_related = ("order", "connection")
    search_fields = ("order__external_id", "shopify_id")
