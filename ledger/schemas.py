from datetime import datetime
from decimal import Decimal
from typing import Annotated

from ninja import Schema
from pydantic import PlainSerializer

from .money import CENT

# Money leaves the API as a decimal string with two places ("120.00"), never a float.
Money = Annotated[Decimal, PlainSerializer(lambda d: str(Decimal(d).quantize(CENT)), return_type=str)]


class RevisionOut(Schema):
    old_amount: Money
    new_amount: Money
    reason: str
    created_by: str | None
    created_at: datetime


class LedgerEntryOut(Schema):
    refund_id: int
    amount: Money
    original_amount: Money
    currency: str
    status: str
    corrected: bool
    provider_ref: str | None
    needs_review: bool
    idempotency_key: str
    approval: str | None
    destination: str | None
    items: list[str]
    source: str
    created_at: datetime
    revisions: list[RevisionOut]


class OrderLineOut(Schema):
    id: str
    name: str
    price: Money  # per unit
    quantity: int
    refunded_quantity: int


class OrderLedgerOut(Schema):
    order: str
    customer: str
    status: str
    total: Money
    currency: str
    refunded_total: Money
    refundable: Money
    # The order's lines with their units and the units the ledger already refunded.
    items: list[OrderLineOut]
    entries: list[LedgerEntryOut]
