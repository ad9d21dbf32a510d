"""What the payment provider tells us: webhook events, stored once by id, and the daily
reconciliation of the provider's refunds against the ledger with its findings."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from .orders import MONEY, PaymentMethod
from .refunds import RefundEntry
from .tenancy import Tenant, TenantQuerySet


class WebhookEvent(models.Model):
    """A provider event, stored once by its id (a replay finds it and does nothing)."""

    provider = models.CharField(max_length=20, default="stripe")
    tenant = models.ForeignKey(
        Tenant,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
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
        indexes = [
            models.Index(fields=["received_at"], condition=Q(processed_at=None), name="webhook_event_unprocessed")
        ]

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
        STORE_CREDIT_DIFFERS = "store_credit_differs", "Store credit balance differs from the ledger"

    run = models.ForeignKey(ReconciliationRun, on_delete=models.PROTECT, null=True, blank=True, related_name="findings")
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    kind = models.CharField(max_length=30, choices=Kind.choices)
    entry = models.ForeignKey(RefundEntry, on_delete=models.PROTECT, null=True, blank=True, related_name="findings")
    provider_ref = models.CharField(max_length=100, blank=True)
    payment_method = models.ForeignKey(
        PaymentMethod, on_delete=models.PROTECT, null=True, blank=True, related_name="+", help_text="Store credit only."
    )
    ledger_amount = models.DecimalField(**MONEY, null=True, blank=True)
    provider_amount = models.DecimalField(max_digits=15, decimal_places=3, null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    ledger_status = models.CharField(max_length=20, blank=True)
    provider_status = models.CharField(max_length=20, blank=True)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resolution_note = models.TextField(blank=True)

    objects = ReconciliationFindingQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"{self.get_kind_display()}: {self.provider_ref or f'entry #{self.entry_id}'}"
