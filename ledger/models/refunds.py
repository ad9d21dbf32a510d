"""The refund ledger: refund entries, the order lines they are for, and their revisions.

Refund entries and their revisions are append-only: the ORM refuses to delete them, and on
PostgreSQL triggers refuse UPDATE and DELETE and re-check the refund caps (migration 0002), so
a bug above the service still cannot corrupt the ledger. What is still refundable is derived
from the entries, never stored.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from .orders import MONEY, Order, OrderItem, Payment, PaymentMethod
from .tenancy import Tenant, TenantQuerySet


class LedgerImmutable(Exception):
    """Raised on an attempt to delete or overwrite ledger history."""


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
# The statuses an entry is written in (ledger.services: an approved refund paid through a provider
# or by hand starts pending; store credit, imports and operator entries succeeded; a refund made at
# the provider outside the product external).
FIRST_STATUSES = (RefundStatus.PENDING, RefundStatus.SUCCEEDED, RefundStatus.EXTERNAL)
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
        SHOPIFY = "shopify", "Shopify"
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
    # The order's payment this refund gives back (one tender leg of an approval, docs/payments.md
    # "Split tender"): the payout refunds exactly that payment. Blank on entries written before
    # legs were recorded, on imports and on store credit to a gift card the order was not paid with.
    payment = models.ForeignKey(
        Payment,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="refund_entries",
        help_text="The order's payment this refund returns (the approved tender leg).",
    )
    idempotency_key = models.CharField(max_length=200)  # unique: see Meta.constraints
    request_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the arguments, to tell a replay from a conflict."
    )
    source = models.CharField(max_length=20, choices=Source.choices)
    approval_ref = models.CharField(
        max_length=64, blank=True, help_text="Id of the approval request that authorised this refund."
    )
    reason = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Database defaults too: a row written by hand in SQL is a refund paid by hand (it counts).
    status = models.CharField(
        max_length=20, choices=RefundStatus.choices, default=RefundStatus.SUCCEEDED, db_default=RefundStatus.SUCCEEDED
    )
    status_changed_at = models.DateTimeField(null=True, blank=True)
    gateway = models.CharField(
        max_length=20, choices=Gateway.choices, default=Gateway.MANUAL, db_default=Gateway.MANUAL
    )
    provider_ref = models.CharField(
        max_length=100, blank=True, default="", db_default="", help_text="The provider's refund id (re_…)."
    )
    needs_review = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Made outside the product: finance reviews it (see its reconciliation finding).",
    )

    objects = RefundEntryQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "refund entries"
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="refund_entry_amount_positive"),
            # A constraint rather than unique=True, for which Django adds a second index on
            # PostgreSQL (varchar_pattern_ops, for LIKE) that nothing uses and every refund
            # paid for (ledger/0008 says how much).
            models.UniqueConstraint(fields=["idempotency_key"], name="ledger_refundentry_idempotency_key_key"),
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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
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
        PERSON = "person", "Recorded by a person (paid by hand)"

    entry = models.ForeignKey(RefundEntry, on_delete=models.PROTECT, related_name="events")
    from_status = models.CharField(max_length=20, choices=RefundStatus.choices, blank=True)
    to_status = models.CharField(max_length=20, choices=RefundStatus.choices)
    provider_ref = models.CharField(max_length=100, blank=True)
    reason = models.TextField(blank=True, help_text="The provider's reason (e.g. a decline code), or why.")
    source = models.CharField(max_length=20, choices=Source.choices)
    event_ref = models.CharField(max_length=100, blank=True, help_text="The webhook event id, when from a webhook.")
    recorded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The person who recorded this change (a manual payout); blank when a system did.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["entry", "id"]

    def __str__(self):
        return f"#{self.entry_id} {self.from_status or '∅'} → {self.to_status}"
