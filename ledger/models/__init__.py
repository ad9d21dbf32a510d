"""The system of record, one module per concept: tenancy (tenants, memberships, API tokens),
orders (customers, payment methods, orders, payments) and refunds (the append-only ledger).
Every name is re-exported here, so `from ledger.models import X` is the one import path."""

from .orders import MONEY, Customer, Order, OrderItem, OrderQuerySet, Payment, PaymentMethod
from .refunds import (
    AppendOnlyModel,
    AppendOnlyQuerySet,
    LedgerImmutable,
    RefundEntry,
    RefundEntryItem,
    RefundRevision,
)
from .tenancy import ApiToken, IdempotencyKey, Membership, Tenant, TenantQuerySet

__all__ = [
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
