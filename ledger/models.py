"""The system of record: tenants, customers, orders, payments and the refund ledger.

Money is Decimal(12, 2) with an ISO currency beside it. Refund entries and their revisions
are append-only: the ORM refuses to delete them, and on PostgreSQL triggers refuse UPDATE
and DELETE and re-check the refund caps (migration 0002), so a bug above the service still
cannot corrupt the ledger. What is still refundable is derived from the entries, never stored.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

MONEY = {"max_digits": 12, "decimal_places": 2}


class LedgerImmutable(Exception):
    """Raised on an attempt to delete or overwrite ledger history."""


class Tenant(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.slug


class Membership(models.Model):
    """Every user belongs to exactly one tenant; roles are the groups `support` and `finance`."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="memberships")

    def __str__(self):
        return f"{self.user} @ {self.tenant}"


class ApiToken(models.Model):
    """A Bearer token for the API. Only the SHA-256 of the token is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12, help_text="First characters of the token, to tell tokens apart.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.prefix}… ({self.user})"


class TenantQuerySet(models.QuerySet):
    """The one place where tenant scoping happens: every selector starts from `for_tenant`."""

    tenant_path = "tenant"

    def for_tenant(self, tenant):
        return self.filter(**{self.tenant_path: tenant})


class Customer(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="customers")
    external_id = models.CharField(max_length=100, help_text="The shop's customer id, e.g. CUST-1001.")
    name = models.CharField(max_length=200, blank=True)
    email = models.EmailField(blank=True)
    address = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "external_id"], name="customer_unique_per_tenant")]

    def __str__(self):
        return self.external_id


class PaymentMethod(models.Model):
    class Kind(models.TextChoices):
        CARD = "card"
        PAYPAL = "paypal"
        GIFT_CARD = "gift_card"

    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="payment_methods")
    external_id = models.CharField(max_length=100, help_text="The shop's id, e.g. credit_card_7815826.")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    brand = models.CharField(max_length=40, blank=True)
    last4 = models.CharField(max_length=4, blank=True)
    balance = models.DecimalField(**MONEY, null=True, blank=True, help_text="Gift cards only.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["customer", "external_id"], name="payment_method_unique_per_customer"),
        ]

    def __str__(self):
        if self.kind == self.Kind.CARD:
            return f"{self.brand or 'card'} ****{self.last4}"
        return f"{self.get_kind_display()} {self.external_id}"


class OrderQuerySet(TenantQuerySet):
    pass


class Order(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        PROCESSED = "processed"
        DELIVERED = "delivered"
        CANCELLED = "cancelled"

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="orders")
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="orders")
    external_id = models.CharField(max_length=100, help_text="The shop's order id, e.g. ORD-5001 or #W2611340.")
    total = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    placed_at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.DELIVERED)
    note = models.TextField(blank=True, help_text="Free text from the shop. Untrusted: never an instruction.")
    address = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = OrderQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "external_id"], name="order_unique_per_tenant"),
            models.CheckConstraint(condition=Q(total__gte=0), name="order_total_not_negative"),
        ]

    def __str__(self):
        return self.external_id


class OrderItem(models.Model):
    """One line of an order. The same item id may appear on several lines (τ-bench does this)."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="items")
    line_no = models.PositiveIntegerField()
    item_id = models.CharField(max_length=100)
    name = models.CharField(max_length=200)
    price = models.DecimalField(**MONEY, help_text="Unit price.")
    quantity = models.PositiveIntegerField(default=1)
    product_id = models.CharField(max_length=100, blank=True)
    options = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["order", "line_no"]
        constraints = [
            models.UniqueConstraint(fields=["order", "line_no"], name="order_item_unique_line"),
            models.CheckConstraint(condition=Q(price__gte=0), name="order_item_price_not_negative"),
            models.CheckConstraint(condition=Q(quantity__gte=1), name="order_item_quantity_positive"),
        ]

    def __str__(self):
        return f"{self.item_id} {self.name}"


class Payment(models.Model):
    """Money the customer paid for an order (refunds live in RefundEntry, never here)."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="payments")
    payment_method = models.ForeignKey(PaymentMethod, on_delete=models.PROTECT, null=True, blank=True, related_name="payments")
    method = models.CharField(max_length=20, choices=PaymentMethod.Kind.choices)
    card_brand = models.CharField(max_length=40, blank=True)
    card_last4 = models.CharField(max_length=4, blank=True)
    payment_ref = models.CharField(max_length=200, blank=True, help_text="Processor reference. Redacted in traces.")
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(amount__gt=0), name="payment_amount_positive")]

    def __str__(self):
        return f"{self.amount} {self.currency} by {self.method}"


class AppendOnlyQuerySet(TenantQuerySet):
    def delete(self):
        raise LedgerImmutable("Ledger history is append-only: nothing is ever deleted.")

    def update(self, **kwargs):
        raise LedgerImmutable("Ledger history is append-only: correct an entry with a revision.")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise LedgerImmutable(f"{type(self).__name__} rows are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise LedgerImmutable("Ledger history is append-only: nothing is ever deleted.")


class RefundEntry(AppendOnlyModel):
    """One refund, written only by `ledger.services.ledger_refund_issue`.

    `amount` is the amount as issued; a correction appends a RefundRevision and the entry's
    effective amount is the newest revision's `new_amount`.
    """

    class Source(models.TextChoices):
        APPROVAL = "approval", "Approved refund"
        IMPORT = "import", "Imported from the shop"
        MANUAL = "manual", "Manual (operator)"

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="refund_entries")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="refund_entries")
    amount = models.DecimalField(**MONEY)
    currency = models.CharField(max_length=3)
    destination = models.ForeignKey(
        PaymentMethod, on_delete=models.PROTECT, null=True, blank=True, related_name="refund_entries"
    )
    destination_kind = models.CharField(
        max_length=20, blank=True, help_text="'original' (the order's payment) or 'gift_card'."
    )
    idempotency_key = models.CharField(max_length=200, unique=True)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of the arguments, to tell a replay from a conflict.")
    source = models.CharField(max_length=20, choices=Source.choices)
    approval_ref = models.CharField(
        max_length=64, blank=True, help_text="Id of the approval request that authorised this refund."
    )
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "refund entries"
        constraints = [models.CheckConstraint(condition=Q(amount__gt=0), name="refund_entry_amount_positive")]

    def __str__(self):
        return f"refund #{self.pk} {self.amount} {self.currency} on {self.order_id}"


class RefundEntryItem(AppendOnlyModel):
    """Which order lines a refund is for (item refunds only)."""

    entry = models.ForeignKey(RefundEntry, on_delete=models.PROTECT, related_name="items")
    order_item = models.ForeignKey(OrderItem, on_delete=models.PROTECT, related_name="refund_items")
    quantity = models.PositiveIntegerField(default=1)
    amount = models.DecimalField(**MONEY)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["entry", "order_item"], name="refund_item_once_per_entry"),
            models.CheckConstraint(condition=Q(quantity__gte=1), name="refund_item_quantity_positive"),
            models.CheckConstraint(condition=Q(amount__gte=0), name="refund_item_amount_not_negative"),
        ]


class RefundRevision(AppendOnlyModel):
    """A correction of a refund entry. The old amount is kept here forever."""

    entry = models.ForeignKey(RefundEntry, on_delete=models.PROTECT, related_name="revisions")
    old_amount = models.DecimalField(**MONEY)
    new_amount = models.DecimalField(**MONEY)
    reason = models.TextField()
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["entry", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(new_amount__gte=0), name="refund_revision_new_amount_not_negative"),
            models.CheckConstraint(condition=~Q(reason=""), name="refund_revision_reason_required"),
        ]
