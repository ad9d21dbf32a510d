"""A tenant's connected Shopify store (ledger/shopify/, docs/shopify.md): its credentials,
encrypted at rest, the cached access token, and the sync's checkpoint; and which product order
each Shopify order is."""

from django.db import models
from encrypted_fields.fields import EncryptedCharField

from .orders import Order
from .tenancy import Tenant, TenantQuerySet


class ShopifyConnection(models.Model):
    tenant = models.OneToOneField(Tenant, on_delete=models.PROTECT, related_name="shopify_connection")
    shop_domain = models.CharField(max_length=255, unique=True, help_text="NAME.myshopify.com")
    shop_name = models.CharField(max_length=255, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    client_id = models.CharField(max_length=255)
    # Credentials at rest: Fernet with keys from SECRET_KEY and SALT_KEY (docs/configuration.md).
    client_secret = EncryptedCharField(max_length=255)
    # NULL until a token is taken: the encrypted field stores an empty value as NULL.
    access_token = EncryptedCharField(max_length=255, blank=True, null=True)
    token_expires_at = models.DateTimeField(null=True, blank=True)
    # The running sync's checkpoint: its lower bound and the cursor after the last page stored.
    sync_since = models.DateTimeField(null=True, blank=True)
    sync_cursor = models.TextField(blank=True, default="")
    sync_started_at = models.DateTimeField(null=True, blank=True)
    # The running backfill's checkpoint (ledger/shopify/bulk.py): its bulk operation, when it was
    # started, and how many lines of the operation's file are applied.
    bulk_operation_id = models.CharField(max_length=100, blank=True, default="")
    bulk_started_at = models.DateTimeField(null=True, blank=True)
    bulk_lines_applied = models.PositiveIntegerField(default=0)
    last_synced_at = models.DateTimeField(null=True, blank=True, help_text="Start of the last complete sync.")
    # Orders the sync or a webhook skipped ({gid: {"order", "reason", "at"}}), until applied again.
    refused_orders = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    def __str__(self):
        return self.shop_domain

    def __repr__(self):
        # Never the secret or the token, even in a traceback's locals.
        return f"<ShopifyConnection {self.shop_domain} tenant={self.tenant_id}>"


class ShopifyOrder(models.Model):
    """Which product order a Shopify order is (its gid), and the `updatedAt` last applied."""

    connection = models.ForeignKey(ShopifyConnection, on_delete=models.PROTECT, related_name="orders")
    order = models.OneToOneField(Order, on_delete=models.PROTECT, related_name="shopify")
    shopify_id = models.CharField(max_length=100, help_text="gid://shopify/Order/…")
    shopify_updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["connection", "shopify_id"], name="shopify_order_once_per_shop")]

    def __str__(self):
        return self.shopify_id
