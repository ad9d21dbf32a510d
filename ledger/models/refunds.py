"""The refund ledger: refund entries, the order lines they are for, and their revisions.

Refund entries and their revisions are append-only: the ORM refuses to delete them, and on
PostgreSQL triggers refuse UPDATE and DELETE and re-check the refund caps (migration 0002), so
a bug above the service still cannot corrupt the ledger. What is still refundable is derived
from the entries, never stored.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from .orders import MONEY, Order, OrderItem, PaymentMethod
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
