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
    stripe_account = models.CharField(
        max_length=100, blank=True, help_text="Stripe connected account (acct_…) of this shop; blank: the platform's own."
    )
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


class RefundStatus(models.TextChoices):
    PENDING = "pending", "Pending at the provider"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"
    EXTERNAL = "external", "Made at the provider outside the product"


# What still counts against the order's refundable amount (money out, or possibly out).
COUNTING_STATUSES = (RefundStatus.PENDING, RefundStatus.SUCCEEDED, RefundStatus.EXTERNAL)
# The only moves a status may make (the same table is in the trigger of migration 0003).
# A refund the provider reported succeeded may still fail later (e.g. the card was closed).
STATUS_TRANSITIONS = {
    RefundStatus.PENDING: {RefundStatus.SUCCEEDED, RefundStatus.FAILED, RefundStatus.CANCELED},
    RefundStatus.SUCCEEDED: {RefundStatus.FAILED},
    RefundStatus.EXTERNAL: {RefundStatus.FAILED, RefundStatus.CANCELED},
    RefundStatus.FAILED: set(),
    RefundStatus.CANCELED: set(),
}


class RefundEntryQuerySet(AppendOnlyQuerySet):
    def counting(self):
        return self.filter(status__in=COUNTING_STATUSES)

    def _status_compare_and_set(self, *, pk, from_status, **values) -> int:
        """The one UPDATE the ledger allows (status, provider_ref, status_changed_at), used only by
        `ledger.services.ledger_refund_record_outcome` after it appended the status event."""
        return models.QuerySet.update(self.filter(pk=pk, status=from_status), **values)


class RefundEntry(AppendOnlyModel):
    """One refund, written only by `ledger.services.ledger_refund_issue` (and, for refunds made
    at the provider outside the product, `ledger.services.ledger_refund_record_external`).

    `amount` is the amount as issued; a correction appends a RefundRevision and the entry's
    effective amount is the newest revision's `new_amount`. `status` is the newest
    RefundEntryEvent's `to_status`: the events are the history, the column is their index
    (PostgreSQL refuses a status that is not the newest event's, migration 0003).
    """

    Status = RefundStatus

    class Source(models.TextChoices):
        APPROVAL = "approval", "Approved refund"
        IMPORT = "import", "Imported from the shop"
        MANUAL = "manual", "Manual (operator)"
        EXTERNAL = "external", "Made at the provider outside the product"

    class Gateway(models.TextChoices):
        MANUAL = "manual", "Paid out by hand"
        STRIPE = "stripe", "Stripe"
        STORE_CREDIT = "store_credit", "Store credit (gift card)"

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
    # Database defaults too: a row written by hand in SQL is a refund paid by hand (it counts).
    status = models.CharField(
        max_length=20, choices=RefundStatus.choices, default=RefundStatus.SUCCEEDED, db_default=RefundStatus.SUCCEEDED
    )
    status_changed_at = models.DateTimeField(null=True, blank=True)
    gateway = models.CharField(max_length=20, choices=Gateway.choices, default=Gateway.MANUAL, db_default=Gateway.MANUAL)
    provider_ref = models.CharField(
        max_length=100, blank=True, default="", db_default="", help_text="The provider's refund id (re_…)."
    )
    needs_review = models.BooleanField(
        default=False, db_default=False,
        help_text="Made outside the product: finance reviews it (see its reconciliation finding).",
    )

    objects = RefundEntryQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "refund entries"
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="refund_entry_amount_positive"),
            models.UniqueConstraint(
                fields=["gateway", "provider_ref"], condition=~Q(provider_ref=""), name="refund_entry_provider_ref_once"
            ),
        ]
        indexes = [
            models.Index(fields=["status"], condition=Q(status="pending"), name="refund_entry_pending"),
        ]

    def __str__(self):
        return f"refund #{self.pk} {self.amount} {self.currency} on {self.order_id}"

    @property
    def counts(self) -> bool:
        return self.status in COUNTING_STATUSES


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


class RefundEntryEvent(AppendOnlyModel):
    """One change of a refund entry's status, appended; never updated or deleted."""

    class Source(models.TextChoices):
        ISSUE = "issue", "Written by the ledger"
        GATEWAY = "gateway", "The provider's answer"
        WEBHOOK = "webhook", "Provider webhook"
        RECONCILIATION = "reconciliation", "Reconciliation"
        MIGRATION = "migration", "Existing entry (migration)"

    entry = models.ForeignKey(RefundEntry, on_delete=models.PROTECT, related_name="events")
    from_status = models.CharField(max_length=20, choices=RefundStatus.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=RefundStatus.choices)
    provider_ref = models.CharField(max_length=100, blank=True)
    reason = models.TextField(blank=True, help_text="The provider's reason (e.g. a decline code), or why.")
    source = models.CharField(max_length=20, choices=Source.choices)
    event_ref = models.CharField(max_length=100, blank=True, help_text="The webhook event id, when from a webhook.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["entry", "id"]

    def __str__(self):
        return f"#{self.entry_id} {self.from_status or '∅'} → {self.to_status}"


class WebhookEvent(models.Model):
    """A provider event, stored once by its id (a replay finds it and does nothing)."""

    provider = models.CharField(max_length=20, default="stripe")
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        help_text="The shop whose refund it was about, once processed (blank: none of ours).",
    )
    event_id = models.CharField(max_length=100)
    type = models.CharField(max_length=100)
    account = models.CharField(max_length=100, blank=True, help_text="The connected account it came from, if any.")
    payload = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)
    result = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["provider", "event_id"], name="webhook_event_once")]
        indexes = [models.Index(fields=["received_at"], condition=Q(processed_at=None), name="webhook_event_unprocessed")]

    def __str__(self):
        return f"{self.provider} {self.event_id} {self.type}"


class ReconciliationRun(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    gateway = models.CharField(max_length=20)
    since = models.DateTimeField()
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    provider_refunds = models.PositiveIntegerField(default=0)
    ledger_entries = models.PositiveIntegerField(default=0)
    findings_count = models.PositiveIntegerField(default=0)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"reconciliation #{self.pk} ({self.gateway}, since {self.since:%Y-%m-%d})"


class ReconciliationFindingQuerySet(TenantQuerySet):
    def unresolved(self):
        return self.filter(resolved_at__isnull=True)


class ReconciliationFinding(models.Model):
    class Kind(models.TextChoices):
        MISSING_IN_LEDGER = "missing_in_ledger", "Missing in the ledger"
        MISSING_AT_PROVIDER = "missing_at_provider", "Missing at the provider"
        AMOUNT_DIFFERS = "amount_differs", "Amount differs"
        STATUS_DIFFERS = "status_differs", "Status differs"

    run = models.ForeignKey(ReconciliationRun, on_delete=models.PROTECT, null=True, blank=True, related_name="findings")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    entry = models.ForeignKey(RefundEntry, on_delete=models.PROTECT, null=True, blank=True, related_name="findings")
    provider_ref = models.CharField(max_length=100, blank=True)
    ledger_amount = models.DecimalField(**MONEY, null=True, blank=True)
    provider_amount = models.DecimalField(max_digits=15, decimal_places=3, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    ledger_status = models.CharField(max_length=20, blank=True)
    provider_status = models.CharField(max_length=20, blank=True)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    resolution_note = models.TextField(blank=True)

    objects = ReconciliationFindingQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"{self.get_kind_display()}: {self.provider_ref or f'entry #{self.entry_id}'}"
