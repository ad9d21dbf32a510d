"""The shop's records: customers, their payment methods, orders, order lines and payments.

Money is Decimal(12, 2) with an ISO currency beside it.
"""

from django.db import models
from django.db.models import Q

from ..money import DECIMAL_PLACES, MAX_DIGITS
from .tenancy import Tenant, TenantQuerySet

MONEY = {"max_digits": MAX_DIGITS, "decimal_places": DECIMAL_PLACES}


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
    # A gift card's balance is a ledger fact once the ledger has credited it: the opening balance
    # (the shop's, as imported) plus the store credit the ledger issued to it (see
    # ledger.selectors.gift_card_balance). `balance` is that sum kept beside the row for reads,
    # moved only in the ledger's own transactions; reconciliation checks the two agree.
    balance = models.DecimalField(**MONEY, null=True, blank=True, help_text="Gift cards only.")
    opening_balance = models.DecimalField(
        **MONEY,
        null=True,
        blank=True,
        help_text="Gift cards only: the shop's balance before the store credit this product issued.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["customer", "external_id"], name="payment_method_unique_per_customer"),
        ]

    def __str__(self):
        if self.kind == self.Kind.CARD:
            return f"{self.brand or 'card'} ****{self.last4}"
        return f"{self.get_kind_display()} {self.external_id}"

    def save(self, *args, **kwargs):
        # A new gift card opens at the balance it is created with (bulk writers set it themselves).
        if self.pk is None and self.opening_balance is None:
            self.opening_balance = self.balance
        super().save(*args, **kwargs)


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
    payment_method = models.ForeignKey(
        PaymentMethod, on_delete=models.PROTECT, null=True, blank=True, related_name="payments"
    )
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
