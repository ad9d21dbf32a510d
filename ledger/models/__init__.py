"""The system of record, one module per concept: tenancy (tenants, memberships, API tokens),
orders (customers, payment methods, orders, payments), refunds (the append-only ledger and
its status events) and payments (webhook events and reconciliation findings).
Every name is re-exported here, so `from ledger.models import X` is the one import path."""

from .orders import MONEY, Customer, Order, OrderItem, OrderQuerySet, Payment, PaymentMethod
from .payments import Dispute, ReconciliationFinding, ReconciliationFindingQuerySet, ReconciliationRun, WebhookEvent
from .refunds import (
    COUNTING_STATUSES,
    FIRST_STATUSES,
    STATUS_TRANSITIONS,
    AppendOnlyModel,
    AppendOnlyQuerySet,
    LedgerImmutable,
    RefundEntry,
    RefundEntryEvent,
    RefundEntryItem,
    RefundEntryQuerySet,
    RefundRevision,
    RefundStatus,
)
from .shopify import ShopifyConnection, ShopifyOrder
from .tenancy import ApiToken, IdempotencyKey, Membership, Tenant, TenantQuerySet

__all__ = [
    "ShopifyConnection",
    "ShopifyOrder",
    "Dispute",
    "COUNTING_STATUSES",
    "FIRST_STATUSES",
    "STATUS_TRANSITIONS",
    "RefundEntryEvent",
    "RefundEntryQuerySet",
    "RefundStatus",
    "ReconciliationFinding",
    "ReconciliationFindingQuerySet",
    "ReconciliationRun",
    "WebhookEvent",
    "MONEY",
    "ApiToken",
    "AppendOnlyModel",
    "AppendOnlyQuerySet",
    "Customer",
    "IdempotencyKey",
    "LedgerImmutable",
    "Membership",
    "Order",
    "OrderItem",
    "OrderQuerySet",
    "Payment",
    "PaymentMethod",
    "RefundEntry",
    "RefundEntryItem",
    "RefundRevision",
    "Tenant",
    "TenantQuerySet",
]
